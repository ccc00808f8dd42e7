"""Bench dims end to end: a kernel keyed on ``N`` alone, benchmarked on shapes that also name the
rows ``M`` (as libraries key a norm kernel on the hidden size and ignore the rows). The inputs
and constraints see ``M``; the records, the table, ``doit check`` and the runtime see ``N`` only,
and the table's pick for a key is the best geometric mean over its shapes."""
from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest
from tunerun import doit, executed, make_project, tune

from aot_tune.cache import read_cache, record_bench_dims, record_shape

MANIFEST = """\
version: 1
defaults:
  targets: [sm90]
  bench: {warmup_ms: 1, rep_ms: 1}
kernels:
  rmsnorm:
    kernel: kernels.rmsnorm:rmsnorm_kernel
    launch: kernels.rmsnorm:rmsnorm
    inputs: kernels.rmsnorm:make_inputs
    reference: kernels.rmsnorm:reference
    key: [N]
    space: {BLOCK_N: [128, 256], num_warps: [1, 2], num_stages: [1]}
    constraints:
      - "BLOCK_N >= next_pow2(N)"
      - "num_warps == 1 or M > 2"     # a bench dim in a constraint
    shapes:
      - grid: {M: [2, 8], N: [100]}
      - {N: 200, M: 4}
    dtypes: [float32]
    cost: {bytes: "2 * M * N * dtype_bytes"}
"""


def _tables(project: Path):
    """The generated module, loaded from its file (the repository has a generated package too)."""
    spec = importlib.util.spec_from_file_location("rmsnorm_bench_dims_tables", project / "generated" / "rmsnorm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = make_project(tmp_path_factory.mktemp("bench_dims"), MANIFEST)
    tune(root)
    return root


def test_records_are_keyed_by_the_key_and_name_their_bench_dims(project: Path) -> None:
    cache = read_cache(project / "generated" / "rmsnorm.tuning.pb")
    measured = sorted((record_shape(r), record_bench_dims(r)) for r in cache.records)
    assert measured == [((100,), (("M", 2),)), ((100,), (("M", 8),)), ((200,), (("M", 4),))]
    assert {tuple(r.key_names) for r in cache.records} == {("N",)}
    # the constraint saw M: on M=2 only one warp was a candidate
    (m2,) = [r for r in cache.records if record_bench_dims(r) == (("M", 2),)]
    assert {dict((p.name, p.int_value) for p in m.config.params)["num_warps"] for m in m2.measurements} == {1}


def test_the_table_holds_one_pick_per_key_the_best_geometric_mean(project: Path) -> None:
    module = _tables(project)
    assert module.KEY == ("N",)
    table = module.TABLES["interpreter"]
    assert sorted(table) == [(100, "float32"), (200, "float32")]
    records = [r for r in read_cache(project / "generated" / "rmsnorm.tuning.pb").records if record_shape(r) == (100,)]
    times: dict[str, list[float]] = {}
    for record in records:
        for m in record.measurements:
            if m.status == "ok":
                times.setdefault(m.config.id, []).append(m.median_ms)
    both = {cid: statistics.geometric_mean(t) for cid, t in times.items() if len(t) == len(records)}
    best = min(both, key=lambda cid: (both[cid], cid))
    chosen = next(m.config for r in records for m in r.measurements if m.config.id == best)
    assert table[(100, "float32")] == {p.name: p.int_value for p in chosen.params}
    assert table[(100, "float32")]["num_warps"] == 1  # the only warps every shape of the key ran


def test_check_report_and_runtime_see_the_key_alone(project: Path) -> None:
    proc = doit(project, "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    again = tune(project)
    assert executed(again) == [] and "nothing to do" in again.stdout
    report = doit(project, "report")
    assert report.returncode == 0, report.stderr
    summary = (project / "report" / "summary.md").read_text()
    assert "| 100 M=8 | float32 |" in summary and "the pick for the key over 2 shapes" in summary
    module = _tables(project)
    assert module.lookup("interpreter", "float32", N=200)["BLOCK_N"] == 256
    assert module.lookup("interpreter", "float32", N=150) is not None  # nearest key, over N alone


def test_a_shape_without_the_bench_dim_is_one_line(tmp_path: Path) -> None:
    root = make_project(tmp_path, MANIFEST.replace("{N: 200, M: 4}", "{N: 200}"))
    proc = doit(root, "tune", "--bench-backend", "interpreter")
    assert proc.returncode != 0
    line = (proc.stderr + proc.stdout).strip().splitlines()[-1]
    assert line.endswith("tuning.yaml:18: kernels.rmsnorm.shapes[1]: shape is missing bench dim 'M' "
                         "(kernels.rmsnorm.shapes[0].grid names it); fix: give every shape the same dims (N, M): "
                         "the inputs builder gets all of them"), line
