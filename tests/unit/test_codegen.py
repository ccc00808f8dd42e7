"""Tests for aot_tune.codegen: the generated modules checked into git."""

from __future__ import annotations

import ast
import json
import random
import re
import subprocess
import sys
from pathlib import Path

from aot_tune import codegen
from aot_tune.cache import config_from_proto, config_to_proto
from aot_tune.tuning_schema import TuningCache, TuningRecord

ROOT = Path(__file__).resolve().parents[2]
KEY = ("M", "N")
MEASURED_AT = "2025-03-04T05:06:07+00:00"


def record(device: str, dtype: str, shape: tuple[int, int], best: dict | None, fingerprint: str,
           kernel: str = "gemm", measured_at: str = MEASURED_AT) -> TuningRecord:
    r = TuningRecord(kernel=kernel, dtype=dtype, fingerprint=fingerprint, measured_at=measured_at)
    r.key_names.extend(KEY)
    r.shape.extend(shape)
    if device == "interpreter":
        r.device.key, r.device.name, r.device.compute_capability, r.device.backend = (
            "interpreter", "Triton interpreter (CPU)", "cpu", "interpreter")
    else:
        r.device.key, r.device.name, r.device.compute_capability, r.device.backend = (
            device, "NVIDIA H100 80GB HBM3", "9.0", "cuda")
    r.toolchain.triton, r.toolchain.torch = "3.6.0", "2.9.0"
    if best is not None:
        config_to_proto("id-" + fingerprint, best, r.best)
    return r


def records() -> list[TuningRecord]:
    return [
        record("h100-sxm", "float16", (256, 256), {"BLOCK_M": 64, "num_warps": 4, "EVEN": True}, "f1"),
        record("h100-sxm", "float16", (4096, 4096), {"BLOCK_M": 128, "num_warps": 8, "EVEN": True}, "f2"),
        record("h100-sxm", "bfloat16", (256, 256), {"BLOCK_M": 32, "num_warps": 4, "EVEN": False}, "f3"),
        record("h100-sxm", "bfloat16", (1024, 256), None, "f4"),  # nothing passed: no best
        record("interpreter", "float16", (64, 64), {"BLOCK_M": 16, "num_warps": 1, "EVEN": True}, "f5"),
        record("interpreter", "float32", (64, 64), {"BLOCK_M": 16, "num_warps": 2, "EVEN": True}, "f6"),
        record("h100-sxm", "float16", (256, 256), {"BLOCK_M": 999}, "other", kernel="softmax"),
    ]


def cache_of(recs: list[TuningRecord]) -> TuningCache:
    cache = TuningCache(schema_version=1)
    cache.records.extend(recs)
    return cache


def render(recs: list[TuningRecord] | None = None) -> str:
    return codegen.render_module("gemm", KEY, cache_of(records() if recs is None else recs), "tuning.yaml")


def load(text: str) -> dict:
    namespace: dict = {}
    exec(compile(text, "<generated>", "exec"), namespace)  # noqa: S102 - our own rendered module
    return namespace


EXPECTED_TABLES = {
    "h100-sxm": {
        (256, 256, "bfloat16"): {"BLOCK_M": 32, "EVEN": False, "num_warps": 4},
        (256, 256, "float16"): {"BLOCK_M": 64, "EVEN": True, "num_warps": 4},
        (4096, 4096, "float16"): {"BLOCK_M": 128, "EVEN": True, "num_warps": 8},
    },
    "interpreter": {
        (64, 64, "float16"): {"BLOCK_M": 16, "EVEN": True, "num_warps": 1},
        (64, 64, "float32"): {"BLOCK_M": 16, "EVEN": True, "num_warps": 2},
    },
}


def test_rendered_module_is_valid_python_with_the_tables() -> None:
    text = render()
    ast.parse(text)
    module = load(text)
    assert module["KERNEL"] == "gemm"
    assert module["KEY"] == ("M", "N")
    assert module["TABLES"] == EXPECTED_TABLES
    assert module["DEVICES"] == {
        "h100-sxm": {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"},
        "interpreter": {"name": "Triton interpreter (CPU)", "compute_capability": "cpu"},
    }
    # the record without best is skipped, other kernels' records are not included
    assert (1024, 256, "bfloat16") not in module["TABLES"]["h100-sxm"]
    assert "999" not in text


def test_rendered_lookup_exact_and_nearest() -> None:
    lookup = load(render())["lookup"]
    assert lookup("h100-sxm", "float16", M=4096, N=4096)["BLOCK_M"] == 128
    assert lookup("h100-sxm", "float16", M=300, N=300)["BLOCK_M"] == 64
    assert lookup("h100-sxm", "bfloat16", M=8192, N=8192)["BLOCK_M"] == 32
    assert lookup("interpreter", "float32", M=64, N=64)["num_warps"] == 2
    assert lookup("h100-sxm", "float32", M=256, N=256) is None
    assert lookup("a100-sxm", "float16", M=256, N=256) is None


def test_render_is_byte_for_byte_deterministic() -> None:
    first = render()
    assert render() == first
    for seed in range(5):
        shuffled = records()
        random.Random(seed).shuffle(shuffled)
        assert render(shuffled) == first


def test_tables_are_sorted_by_dtype_then_shape() -> None:
    text = render()
    h100 = text.index("    'h100-sxm': {\n", text.index("TABLES = {"))
    lines = [ln.strip() for ln in text[h100:].splitlines()[1:4]]
    assert lines[0].startswith("(256, 256, 'bfloat16')")
    assert lines[1].startswith("(256, 256, 'float16')")
    assert lines[2].startswith("(4096, 4096, 'float16')")


def test_no_timestamp_in_the_module() -> None:
    text = render()
    assert MEASURED_AT not in text
    assert "2025" not in text
    assert not re.search(r"\d{4}-\d{2}-\d{2}", text)
    later = [record(r.device.key, r.dtype, tuple(r.shape), config_from_proto(r.best) if r.HasField("best")
                    else None, r.fingerprint, kernel=r.kernel, measured_at="2031-12-31T23:59:59+00:00")
             for r in records()]
    assert render(later) == text


def test_module_inputs_digest_reads_the_header(tmp_path) -> None:
    text = render()
    path = tmp_path / "gemm.py"
    path.write_text(text)
    value = codegen.module_inputs_digest(path)
    assert value is not None
    assert f"# inputs: {value}\n" in text
    assert re.fullmatch(r"[0-9a-f]{20}", value)
    assert codegen.module_inputs_digest(tmp_path / "missing.py") is None
    (tmp_path / "plain.py").write_text("x = 1\n")
    assert codegen.module_inputs_digest(tmp_path / "plain.py") is None


def digest_of(recs: list[TuningRecord], tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(render(recs))
    return codegen.module_inputs_digest(path)


def test_digest_changes_with_a_record_fingerprint_only(tmp_path) -> None:
    base = digest_of(records(), tmp_path, "base")

    changed_fp = records()
    changed_fp[1].fingerprint = "f2-edited"
    assert digest_of(changed_fp, tmp_path, "fp") != base

    changed_best = records()
    changed_best[1].best.params[0].int_value = 256  # same fingerprint, other result
    changed_best[1].measured_at = "2030-01-01T00:00:00+00:00"
    assert digest_of(changed_best, tmp_path, "best") == base

    other_kernel = records()
    other_kernel[-1].fingerprint = "other-edited"
    assert digest_of(other_kernel, tmp_path, "other") == base

    shuffled = records()
    random.Random(1).shuffle(shuffled)
    assert digest_of(shuffled, tmp_path, "shuffled") == base


def test_digest_depends_on_the_key_names(tmp_path) -> None:
    renamed = records()
    for r in renamed:
        r.key_names[:] = ["N", "M"]
    a = codegen.render_module("gemm", ("M", "N"), cache_of(records()), "tuning.yaml")
    b = codegen.render_module("gemm", ("N", "M"), cache_of(renamed), "tuning.yaml")
    (tmp_path / "a.py").write_text(a)
    (tmp_path / "b.py").write_text(b)
    assert codegen.module_inputs_digest(tmp_path / "a.py") != codegen.module_inputs_digest(tmp_path / "b.py")


def test_single_dim_key_renders_a_tuple() -> None:
    r = TuningRecord(kernel="vec", dtype="float32", fingerprint="v")
    r.key_names.append("N")
    r.shape.append(1024)
    r.device.key = "interpreter"
    config_to_proto("c", {"BLOCK": 256}, r.best)
    module = load(codegen.render_module("vec", ("N",), cache_of([r]), "tuning.yaml"))
    assert module["KEY"] == ("N",)
    assert module["TABLES"] == {"interpreter": {(1024, "float32"): {"BLOCK": 256}}}


_IMPORT_PROBE = """
import importlib, json, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
start = time.perf_counter()
module = importlib.import_module(sys.argv[3])
elapsed = time.perf_counter() - start
heavy_after_import = sorted(m for m in ("torch", "triton") if m in sys.modules)
config = module.lookup("h100-sxm", "float16", M=4096, N=4096)
heavy_after_lookup = sorted(m for m in ("torch", "triton") if m in sys.modules)
print(json.dumps({"elapsed": elapsed, "after_import": heavy_after_import,
                  "after_lookup": heavy_after_lookup, "config": config}))
"""


def test_generated_module_imports_no_torch_or_triton_and_is_fast(tmp_path) -> None:
    (tmp_path / "gemm_probe_tables.py").write_text(render())
    out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE, str(tmp_path), str(ROOT), "gemm_probe_tables"],
                         capture_output=True, text=True, timeout=60, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["after_import"] == []
    assert result["after_lookup"] == []
    assert result["config"] == {"BLOCK_M": 128, "EVEN": True, "num_warps": 8}
    assert result["elapsed"] < 0.05


def test_records_of_another_key_never_reach_a_table() -> None:
    """A record keyed by other dims is the manifest's stale record, not this key's answer."""
    text = codegen.render_module("gemm", ("N", "M"), cache_of(records()), "tuning.yaml")
    namespace: dict = {}
    exec(compile(text, "generated", "exec"), namespace)
    assert namespace["TABLES"] == {}


def test_a_module_without_our_header_is_ours_to_rewrite_only_where_git_committed_it_as_ours(tmp_path, monkeypatch):
    import pytest

    from aot_tune.errors import TuneError

    path = tmp_path / "gemm.py"
    path.write_text("<<<<<<< HEAD\n# Generated by aot_tune 0.1.0 ...\n")
    with pytest.raises(TuneError, match="not written by aot_tune"):  # no repository: the refusal
        codegen.ensure_generated(path)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    garbled = path.read_text()
    path.write_text(f"{codegen.HEADER} 0.1.0 ...\nTABLES = {{}}\n")
    subprocess.run([*git, "add", "gemm.py"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "tables"], cwd=tmp_path, check=True)
    path.write_text(garbled)
    assert "rewriting it from the cache" in codegen.ensure_generated(path)
    assert codegen.ensure_generated(tmp_path / "absent.py") is None
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))  # no git: the refusal again
    with pytest.raises(TuneError, match="not written by aot_tune"):
        codegen.ensure_generated(path)
