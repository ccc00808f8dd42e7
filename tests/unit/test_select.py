"""The pick of a key's table when its shapes differ only in bench dims (aot_tune.select.key_pick)."""
from __future__ import annotations

from aot_tune import cache as cache_io
from aot_tune.select import key_pick, selected_tables
from aot_tune.tuning_schema import TuningCache, TuningRecord


def record(rows: int, times: dict[str, float | None]) -> TuningRecord:
    """A record of key D=4096 measured with ``rows`` rows: config id -> median ms (None: failed)."""
    r = TuningRecord(kernel="norm", dtype="float16", key_names=["D"], shape=[4096])
    cache_io.set_record_bench_dims(r, [("T", rows)])
    r.device.key, r.device.name, r.device.backend = "h100-sxm", "NVIDIA H100 80GB HBM3", "cuda"
    r.device.compute_capability = "9.0"
    for cid, ms in sorted(times.items()):
        m = r.measurements.add(status="ok" if ms else "runtime_error", median_ms=ms or 0.0, runs=10 if ms else 0)
        cache_io.config_to_proto(cid, {"num_warps": int(cid[1:])}, m.config)
    fastest = min((cid for cid, ms in times.items() if ms), key=lambda cid: times[cid])
    cache_io.config_to_proto(fastest, {"num_warps": int(fastest[1:])}, r.best)
    return r


def test_one_shape_keeps_its_own_pick() -> None:
    config, seconds = key_pick([record(4096, {"w4": 2.0, "w8": 1.0})])
    assert config.id == "w8" and seconds == 0.001


def test_several_shapes_pick_the_best_geometric_mean_not_either_shapes_best() -> None:
    small = record(4096, {"w4": 1.0, "w8": 0.5, "w16": 0.6})
    large = record(16384, {"w4": 4.0, "w8": 5.0, "w16": 3.2})
    config, seconds = key_pick([small, large])
    assert config.id == "w16"  # small's best is w8, large's is w16; w16's geomean (1.39) beats w8's (1.58)
    assert abs(seconds - (0.6 * 3.2) ** 0.5 / 1000) < 1e-12


def test_a_config_failing_on_one_shape_of_the_key_is_no_pick() -> None:
    small = record(4096, {"w4": 1.0, "w8": 0.1})
    large = record(16384, {"w4": 4.0, "w8": None})
    assert key_pick([small, large])[0].id == "w4"


def test_selected_tables_hold_one_entry_per_key() -> None:
    cache = TuningCache(records=[record(4096, {"w4": 1.0, "w8": 0.5}), record(16384, {"w4": 4.0, "w8": 9.0})])
    (table,) = selected_tables(cache, "norm", ("D",)).values()
    assert [(e.key, e.dtype, e.config) for e in table.entries] == [((4096,), "float16", {"num_warps": 4})]
    assert selected_tables(cache, "norm", ("D", "T")) == {}  # keyed by other dims: not this manifest's
