"""tools.studies.retune_compare on two hand-made runs' records."""
from __future__ import annotations

import math

import pytest

from aot_tune import cache as cache_io
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement, TuningRecord
from tools.studies.retune_compare import compare

CONFIGS = [Config.from_dict({"B": b}) for b in (16, 32, 64, 128)]


def write(folder, kernel, name, times: dict[int, float], best: int, seconds: float = 0.1) -> None:
    record = TuningRecord(kernel=kernel, dtype="float16")
    for config in CONFIGS:
        b = dict(config.params)["B"]
        if b not in times:
            continue
        m = Measurement(status="ok", median_ms=times[b], seconds=seconds)
        cache_io.config_to_proto(config.id, config.as_dict(), m.config)
        record.measurements.append(m)
        if b == best:
            record.best.CopyFrom(m.config)
    (folder / kernel).mkdir(parents=True, exist_ok=True)
    (folder / kernel / name).write_bytes(record.SerializeToString())


def test_picks_are_timed_by_the_exhaustive_run_and_seconds_are_shared(tmp_path):
    full, ours = tmp_path / "full", tmp_path / "ours"
    write(full, "gemm", "a.pb", {16: 1.0, 32: 2.0, 64: 4.0, 128: 8.0}, best=16)
    write(full, "gemm", "b.pb", {16: 3.0, 32: 2.0, 64: 1.0, 128: 5.0}, best=64)
    write(ours, "gemm", "a.pb", {16: 1.1, 32: 2.1}, best=16)
    write(ours, "gemm", "b.pb", {32: 2.2}, best=32)  # 2x the exhaustive pick's median
    result = compare(full, ours)
    assert result["gemm"]["shapes"] == 2 and result["gemm"]["measured"] == 3 and result["gemm"]["candidates"] == 8
    assert result["gemm"]["share_of_exhaustive_seconds"] == pytest.approx(3 / 8)
    assert result["gemm"]["pick_geomean"] == pytest.approx(math.sqrt(2.0)) and result["gemm"]["pick_worst"] == 2.0
    assert result["all"]["picks_equal"] == 1


def test_differing_picks_are_timed_again_side_by_side_and_equal_ones_count_one(tmp_path):
    """On the interpreter (the same pool and engine as a GPU's, wall-clock timings): one shape's
    picks differ and are timed again as a pair; the other's agree and count 1.0."""
    from tunerun import make_project, vector_add_manifest

    from tools.studies.retune_compare import retime

    project = make_project(tmp_path / "project", vector_add_manifest("""\
    space: {BLOCK_SIZE: [64, 128], num_warps: [4]}
    shapes: [{n: 300}, {n: 500}]
    dtypes: [float32]
"""))
    small, large = Config.from_dict({"BLOCK_SIZE": 64, "num_warps": 4}), Config.from_dict({"BLOCK_SIZE": 128, "num_warps": 4})

    def record(folder, name: str, n: int, best: Config) -> None:
        r = TuningRecord(kernel="vector_add", dtype="float32", key_names=["n"], shape=[n])
        for config in (small, large):
            m = Measurement(status="ok", median_ms=1.0, seconds=0.1)
            cache_io.config_to_proto(config.id, config.as_dict(), m.config)
            r.measurements.append(m)
        cache_io.config_to_proto(best.id, best.as_dict(), r.best)
        (folder / "vector_add").mkdir(parents=True, exist_ok=True)
        (folder / "vector_add" / name).write_bytes(r.SerializeToString())

    full, ours = tmp_path / "full", tmp_path / "ours"
    record(full, "a.pb", 300, small)
    record(ours, "a.pb", 300, large)
    record(full, "b.pb", 500, small)
    record(ours, "b.pb", 500, small)
    rows = retime(full, ours, project, backend="interpreter")
    assert rows["vector_add"]["retimed_pairs"] == 1 and rows["all"]["retimed_pairs"] == 1
    geomean, worst = rows["vector_add"]["retimed_geomean"], rows["vector_add"]["retimed_worst"]
    assert 0 < geomean and math.isfinite(worst)
    # the pair's ratio r and the equal picks' 1.0: geomean sqrt(r), worst max(r, 1)
    assert geomean ** 2 == pytest.approx(worst) if geomean >= 1 else worst == 1.0
