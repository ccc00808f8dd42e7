"""Dtypes and key dims beyond float sizes, end to end on the CPU: int8, a mixed combination
(float16 activations, int8 weights), fp8 (compiled for sm90, never measured by the
interpreter) and a string and a bool key dim, tuned by `doit tune` in a scratch project; then
the runtime picks the entry of each combination and never crosses a flag value."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from tunerun import REPO, doit, executed, make_project, tune, vector_add_manifest

from aot_tune.cache import read_cache, record_shape
from aot_tune.runtime import TunedTable, TuningWarning

MANIFEST = """\
version: 1
defaults:
  targets: [sm90]
  bench: {warmup_ms: 1, rep_ms: 1}
kernels:
  act_add:
    kernel: kernels.act_add:act_add_kernel
    launch: kernels.act_add:act_add
    inputs: kernels.act_add:make_inputs
    reference: kernels.act_add:reference
    key: [n, activation, negate]
    dtype_combos:
      w8a16: {x: float16, w: int8}
    dtypes: [int8, w8a16, float8_e4m3fn]
    tolerance: {w8a16: 0.001}
    space:
      BLOCK: [64, 128]
      num_warps: [1, 2]
    constraints:
      - "BLOCK == 128 if activation == 'relu' else BLOCK == 64"
      - "num_warps == 1 or not negate"
    shapes:
      - grid: {n: [300], activation: [none, relu], negate: [true, false]}
    cost: {bytes: "3 * n * dtype_bytes"}
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = make_project(tmp_path_factory.mktemp("dtypes"), MANIFEST)
    shutil.copy(REPO / "tests" / "fixtures" / "act_add.py", root / "kernels" / "act_add.py")
    return root


@pytest.fixture(scope="module")
def first_run(project: Path) -> subprocess.CompletedProcess:
    return tune(project, "-n", "2")


def test_int8_and_the_combination_are_measured_and_fp8_only_compiled(project, first_run):
    names = executed(first_run)
    benches = sorted(n for n in names if n.startswith("bench:"))
    # 4 shapes (activation x negate) x 2 measured dtypes; fp8 is never measured here
    assert len(benches) == 8 and not [n for n in benches if "float8" in n], benches
    assert "bench:act_add:interpreter:w8a16:300xrelux" + "True" in benches
    compiles = [n for n in names if n.startswith("compile:act_add:sm90:")]
    assert compiles, names
    notes = [line for line in first_run.stderr.splitlines() if "cannot compute" in line]
    assert len(notes) == 1 and "act_add float8_e4m3fn" in notes[0], first_run.stderr


def test_records_hold_bool_and_string_keys_and_the_combination(project, first_run):
    cache = read_cache(project / "generated" / "act_add.tuning.pb")
    keys = {(r.dtype, record_shape(r)) for r in cache.records}
    assert ("w8a16", (300, "relu", True)) in keys and ("int8", (300, "none", False)) in keys
    assert all(r.HasField("best") for r in cache.records)
    relu = [r for r in cache.records if record_shape(r)[1] == "relu"]
    assert {dict((p.name, p.int_value) for p in r.best.params)["BLOCK"] for r in relu} == {128}


def test_check_is_clean_without_interpreter_fp8_records(project, first_run):
    proc = doit(project, "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "missing" not in proc.stdout.split("\n", 1)[1]


def _table(project: Path) -> TunedTable:
    spec = importlib.util.spec_from_file_location("act_add_tables", project / "generated" / "act_add.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["act_add_tables"] = module
    return TunedTable("act_add", module="act_add_tables", default={"BLOCK": 1, "num_warps": 1})


def test_the_runtime_picks_the_entry_of_each_combination(project, first_run):
    table = _table(project)
    assert table.dtype_of(torch.float16, torch.int8) == "w8a16"
    assert table.dtype_of(torch.int8, torch.int8) == "int8"
    assert table.dtype_of(torch.float32, torch.int8) == "float32"  # no combination, no table entry
    module = sys.modules["act_add_tables"]
    for dtype in ("w8a16", "int8"):
        for activation in ("none", "relu"):
            with warnings.catch_warnings():
                warnings.simplefilter("error", TuningWarning)
                got = table.choose("interpreter", dtype, {"n": 300, "activation": activation, "negate": True})
            assert got == module.TABLES["interpreter"][(300, activation, True, dtype)]


def test_nearest_key_never_crosses_a_flag_and_strict_mode_refuses(project, first_run):
    table = _table(project)
    module = sys.modules["act_add_tables"]
    with pytest.warns(TuningWarning, match="nearest"):
        near = table.choose("interpreter", "w8a16", {"n": 5000, "activation": "relu", "negate": False})
    assert near == module.TABLES["interpreter"][(300, "relu", False, "w8a16")]
    with pytest.warns(TuningWarning, match="activation"):
        assert table.choose("interpreter", "w8a16", {"n": 300, "activation": "gelu", "negate": False}) is None
    strict = TunedTable("act_add", module="act_add_tables", strict=True)
    from aot_tune.runtime import UntunedError
    with pytest.raises(UntunedError):
        strict.choose("interpreter", "w8a16", {"n": 300, "activation": "gelu", "negate": False})


def test_a_kernel_only_gpus_measure_is_compiled_in_full_and_then_up_to_date(tmp_path):
    """No bench waits for its compiles on the interpreter: the run still ends with all of them done,
    so the next run has nothing to do."""
    project = make_project(tmp_path, vector_add_manifest("""\
    space: {BLOCK_SIZE: [256, 512], num_warps: [2, 4]}
    shapes: [{n: 4096}]
    dtypes: [bfloat16]
""", targets="[sm80, sm90]"))
    compiles = [n for n in executed(tune(project, "-n", "2")) if n.startswith("compile:")]
    assert len(compiles) == 8, compiles  # 4 configs x 2 targets
    assert len(list((project / ".aot_tune" / "compile").rglob("*.json"))) == len(compiles)
    assert executed(tune(project, "-n", "2")) == []
