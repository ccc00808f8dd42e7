"""Dtype names and combinations, per-dtype tolerances, bool and string key dims: the manifest's
rules and its one-line errors, how records store such keys (older caches read unchanged), and
the runtime's combination and nearest-key rules."""
from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aot_tune import cache as cache_io
from aot_tune.dtypes import TOLERANCE
from aot_tune.errors import ManifestError
from aot_tune.manifest import load_manifest
from aot_tune.runtime.lookup import combo_of, key_distance, select_config
from aot_tune.tuning_schema import TuningCache, TuningRecord

REPO = Path(__file__).resolve().parents[2]

MANIFEST = """\
version: 1
defaults:
  dtype_combos:
    w8a16: {x: float16, w: int8}
  tolerance: {int8: 0.5}
kernels:
  act_add:
    kernel: kernels.act_add:act_add_kernel
    launch: kernels.act_add:act_add
    inputs: kernels.act_add:make_inputs
    reference: kernels.act_add:reference
    key: [n, activation, negate]
    dtype_combos:
      fp8_in: {x: float8_e4m3fn, w: bfloat16}
    dtypes: [e5m2, int8, uint8, w8a16, fp8_in, fp16]
    tolerance: {fp8_in: 0.05}
    space:
      BLOCK: [64, 128]
      num_warps: [1, 2]
    constraints:
      - "BLOCK == 128 if activation == 'relu' else BLOCK == 64"
      - "num_warps == 1 or not negate"
    shapes:
      - grid: {n: [300, 4096], activation: [none, relu], negate: [true, false]}
    default_config: {BLOCK: "128 if activation == 'relu' else 64", num_warps: 1}
    cost: {bytes: "3 * n * dtype_bytes"}
"""


def load(tmp_path: Path, text: str):
    (tmp_path / "kernels").mkdir(exist_ok=True)
    shutil.copy(REPO / "tests" / "fixtures" / "act_add.py", tmp_path / "kernels" / "act_add.py")
    (tmp_path / "tuning.yaml").write_text(text)
    return load_manifest(tmp_path / "tuning.yaml")


def error(tmp_path: Path, old: str, new: str) -> tuple[int, str]:
    assert old in MANIFEST, old
    text = MANIFEST.replace(old, new, 1)
    with pytest.raises(ManifestError) as info:
        load(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message and "; fix: " in message
    return info.value.line, message


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_torch_dtype_names_aliases_and_combinations(tmp_path):
    spec = load(tmp_path, MANIFEST).kernel("act_add")
    assert spec.dtypes == ("float8_e5m2", "int8", "uint8", "w8a16", "fp8_in", "float16")
    assert spec.combo_table == {"w8a16": (("x", "float16"), ("w", "int8")),
                                "fp8_in": (("x", "float8_e4m3fn"), ("w", "bfloat16"))}
    assert spec.shapes[0] == (300, "none", True)
    # fp8 and bfloat16 (in a combination too) are not computed by the interpreter
    assert spec.dtypes_for("interpreter") == ("int8", "uint8", "w8a16", "float16")
    assert spec.dtypes_for("cuda") == spec.dtypes
    # defaults per dtype, the loosest member for a combination, the manifest's overrides
    assert spec.tolerance_for("float16") == TOLERANCE["float16"] < spec.tolerance_for("float8_e5m2")
    assert spec.tolerance_for("w8a16") == TOLERANCE["float16"]
    assert (spec.tolerance_for("int8"), spec.tolerance_for("fp8_in"), spec.tolerance_for("uint8")) == (0.5, 0.05, 0)
    # dtype_bytes of a combination is its first argument's, and so is the datasheet peak judging it
    assert spec.cost.work({"n": 100, "activation": "none", "negate": True}, "fp8_in").bytes == 300
    assert (spec.cost.peak_dtype("fp8_in"), spec.cost.peak_dtype("w8a16"), spec.cost.peak_dtype("int8")) == \
        ("float8_e4m3fn", "float16", "int8")
    from aot_tune.runtime.devices import device_peak
    hopper, ampere = device_peak("NVIDIA H100 80GB HBM3"), device_peak("NVIDIA A100-SXM4-80GB")
    assert hopper.matrix_tflops["float8_e4m3fn"] == 2 * hopper.matrix_tflops["float16"]
    assert "float8_e4m3fn" not in ampere.matrix_tflops and ampere.matrix_tflops["int8"] == 624
    assert spec.default_config.resolve(spec.shape_dict((300, "relu", False))).as_dict()["BLOCK"] == 128


@pytest.mark.parametrize("old,new,needle,expected", [
    ("dtypes: [e5m2,", "dtypes: [e5m3,", "dtypes: [e5m3", "did you mean 'e5m2'"),
    ("w: int8}", "w: int9}", "w: int9}", "did you mean 'int8'"),
    ("tolerance: {fp8_in: 0.05}", "tolerance: {fp8_inn: 0.05}", "fp8_inn", "did you mean 'fp8_in'"),
])
def test_unknown_dtype_names_are_one_line_with_a_suggestion(tmp_path, old, new, needle, expected):
    line, message = error(tmp_path, old, new)
    assert line == line_of(MANIFEST.replace(old, new, 1), needle)
    assert "unknown dtype" in message and expected in message


def test_a_combination_naming_an_argument_the_launch_lacks(tmp_path):
    line, message = error(tmp_path, "fp8_in: {x: float8_e4m3fn, w: bfloat16}",
                          "fp8_in: {x: float8_e4m3fn, wt: bfloat16}")
    assert line == line_of(MANIFEST, "fp8_in: {x")
    assert "kernels.act_add.dtype_combos.fp8_in.wt" in message
    assert "not an argument of kernels.act_add:act_add" in message and "did you mean 'w'" in message


def test_a_combination_declared_in_defaults_is_checked_where_it_is_used(tmp_path):
    line, message = error(tmp_path, "w8a16: {x: float16, w: int8}", "w8a16: {x: float16, wt: int8}")
    assert line == line_of(MANIFEST, "w8a16: {x") and "defaults.dtype_combos.w8a16.wt" in message


@pytest.mark.parametrize("old,new,needle,key", [
    ("BLOCK == 128 if activation == 'relu' else BLOCK == 64", "BLOCK <= 64 * activation", "64 * activation",
     "kernels.act_add.constraints[0]"),
    ("num_warps == 1 or not negate", "num_warps <= 1 + negate", "1 + negate", "kernels.act_add.constraints[1]"),
    ('bytes: "3 * n * dtype_bytes"', 'bytes: "3 * n * dtype_bytes * negate"', "* negate", "kernels.act_add.cost.bytes"),
    ("activation == 'relu' else 64\"", "activation > 'none' else 64\"", "activation > 'none'",
     "kernels.act_add.default_config.BLOCK"),
])
def test_a_flag_in_a_numeric_expression_is_one_line(tmp_path, old, new, needle, key):
    line, message = error(tmp_path, old, new)
    assert line == line_of(MANIFEST.replace(old, new, 1), needle)
    assert key in message and "not a number" in message and "compare it with == or !=" in message


def test_a_key_dim_mixing_kinds_and_bad_names_are_refused(tmp_path):
    line, message = error(tmp_path, "activation: [none, relu]", "activation: [none, 3]")
    assert "mixes kinds" in message and line == line_of(MANIFEST, "- grid:")
    _, message = error(tmp_path, "activation: [none, relu]", "activation: [none, 'a b']")
    assert "is not a size, a bool or a short name" in message


def _record(shape: tuple) -> TuningRecord:
    record = TuningRecord(kernel="act_add", dtype="w8a16", fingerprint="fp", measured_at="2026-01-01T00:00:00+00:00")
    record.key_names.extend(["n", "activation", "negate"][: len(shape)])
    cache_io.set_record_shape(record, shape)
    record.device.key, record.device.name = "interpreter", "interpreter"
    record.device.compute_capability, record.device.backend = "cpu", "interpreter"
    return record


@pytest.mark.parametrize("name", ["c.pb", "c.txtpb"])
def test_bool_and_string_keys_round_trip_and_integer_shapes_stay_where_they_were(tmp_path, name):
    flagged, sizes = _record((300, "relu", True)), _record((300, 512))
    assert list(flagged.shape) == [] and len(flagged.key_values) == 3
    assert list(sizes.shape) == [300, 512] and not sizes.key_values  # what older aot_tune wrote and reads
    cache = TuningCache(schema_version=cache_io.SCHEMA_VERSION)
    cache.records.extend([flagged, sizes])
    cache_io.write_cache(cache, tmp_path / name)
    read = cache_io.read_cache(tmp_path / name)
    assert sorted(map(cache_io.record_shape, read.records), key=len) == [(300, 512), (300, "relu", True)]
    assert cache_io.record_defect(flagged) == ""


def test_a_record_with_both_encodings_or_a_bad_name_is_a_defect():
    both = _record((300, "relu", True))
    both.shape.extend([1, 2, 3])
    assert "does not fit" in cache_io.record_defect(both)
    bad = _record((300, "re lu", True))
    assert "does not fit" in cache_io.record_defect(bad)


def test_the_checked_in_caches_read_as_before():
    """Caches written before key_values existed: shapes read from the integer field."""
    for name in ("gemm", "vector_add"):
        cache = cache_io.read_cache(REPO / "generated" / f"{name}.tuning.pb")
        assert cache.records and all(cache_io.record_shape(r) == tuple(r.shape) for r in cache.records)


def test_combination_and_distance_rules():
    combos = {"fp8_w8a8": (("a", "float8_e4m3fn"), ("b", "float8_e4m3fn"), ("out", "bfloat16")),
              "fp8_ab": (("a", "float8_e4m3fn"), ("b", "float8_e4m3fn"))}
    assert combo_of(combos, ("float8_e4m3fn", "float8_e4m3fn", "bfloat16", "float32")) == "fp8_w8a8"
    assert combo_of(combos, ("float8_e4m3fn", "float8_e4m3fn", "float16")) == "fp8_ab"
    assert combo_of(combos, ("float16", "float8_e4m3fn")) is None
    assert key_distance((256, True), (1024, True)) == 2
    assert key_distance((256, True), (256, False)) == math.inf
    assert key_distance((256, 1), (256, True)) == math.inf  # a bool is not the size 1
    tables = {"h100-sxm": {(256, "gelu", "fp8_w8a8"): {"BLOCK": 1}, (4096, "none", "fp8_w8a8"): {"BLOCK": 2}}}
    assert select_config(tables, ("n", "act"), "h100-sxm", "fp8_w8a8", {"n": 4096, "act": "gelu"}) == {"BLOCK": 1}
    assert select_config(tables, ("n", "act"), "h100-sxm", "fp8_w8a8", {"n": 256, "act": "relu"}) is None


def test_the_interpreter_note_is_one_line_per_run():
    """The repository's own manifest: fp8_gemm and rmsnorm's bfloat16 are compiled, not measured."""
    code = ("from aot_tune.manifest import load_manifest; from aot_tune.pipeline.plan import build_plan; "
            "from aot_tune.bench.runner import INTERPRETER_DEVICE; m = load_manifest('tuning.yaml'); "
            "print(build_plan(m, INTERPRETER_DEVICE, m.kernels).compile_only_note())")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.count("\n") == 1 and "fp8_gemm fp8_w8a8" in out and "rmsnorm bfloat16" in out


def test_the_decorator_keys_a_launch_by_the_combination_its_tensors_make(tmp_path, monkeypatch):
    """A generated module with COMBOS: fp16 x with int8 w is w8a16, int8 with int8 is int8, and
    each launch runs its own entry (under the interpreter)."""
    import torch
    import triton
    import triton.language as tl

    import aot_tune
    from aot_tune.codegen import render_module

    cache = TuningCache()
    for dtype, block in (("w8a16", 32), ("int8", 64)):
        record = _record((300,))
        record.dtype, record.device.name = dtype, "Triton interpreter (CPU)"
        record.key_names[:] = ["n"]
        cache_io.config_to_proto("c", {"BLOCK": block, "num_warps": 1}, record.best)
        cache.records.append(record)
    combos = {"w8a16": (("x", "float16"), ("w", "int8"))}
    (tmp_path / "combo_tables.py").write_text(render_module("act_add", ("n",), cache, "tuning.yaml", combos))
    monkeypatch.syspath_prepend(str(tmp_path))

    @triton.jit
    def add(x_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        s = tl.load(x_ptr + offs, mask=mask).to(tl.float32) + tl.load(w_ptr + offs, mask=mask).to(tl.float32)
        tl.store(out_ptr + offs, s.to(out_ptr.dtype.element_ty), mask=mask)

    kernel = aot_tune.autotune(configs=[triton.Config({"BLOCK": 16}, num_warps=1)], key=["n"], table="act_add",
                               module="combo_tables")(add)
    try:
        for x_dtype, block in ((torch.float16, 32), (torch.int8, 64)):
            x, w = torch.ones(300, dtype=x_dtype), torch.full((300,), 2, dtype=torch.int8)
            out = torch.empty_like(x)
            assert kernel.config_for(x, w, out, 300)["BLOCK"] == block
            kernel[lambda meta: (triton.cdiv(300, meta["BLOCK"]),)](x, w, out, 300)
            assert (out == 3).all()
    finally:
        sys.modules.pop("combo_tables", None)


def test_a_declared_device_without_a_table_lacks_only_the_dtypes_it_can_run(tmp_path):
    """`doit check` asks a declared device for what it can make: on the interpreter no fp8 or
    bfloat16 entry is ever missing (their tables come from GPUs), as for a device with records."""
    from aot_tune.tables.check import _absent_coverage

    spec = load(tmp_path, MANIFEST).kernel("act_add")
    interpreter = _absent_coverage(spec, "interpreter", "declared in devices:")
    assert {entry.split()[0] for entry in interpreter.missing} == {"int8", "uint8", "w8a16", "float16"}
    gpu = _absent_coverage(spec, "h100-sxm", "declared in devices:")
    assert {entry.split()[0] for entry in gpu.missing} == set(spec.dtypes)
