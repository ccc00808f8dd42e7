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
