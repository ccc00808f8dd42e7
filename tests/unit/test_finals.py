"""A shape's finals: its fastest configs timed again side by side, interleaved, and the pick made
among them (aot_tune.select.finalists, aot_tune.pipeline.benching)."""
from __future__ import annotations

from types import SimpleNamespace

from aot_tune import cache as cache_io
from aot_tune.bench.runner import BenchRequest, ConfigMeasurement, DeviceModel
from aot_tune.manifest import BenchSettings
from aot_tune.pipeline.benching import Benches
from aot_tune.select import FINALS_BAND, FINALS_MAX, FINALS_ROUNDS, choose, finalists
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement

SETTINGS = BenchSettings(warmup_ms=2.0, rep_ms=20.0, l2_flush=True, l2_flush_bytes=None)
H100 = DeviceModel("cuda", "h100-sxm", "NVIDIA H100 80GB HBM3", "9.0", 1)


def entry(config: Config, median_ms: float, status: str = "ok", short_rep_ms: float = 0.0) -> Measurement:
    m = Measurement(status=status, median_ms=median_ms if status == "ok" else 0.0, runs=20 if status == "ok" else 0,
                    seconds=0.05, short_rep_ms=short_rep_ms)
    m.median_ci_low_ms, m.median_ci_high_ms = m.median_ms * 0.999, m.median_ms * 1.001
    cache_io.config_to_proto(config.id, config.as_dict(), m.config)
    return m


CONFIGS = [Config.from_dict({"BLOCK": b}) for b in range(1, 11)]
#: what a bench task measured before its finals: one config
FRESH = [ConfigMeasurement(CONFIGS[0].id, "ok", times_ms=[1.0])]


def test_the_finalists_are_the_fastest_full_timings_within_the_band_and_at_most_the_limit():
    medians = [1.0 + 0.01 * i for i in range(len(CONFIGS))]  # ten configs within 10% of the fastest
    measured = [entry(c, ms) for c, ms in zip(CONFIGS, medians)]
    assert [m.config.id for m in finalists(measured)] == [c.id for c in CONFIGS[:FINALS_MAX]]
    # past the band, a failed config and a short screening timing are never finalists
    outside = entry(CONFIGS[0], 1.0 + 2 * FINALS_BAND)
    few = [entry(CONFIGS[1], 1.0), outside, entry(CONFIGS[2], 0.5, status="runtime_error"),
           entry(CONFIGS[3], 0.5, short_rep_ms=2.0)]
    assert [m.config.id for m in finalists(few)] == [CONFIGS[1].id]


def test_where_no_config_was_timed_in_full_the_finalists_are_the_longest_screening_timings():
    """A ranked search screens on a GPU: its fastest short timings go to the finals, timed in full."""
    screened = [entry(c, 1.0 + 0.05 * i, short_rep_ms=5.0) for i, c in enumerate(CONFIGS[:5])]
    shorter = entry(CONFIGS[5], 0.5, short_rep_ms=2.0)  # a shorter rung never competes with a longer one
    assert [m.config.id for m in finalists([*screened, shorter])] == [c.id for c in CONFIGS[:5]]


def test_where_a_shape_had_finals_the_pick_is_among_them():
    """A config timed fast in a cool batch does not beat the finalists timed side by side later."""
    cool = entry(CONFIGS[0], 0.9)
    timed_again = [entry(CONFIGS[1], 1.1), entry(CONFIGS[2], 1.0)]
    for m in timed_again:
        m.finalist = True
    assert choose([cool, *timed_again]).config.id == CONFIGS[2].id
    assert choose([cool, *[entry(c, m.median_ms) for c, m in zip(CONFIGS[1:3], timed_again)]]).config.id == CONFIGS[0].id


class FakeHold:
    """A held device whose worker answers each request with the times given for its config."""

    def __init__(self, answers: dict[str, float | str]) -> None:
        self.answers, self.batches = answers, []

    def lease(self, upcoming=None):
        return self

    def measure_all(self, requests: list[BenchRequest], timeout_s: float, more=None) -> list[ConfigMeasurement]:
        self.batches.append(requests)
        out = []
        for r in requests:
            answer = self.answers[r.config_id]
            if isinstance(answer, str):
                out.append(ConfigMeasurement(r.config_id, answer, "the finals' check failed"))
            else:
                out.append(ConfigMeasurement(r.config_id, "ok", times_ms=[answer] * 25, method="graph",
                                             phase_seconds={"timed": 0.02}))
        return out


def bench_of(unit_configs: list[Config]):
    benches = Benches.__new__(Benches)
    benches.request = lambda kp, unit, config, settings, device: BenchRequest(
        kernel="gemm", root=".", launch_ref="kernels.gemm:matmul", inputs_ref="kernels.gemm:make_inputs",
        reference_ref="kernels.gemm:reference", shape=(("M", 4096),), dtype="float16", config_id=config.id,
        config=config.params, settings=settings)
    kp = SimpleNamespace(spec=SimpleNamespace(bench=SETTINGS))
    return benches, kp, SimpleNamespace(configs=unit_configs)


def test_the_finalists_go_to_the_device_in_one_interleaved_batch_and_their_entries_take_its_timings():
    configs = CONFIGS[:5]
    entries = {c.id: entry(c, ms) for c, ms in zip(configs, [1.0, 1.05, 1.1, 1.15, 2.0])}
    benches, kp, unit = bench_of(configs)
    hold = FakeHold({configs[0].id: 1.2, configs[1].id: 1.0, configs[2].id: "runtime_error", configs[3].id: 1.1})
    measured = benches._finals(kp, unit, hold, entries, FRESH, H100, None)
    (batch,) = hold.batches
    assert [r.config_id for r in batch] == [c.id for c in configs[:4]]  # 2.0 ms is past the band
    assert {r.final_rounds for r in batch} == {FINALS_ROUNDS} and len(measured) == 4
    assert [entries[c.id].finalist for c in configs] == [True, True, False, True, False]
    assert entries[configs[2].id].status == "runtime_error"  # a finalist that fails now keeps the failure
    assert entries[configs[0].id].median_ms == 1.2 and entries[configs[0].id].seconds > 0.05  # its seconds added
    assert choose(entries.values()).config.id == configs[1].id


def test_no_finals_on_the_interpreter_with_one_contender_or_nothing_measured():
    configs = CONFIGS[:3]
    benches, kp, unit = bench_of(configs)
    hold = FakeHold({})
    interpreter = DeviceModel("interpreter", "interpreter", "Triton interpreter", "cpu", 1)
    spread = {c.id: entry(c, ms) for c, ms in zip(configs, [1.0, 1.1, 1.2])}
    alone = {c.id: entry(c, ms) for c, ms in zip(configs, [1.0, 3.0, 4.0])}
    assert benches._finals(kp, unit, hold, spread, FRESH, interpreter, None) == []
    assert benches._finals(kp, unit, hold, alone, FRESH, H100, None) == [] and hold.batches == []
    # nothing measured by this task (its entries are the earlier record's, finals included)
    assert benches._finals(kp, unit, hold, spread, [], H100, None) == [] and hold.batches == []
    assert not any(m.finalist for m in [*spread.values(), *alone.values()])
