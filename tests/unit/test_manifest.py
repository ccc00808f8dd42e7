"""Tests for aot_tune.manifest: parsing, defaults, shapes and every error class."""

from __future__ import annotations

import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest
from manifest_cases import BASE, assert_error, edit, fail, line_of, load

from aot_tune.errors import ManifestError, TuneError
from aot_tune.manifest import BenchSettings, KernelSpec, load_manifest

REPO = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- valid manifests


def test_valid_manifest_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = load(tmp_path, monkeypatch, BASE)
    assert m.path == tmp_path / "tuning.yaml" and m.path.is_absolute()
    assert m.root == tmp_path
    assert [k.name for k in m.kernels] == ["gemm", "softmax"]
    g = m.kernel("gemm")
    assert isinstance(g, KernelSpec)
    assert (g.kernel, g.launch, g.inputs, g.reference) == (
        "kernels.gemm:matmul_kernel", "kernels.gemm:matmul", "kernels.gemm:make_inputs", "kernels.gemm:reference",
    )  # fmt: skip
    assert g.key == ("M", "N", "K")
    assert [p for p, _ in g.space.params] == ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"]
    assert len(g.space.constraints) == 2 and g.space.constraints[0].line == line_of(BASE, "65536")
    assert 0 < g.space.size() < 576
    assert g.line == line_of(BASE, "  gemm:")
    assert g.shape_dict((1, 2, 3)) == {"M": 1, "N": 2, "K": 3}
    with pytest.raises(ValueError):
        g.shape_dict((1, 2))
    hash(g)  # frozen records are hashable


def test_defaults_and_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = load(tmp_path, monkeypatch, BASE)
    g, s = m.kernel("gemm"), m.kernel("softmax")
    # gemm inherits defaults (dtypes/bench from the file, the rest built in)
    assert g.dtypes == ("float16",)
    assert g.targets == ("sm80", "sm90")
    assert g.bench == BenchSettings(warmup_ms=10.0, rep_ms=20.0, l2_flush=True, l2_flush_bytes=None)
    assert (g.cache, g.generated) == ("generated/gemm.tuning.pb", "generated/gemm.py")
    # softmax overrides; bench merges key by key over defaults
    assert s.dtypes == ("float32", "bfloat16", "float16")
    assert s.targets == ("sm90", "sm100")
    assert s.bench == BenchSettings(warmup_ms=10.0, rep_ms=50.0, l2_flush=False, l2_flush_bytes=None)
    assert (s.cache, s.generated) == ("cache/softmax.txtpb", "gen/softmax_configs.py")


def test_builtin_defaults_without_defaults_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = edit("defaults:\n  dtypes: [fp16]\n  bench: {warmup_ms: 10}\n", "")
    g = load(tmp_path, monkeypatch, text).kernel("gemm")
    assert g.dtypes == ("float16",) and g.targets == ("sm80", "sm90")
    assert g.bench == BenchSettings(2.0, 20.0, True, None)


def test_defaults_paths_and_l2_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = edit(
        "  bench: {warmup_ms: 10}\n",
        '  bench: {l2_flush_bytes: 1048576}\n  cache: "c/{kernel}.pb"\n  targets: [sm_80]\n',
    )
    g = load(tmp_path, monkeypatch, text).kernel("gemm")
    assert g.cache == "c/gemm.pb" and g.targets == ("sm80",) and g.bench.l2_flush_bytes == 1048576


def test_devices_declared_in_defaults_and_per_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load(tmp_path, monkeypatch, BASE).kernel("gemm").devices == ()  # none declared: nothing required
    text = edit("  dtypes: [fp16]\n", "  dtypes: [fp16]\n  devices: [h200, h100-sxm, h200]\n")
    text = edit("    targets: [90, sm_100]\n", "    targets: [90, sm_100]\n    devices: [interpreter, a10]\n", text)
    m = load(tmp_path, monkeypatch, text)
    # deduplicated in order; a kernel's list replaces the defaults' (a10: a model the key table does not list)
    assert m.kernel("gemm").devices == ("h200", "h100-sxm")
    assert m.kernel("softmax").devices == ("interpreter", "a10")
    text = edit("    devices: [interpreter, a10]\n", "    devices: []\n", text)
    assert load(tmp_path, monkeypatch, text).kernel("softmax").devices == ()  # opts out of the defaults' list


def test_grid_expansion_and_dedup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = edit(
        "      - {M: 256, N: 256, K: 256}\n",
        "      - grid: {M: [1], N: [2], K: [3]}\n"
        "      - {M: 256, N: 256, K: 256}\n"
        "      - {K: 7, N: 8, M: 9}\n"
        "      - {M: 256, N: 256, K: 256}\n",
    )
    g = load(tmp_path, monkeypatch, text).kernel("gemm")
    # explicit entries first (in key order M, N, K), then grids in file order; duplicates dropped
    assert g.shapes == (
        (256, 256, 256), (9, 8, 7),
        (1, 2, 3),
        (256, 256, 4096), (512, 256, 256), (512, 256, 4096),
    )  # fmt: skip


def test_interpreter_shapes_default_and_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = load(tmp_path, monkeypatch, BASE)
    assert m.kernel("gemm").interpreter_shapes == m.kernel("gemm").shapes
    assert m.kernel("softmax").interpreter_shapes == ((1, 16),)
    assert m.kernel("softmax").shapes == ((4, 128),)


def test_manifest_pickles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = load(tmp_path, monkeypatch, BASE)
    again = pickle.loads(pickle.dumps(m))
    assert again == m
    g = again.kernel("gemm")
    assert g.space.configs_for(g.shape_dict(g.shapes[0])) == m.kernel("gemm").space.configs_for(
        {"M": 256, "N": 256, "K": 256}
    )


def test_select_and_unknown_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = load(tmp_path, monkeypatch, BASE)
    assert [k.name for k in m.select(["softmax", "gemm", "softmax"])] == ["softmax", "gemm"]
    assert m.select([]) == m.kernels
    with pytest.raises(TuneError) as info:
        m.select(["gemm", "gem"])
    assert str(info.value).startswith("unknown kernel 'gem' (known: gemm, softmax)")
    assert "did you mean 'gemm'" in str(info.value)
    with pytest.raises(TuneError, match="unknown kernel 'x'"):
        m.kernel("x")


def test_merge_keys_are_not_duplicates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = edit(
        "    bench: {rep_ms: 50, l2_flush: false}\n",
        "    bench:\n      <<: {rep_ms: 7, l2_flush: false}\n      rep_ms: 50\n",
    )
    assert load(tmp_path, monkeypatch, text).kernel("softmax").bench.rep_ms == 50.0


def test_import_does_not_pull_torch_or_triton() -> None:
    code = "import aot_tune.manifest, sys; print('torch' in sys.modules, 'triton' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_manifest_error_pickles_and_formats() -> None:
    err = ManifestError(
        "tuning.yaml", 12, "kernels.gemm.space.BLOCK_M", "expected a non-empty list, got 64", "write BLOCK_M: [64]"
    )
    assert (
        str(err)
        == "tuning.yaml:12: kernels.gemm.space.BLOCK_M: expected a non-empty list, got 64; fix: write BLOCK_M: [64]"
    )
    again = pickle.loads(pickle.dumps(err))
    assert (str(again), again.line, again.key) == (str(err), 12, "kernels.gemm.space.BLOCK_M")
    assert (
        str(ManifestError(Path("a/t.yaml"), None, "", "file not found", "check"))
        == "a/t.yaml: file not found; fix: check"
    )
    assert isinstance(err, TuneError)


# --------------------------------------------------------------------------- every error class: a case or a test


def test_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ManifestError) as info:
        load_manifest("nope/tuning.yaml")
    assert_error(info.value, None, "", "file not found", "; fix: ", shown="nope/tuning.yaml")


def test_yaml_syntax_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = edit("    key: [M, N, K]\n", "    key: [M, N, K\n")
    err = fail(tmp_path, monkeypatch, text)
    # YAML notices the missing ']' on the next line; the message points back at the start
    start = line_of(text, "key: [M, N, K")
    assert_error(err, start + 1, "", "invalid YAML", f"flow sequence (started at line {start})")


def mistake(name: str, old: str, new: str, at: int | str | tuple[str, int], key: str, *needles: str,
            fix: str | None = None) -> object:
    """One edit of BASE the loader must reject: the edit, then the error's ``file:LINE: key: problem``
    parts. ``at`` is the line: a number, or the (nth) line of the edited text containing a needle.
    ``fix``, where given, is the whole fix the error must suggest."""
    return pytest.param(old, new, at, key, needles, fix, id=name)


MISTAKES = [
    # the YAML and the top level
    mistake("yaml_tab_indentation", "    key: [M, N, K]\n", "\tkey: [M, N, K]\n", "\tkey", "", "invalid YAML", "'\\t'"),
    mistake("missing_version", "version: 1\n", "", 1, "version", "missing required key 'version'", "version: 1"),
    mistake("missing_version_and_kernels", BASE, "defaults:\n  dtypes: [fp16]\n", 1, "",
            "missing required keys 'version', 'kernels'"),
    mistake("wrong_version", "version: 1\n", "version: 2\n", 1, "version", "unsupported version 2", "set version: 1"),
    mistake("unknown_top_level_key_did_you_mean", "defaults:\n", "default:\n", 2, "default", "unknown key 'default'",
            "allowed: version, defaults, kernels", "did you mean 'defaults'?"),
    # kernel entries
    mistake("unknown_kernel_key", "    shapes:\n", "    shape:\n", "shape:", "kernels.gemm.shape",
            "unknown key 'shape'", "did you mean 'shapes'?"),
    mistake("unknown_bench_key", "{warmup_ms: 10}", "{warmup: 10}", "warmup:", "defaults.bench.warmup",
            "did you mean 'warmup_ms'?"),
    mistake("missing_required_kernel_key", "    launch: kernels.gemm:matmul\n", "", "  gemm:",
            "kernels.gemm.launch", "missing required key 'launch'"),
    mistake("every_missing_kernel_key_in_one_error",
            "    launch: kernels.gemm:matmul\n    inputs: kernels.gemm:make_inputs\n", "", "  gemm:",
            "kernels.gemm", "missing required keys 'launch', 'inputs'", fix="add launch:, inputs: under kernels.gemm "
            "(docs/reference/tuning-yaml.md)"),
    mistake("duplicate_kernel_name", "  softmax:\n", "  gemm:\n", ("  gemm:", 2), "kernels.gemm",
            "duplicate key 'gemm'", f"first at line {line_of(BASE, '  gemm:')}"),
    mistake("duplicate_nested_key", "      GROUP_M: [8]\n", "      GROUP_M: [8]\n      GROUP_M: [4]\n", "GROUP_M: [4]",
            "kernels.gemm.space.GROUP_M", "duplicate key"),
    mistake("bad_kernel_name", "  softmax:\n", "  Soft-Max:\n", "Soft-Max", "kernels.Soft-Max", "[a-z_][a-z0-9_]*",
            "'soft_max'"),
    mistake("bad_module_attr", "    launch: kernels.gemm:matmul\n", "    launch: kernels.gemm.matmul\n",
            "launch: kernels.gemm.matmul", "kernels.gemm.launch", "expected 'module.path:attr'", "kernels.gemm:matmul"),
    # space and constraints
    mistake("scalar_instead_of_list_in_space", "GROUP_M: [8]", "GROUP_M: 8", "GROUP_M: 8", "kernels.gemm.space.GROUP_M",
            "expected a non-empty list, got 8", fix="write GROUP_M: [8]"),
    mistake("empty_space_mapping", "      BLOCK: [128, 256]\n      num_warps: [4]\n", "      {}\n", ("space:", 2),
            "kernels.softmax.space", "no params"),
    mistake("key_dim_also_a_param", "      BLOCK: [128, 256]\n", "      ROWS: [128, 256]\n", "ROWS: [128",
            "kernels.softmax.space.ROWS", "both a key dim and a space param"),
    mistake("bad_num_warps", "num_warps: [2, 4, 8]", "num_warps: [2, 4, 6]", "num_warps: [2, 4, 6]",
            "kernels.gemm.space.num_warps[2]", "power of two from 1 to 32, got 6"),
    mistake("bad_num_stages", "num_stages: [3, 4, 5]", "num_stages: [0]", "num_stages: [0]",
            "kernels.gemm.space.num_stages[0]", "integer >= 1"),
    mistake("empty_space_after_constraints", "<= 65536", "<= 100", "<= 100", "kernels.gemm.constraints[0]",
            "rejects all 576 configs"),
    mistake("empty_space_from_several_constraints", '      - "BLOCK_M <= max(32, next_pow2(M))"\n',
            '      - "BLOCK_M > 64"\n      - "BLOCK_M < 64"\n', "constraints:", "kernels.gemm.constraints",
            "together reject all 576 configs"),
    mistake("constraint_with_unknown_name", "next_pow2(M)", "next_pow2(MM)", "next_pow2(MM)",
            "kernels.gemm.constraints[1]", "unknown name 'MM'", "did you mean 'M'?"),
    mistake("constraint_with_disallowed_syntax", "next_pow2(M)", "M.bit_length()", "bit_length",
            "kernels.gemm.constraints[1]", "attribute access"),
    mistake("constraint_failing_at_load", "<= 65536", "<= 65536 // (BLOCK_M - 32)", "BLOCK_M - 32",
            "kernels.gemm.constraints[0]", "ZeroDivisionError", "BLOCK_M=32"),
    # shapes
    mistake("shape_with_missing_dim", "{M: 256, N: 256, K: 256}", "{M: 256, N: 256}", "{M: 256, N: 256}",
            "kernels.gemm.shapes[0]", "missing key dim 'K'"),
    mistake("shape_with_extra_dim", "{M: 256, N: 256, K: 256}", "{M: 256, N: 256, K: 256, k: 2}", "k: 2",
            "kernels.gemm.shapes[0].k", "'k' differs from key dim 'K' only in case", "did you mean 'K'?"),
    mistake("bench_dim_in_one_shape", "{M: 256, N: 256, K: 256}", "{M: 256, N: 256, K: 256, T: 2}",
            "grid:", "kernels.gemm.shapes[1].grid", "missing bench dim 'T' (kernels.gemm.shapes[0] names it)",
            "give every shape the same dims (M, N, K, T)"),
    mistake("bench_dim_reserved", "{M: 256, N: 256, K: 256}", "{M: 256, N: 256, K: 256, cdiv: 2}", "cdiv: 2",
            "kernels.gemm.shapes[0].cdiv", "dim 'cdiv' is not a name a constraint can use"),
    mistake("grid_with_missing_dim", "grid: {M: [256, 512], N: [256], K: [256, 4096]}",
            "grid: {M: [256, 512], N: [256]}", "grid:", "kernels.gemm.shapes[1].grid", "missing key dim 'K'"),
    mistake("non_positive_shape_value", "{M: 256, N: 256, K: 256}", "{M: 256, N: 0, K: 256}", "N: 0",
            "kernels.gemm.shapes[0].N", "expected a positive integer, got 0"),
    mistake("non_positive_grid_value", "N: [256], K", "N: [-1], K", "N: [-1]", "kernels.gemm.shapes[1].grid.N[0]",
            "got -1"),
    # keys shared with defaults
    mistake("bad_dtype", "dtypes: [float32, bf16, half]", "dtypes: [float32, bfloat]", "bfloat]",
            "kernels.softmax.dtypes[1]", "unknown dtype 'bfloat'", "float16, bfloat16", "did you mean 'bfloat16'"),
    mistake("bad_target", "targets: [90, sm_100]", "targets: [90, sm90a]", "sm90a", "kernels.softmax.targets[1]",
            "unknown target 'sm90a'", "smNN"),
    mistake("device_key_not_normalized", "  dtypes: [fp16]\n", "  dtypes: [fp16]\n  devices: [h200, H100]\n",
            "devices:", "defaults.devices[1]", "'H100' is not a device key", fix="did you mean 'h100-sxm'?"),
    mistake("device_key_typo", "    targets: [90, sm_100]\n", "    targets: [90, sm_100]\n    devices: [interpeter]\n",
            "interpeter", "kernels.softmax.devices[0]", "unknown device key 'interpeter'",
            fix="did you mean 'interpreter'?"),
    mistake("device_key_not_a_string", "  dtypes: [fp16]\n", "  dtypes: [fp16]\n  devices: [90]\n", "devices:",
            "defaults.devices[0]", "expected a device key, got 90", "known keys: interpreter"),
    mistake("negative_rep_ms", "{rep_ms: 50, l2_flush: false}", "{rep_ms: -50, l2_flush: false}", "rep_ms: -50",
            "kernels.softmax.bench.rep_ms", "expected a positive number, got -50"),
    mistake("exponent_number_read_as_string", "{warmup_ms: 10}", "{warmup_ms: 1e3}", "1e3",
            "defaults.bench.warmup_ms", "got '1e3'", "1.0e+3"),
    mistake("l2_flush_must_be_bool", "l2_flush: false", "l2_flush: 0", "l2_flush: 0", "kernels.softmax.bench.l2_flush",
            "expected true or false"),
    mistake("search_error_points_at_the_key_line", "    bench: {rep_ms: 50, l2_flush: false}\n",
            "    bench: {rep_ms: 50, l2_flush: false}\n"
            "    search:\n      strategy: surrogate\n      budget: {configs: 10}\n      rungs: 2\n",
            "rungs: 2", "kernels.softmax.search.rungs", "does not take 'rungs'"),
    # output paths
    mistake("output_paths_must_differ", '    cache: "cache/{kernel}.txtpb"\n',
            '    cache: "generated/gemm.tuning.pb"\n', "    cache:", "kernels.softmax.cache",
            "also the cache path of kernel 'gemm'", "{kernel}"),
    mistake("bad_path_template", '"gen/{kernel}_configs.py"', '"gen/{name}.py"', "{name}",
            "kernels.softmax.generated", "placeholder"),
]


@pytest.mark.parametrize(("old", "new", "at", "key", "needles", "fix"), MISTAKES)
def test_mistake_names_line_and_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: str, new: str,
                                    at: int | str | tuple[str, int], key: str, needles: tuple[str, ...],
                                    fix: str | None) -> None:
    text = edit(old, new)
    err = fail(tmp_path, monkeypatch, text)
    line = at if isinstance(at, int) else line_of(text, at) if isinstance(at, str) else line_of(text, *at)
    assert_error(err, line, key, *needles)
    if fix is not None:
        assert err.fix == fix


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("", 1, "empty"),
        ("# only a comment\n", 1, "empty"),
        ("- a\n- b\n", 1, "top level"),
        ("version: 1\nkernels: {}\n", 2, "no kernels"),
        ("version: 1\nkernels:\n  gemm:\n", 3, "got nothing (null)"),
        ("version: 1\n? [a]\n: 1\n", 2, "unhashable"),
        ("version: 1\n1: x\nkernels: {}\n", 2, "keys must be strings"),
        ("version: 1\nkernels: !!python/object:os.system {}\n", 2, "invalid YAML"),
        ("version: 1\n---\nversion: 1\n", 2, "single document"),
    ],
)
def test_odd_documents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, line: int, needle: str) -> None:
    err = fail(tmp_path, monkeypatch, text)
    assert err.line == line and needle in str(err), str(err)


def test_binary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tuning.yaml").write_bytes(b"version: 1\n\xff\xfe\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ManifestError, match="not UTF-8"):
        load_manifest("tuning.yaml")


def test_mutations_raise_only_manifest_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random edits either load or raise ManifestError: never another exception."""
    rng = random.Random(1234)
    alphabet = ":-[]{}\n #'\"!&*,a1_0."
    lines = BASE.splitlines(keepends=True)
    for _ in range(150):
        text, op = list(BASE), rng.randrange(4)
        pos = rng.randrange(len(text))
        if op == 0:
            del text[pos]
        elif op == 1:
            text.insert(pos, rng.choice(alphabet))
        elif op == 2:
            text[pos] = rng.choice(alphabet)
        else:
            i = rng.randrange(len(lines))
            text = list("".join(lines[:i] + lines[i + 1 :] if rng.random() < 0.5 else lines[: i + 1] + lines[i:]))
        try:
            load(tmp_path, monkeypatch, "".join(text))
        except ManifestError as err:
            assert err.fix and "\n" not in str(err)
