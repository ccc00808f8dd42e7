"""Replays of budgeted searches over exhaustive records, and tools.studies.pareto on them.

The records are synthetic exhaustive records with samples and phases, as a bench output holds
them; the last test runs the whole tool under the Triton interpreter, as it runs on a GPU.
"""
from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest
from tunerun import REPO, subprocess_env

from aot_tune import cache as cache_io
from aot_tune.bench.engine.timing import MIN_SCREENING_SAMPLES
from aot_tune.search import ranked, strategies as search
from aot_tune.manifest import SearchSettings
from aot_tune.search.replay import (exhaustive_seconds, keeps_samples, replay_finals, replay_shape, replay_suite,
                                   short_measurement)
from aot_tune.select import FINALS_MAX, choose, finalists
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement, TuningRecord

CONFIGS = [Config.from_dict({"BLOCK": b, "num_warps": w, "num_stages": s})
           for b in (64, 128, 256, 512) for w in (1, 2, 4, 8) for s in (1, 2, 3)]


def exhaustive_record(shape: tuple[int, ...], samples: int = 60, invalid: int = 2) -> TuningRecord:
    """One shape's exhaustive record: a smooth landscape whose best BLOCK moves with the shape."""
    rng = random.Random(shape[0])
    record = TuningRecord(kernel="vector_add", key_names=["n"], shape=list(shape), dtype="float16")
    record.device.key, record.device.name = "h200", "NVIDIA H200"
    record.device.compute_capability, record.device.backend = "9.0", "cuda"
    record.bench.rep_ms = 20
    for i, config in enumerate(CONFIGS):
        m = Measurement(config=None)
        cache_io.config_to_proto(config.id, config.as_dict(), m.config)
        if i < invalid:
            m.status, m.reason = "invalid", "shared_memory: too big"
        else:
            p = config.as_dict()
            base = math.exp(0.4 * (math.log2(p["BLOCK"]) - math.log2(shape[0]) / 2) ** 2
                            + 0.1 * abs(math.log2(p["num_warps"]) - 2) + 0.05 * p["num_stages"])
            m.status = "ok"
            cache_io.set_samples(m, [base * (1 + rng.gauss(0, 0.01)) for _ in range(samples)])
            m.phases.check, m.phases.warmup, m.phases.timed = 0.001, 0.003, 0.020
            m.seconds = 0.026
        record.measurements.append(m)
    record.best.CopyFrom(choose(record.measurements).config)
    return record


SUITE = [exhaustive_record((n,)) for n in (256, 512, 1024, 2048, 4096, 8192, 16384)]


def test_a_short_probe_is_a_prefix_of_the_samples_priced_without_the_skipped_timing():
    recorded = SUITE[0].measurements[5]
    short = short_measurement(recorded, 1 / 9, rep_ms=20)
    assert short.runs == 7 and list(short.times_ms) == list(recorded.times_ms[:7])  # ceil(60 / 9)
    assert short.short_rep_ms == pytest.approx(20 / 9)
    assert short.seconds == pytest.approx(0.026 - 0.020 * (1 - 7 / 60))
    few = Measurement()
    few.CopyFrom(recorded)
    cache_io.set_samples(few, list(recorded.times_ms[:12]))
    assert short_measurement(few, 1 / 9, rep_ms=20).runs == MIN_SCREENING_SAMPLES  # not ceil(12 / 9)
    third = short_measurement(recorded, 1 / 3, rep_ms=20)
    assert third.runs == 20 and third.median_ms == pytest.approx(sorted(recorded.times_ms[:20])[9:11][0], rel=0.05)
    failed = Measurement(status="crashed", seconds=3.0)
    assert short_measurement(failed, 0.5, 20).seconds == 3.0  # a crash costs what it cost


def test_a_merged_cache_is_told_apart_as_replaying_short_probes_at_full_price():
    """A merged cache keeps each measurement's seconds but none of its samples: a short probe
    there is the full timing at its full price, which a report must say (keeps_samples)."""
    merged = cache_io.without_samples(SUITE[0])
    recorded = merged.measurements[5]
    assert recorded.seconds > 0 and not recorded.times_ms
    assert short_measurement(recorded, 1 / 9, rep_ms=20).seconds == recorded.seconds
    assert keeps_samples(SUITE) and not keeps_samples([merged])


def test_a_budget_as_large_as_the_space_replays_the_exhaustive_picks():
    screened = sum(short_measurement(m, search.SCREEN_SHARE, 20).seconds
                   for r in SUITE for m in r.measurements if m.status == "ok")
    expected = {"random": exhaustive_seconds(SUITE),  # every config in full
                "surrogate": screened + search.FINALISTS * 0.026 * len(SUITE)}  # short, then finalists in full
    for strategy in ("random", "surrogate"):
        result = replay_suite(SUITE, SearchSettings(strategy, len(CONFIGS)), clock=lambda: 0.0)
        assert result.quality == 1.0 and result.worst == 1.0
        # the measurements' seconds exactly: the strategy's compute is priced by the clock, still here
        assert result.seconds - result.finals_seconds == pytest.approx(expected[strategy], rel=1e-6)
        # on a GPU's records the finals follow: 2 or more finalists a shape, each timed in full again
        finalists = [round(s.finals_seconds / 0.026) for s in result.shapes]
        assert all(2 <= n <= FINALS_MAX for n in finalists), finalists
        assert [s.finals_seconds for s in result.shapes] == pytest.approx([n * 0.026 for n in finalists])
    assert expected["surrogate"] < 0.5 * expected["random"]


def test_the_finals_replayed_time_the_fastest_in_full_and_the_pick_is_among_them():
    record = SUITE[3]
    short = {m.config.id: short_measurement(m, 0.25, 20) for m in record.measurements}
    measured = {cid: m for cid, m in list(short.items())[:20]}
    recorded = {m.config.id: m for m in record.measurements}
    spent = replay_finals(measured, recorded, in_timings=False)
    final = [m for m in measured.values() if m.finalist]
    assert sorted(m.config.id for m in final) == sorted(m.config.id for m in finalists(list(short.values())[:20]))
    assert len(final) >= 2 and all(not m.short_rep_ms and m.runs == 60 for m in final)  # the full timing
    assert spent == pytest.approx(0.026 * len(final))
    assert all(m.seconds == pytest.approx(short[m.config.id].seconds + 0.026) for m in final)
    assert choose(measured.values()).finalist
    interpreter = exhaustive_record((1024,))
    interpreter.device.backend = "interpreter"
    outcome, searched = replay_shape(interpreter, SearchSettings("random", 12), clock=lambda: 0.0)
    assert outcome.finals_seconds == 0 and not any(m.finalist for m in searched.measurements)


@pytest.mark.parametrize("strategy", ["successive_halving", "surrogate"])
def test_a_replay_meets_failed_compiles_as_a_run_compiling_on_demand_does(strategy):
    """The replay asks for the verdicts the bench stage would compile on demand: the failures it
    reaches are listed and free, the others never asked about, and the search is the one a run
    that compiles on demand makes (whatever it knew before)."""
    from aot_tune.search.strategies import run_search

    record = exhaustive_record((1024,), invalid=12)  # BLOCK 64 with any warps: every 64-config fails
    settings = SearchSettings(strategy, 9, seed=1)
    _, searched = replay_shape(record, settings, clock=lambda: 0.0)
    failed = {m.config.id for m in searched.measurements if m.status == "invalid"}
    listed = {m.config.id for m in record.measurements if m.status == "invalid"}
    assert failed and failed < listed  # reached some, not every failure of the space
    assert sum(m.status != "invalid" for m in searched.measurements) == 9
    by_id = {m.config.id: m for m in record.measurements}
    asked = []

    def on_demand(configs):  # the bench stage: compile these now, report the failures
        asked.extend(c.id for c in configs)
        return {c.id: by_id[c.id].reason for c in configs if by_id[c.id].status == "invalid"}

    def measure(config, share):
        return by_id[config.id] if share >= 1 else short_measurement(by_id[config.id], share, 20)

    real = run_search(settings, CONFIGS, on_demand, measure, clock=lambda: 0.0)
    assert set(real.measurements) == {m.config.id for m in searched.measurements} == set(asked)
    assert {cid for cid, m in real.measurements.items() if m.status == "invalid"} == failed


def test_budgeted_replays_cost_their_probes_and_short_timings_cost_less():
    total = exhaustive_seconds(SUITE)
    assert total == pytest.approx(0.026 * 46 * len(SUITE))
    # the strategies' own compute, which a replay times for real, left out: on a busy CPU (tests
    # two at a time) it put random's seconds 1.1% over the probes'
    still = lambda: 0.0  # noqa: E731
    random_ = replay_suite(SUITE, SearchSettings("random", 12), clock=still)
    halving = replay_suite(SUITE, SearchSettings("successive_halving", 12), clock=still)
    surrogate = replay_suite(SUITE, SearchSettings("surrogate", 12), clock=still)
    searching = {r: (r.seconds - r.finals_seconds) / total for r in (random_, halving)}  # the finals aside
    assert searching[random_] == pytest.approx(12 * len(SUITE) * 0.026 / total, rel=0.01)  # 2 of 12 drawn may be invalid
    assert searching[halving] < searching[random_]
    assert all(s.configs_measured == 12 for s in surrogate.shapes) and surrogate.quality < 1.1
    # near the edge the surrogate's path is chaotic: at 18 configs 1 seed of 12 misses one shape
    # (with 10 screening samples or 7), at 20 none does
    assert replay_suite(SUITE, SearchSettings("surrogate", 20)).quality == 1.0


def test_the_replay_searches_anchors_first_and_seeds_the_rest_from_them():
    result = replay_suite(SUITE, SearchSettings("surrogate", 6))
    order = [s.shape for s in result.shapes]
    from aot_tune.search.strategies import transfer_plan

    plan = transfer_plan([tuple(r.shape) for r in SUITE])
    anchors = [s for s in order if not plan[s]]
    assert order[:len(anchors)] == anchors and len(anchors) == 3


@pytest.fixture(scope="module")
def records_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("records") / "exhaustive.tuning.pb"
    cache_io.write_cache(cache_io.sorted_cache(SUITE), path)
    return path


def test_pareto_replays_saved_records_into_tables_and_json(records_file, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "tools.studies.pareto", "--out", str(out), "--records",
                           str(records_file), "--kernel", "vector_add", "--budgets", "4", "12", "--seeds", "2",
                           "--jobs", "2"], cwd=REPO, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "pareto.json").read_text())
    assert {(r["label"], r["budget"]) for r in report["summary"]} == \
        {(label, b) for label in ("random", "successive_halving", "surrogate", "surrogate-no-transfer") for b in (4, 12)}
    assert len(report["replay"]) == 4 * 2 * 2 and report["validation"] == []
    assert [t["ratio_at_most"] for t in report["targets"]] == [1.02, 1.05]
    table = (out / "pareto.md").read_text()
    assert "| surrogate | 12 |" in table and "within 2% at <= 25% of the exhaustive time" in table
    assert "phase 2: replay 4 strategies x 2 budgets x 2 seeds" in proc.stdout


def test_pareto_runs_end_to_end_under_the_interpreter(tmp_path):
    """The GPU flow on the CPU: exhaustive doit tune, replays, a real budgeted run compared with its replay."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "tools.studies.pareto", "--out", str(out), "--kernel",
                           "vector_add", "--shapes", "1024", "4096", "16384", "--budgets", "3", "6", "--seeds", "1",
                           "--strategies", "random", "surrogate", "--validate", "surrogate:3", "--backend",
                           "interpreter", "--jobs", "2"], cwd=REPO, capture_output=True, text=True, env=subprocess_env(),
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "pareto.json").read_text())
    assert len(report["exhaustive"]["per_shape"]) == 3 and report["exhaustive"]["seconds"] > 0
    (validation,) = report["validation"]
    assert (validation["label"], validation["budget"], validation["shapes"]) == ("surrogate", 3, 3)
    assert 0 < validation["real"]["time_share"] < 1 and validation["real"]["quality"] >= 0.5
    saved = cache_io.read_cache(out / "validate-surrogate-3.tuning.pb").records
    assert len(saved) == 3 and all(r.search.strategy == "surrogate" and r.search.configs_measured == 3 for r in saved)
    assert sum(len(m.times_ms) for r in cache_io.read_cache(out / "exhaustive.tuning.pb").records
               for m in r.measurements) > 0  # the exhaustive records keep their samples for later replays
    assert "phase 3: real doit tune with surrogate, 3 configs per shape" in proc.stdout


def test_the_first_probe_of_a_shape_pays_for_building_its_inputs():
    from aot_tune.search.replay import replay_shape, shape_setup_seconds
    from aot_tune.search.strategies import up_front

    record = TuningRecord()
    record.CopyFrom(SUITE[0])
    first = next(m for m in record.measurements if m.status == "ok")
    first.seconds += 0.5  # the exhaustive run built the shape's inputs during its first config
    assert shape_setup_seconds(record) == pytest.approx(0.5) and shape_setup_seconds(SUITE[0]) == pytest.approx(0.0)
    settings = SearchSettings("random", 5)
    drawn = {c.id for c in up_front(settings, [Config.from_dict(cache_io.config_from_proto(m.config))
                                               for m in record.measurements])}
    plain, _ = replay_shape(SUITE[0], settings, clock=lambda: 0.0)
    charged, _ = replay_shape(record, settings, clock=lambda: 0.0)
    assert charged.seconds - plain.seconds == pytest.approx(0.5 + (0.5 if first.config.id in drawn else 0.0))


def another_device(record: TuningRecord, factor: float, device: str = "h100-sxm") -> TuningRecord:
    """``record`` as measured on another GPU: every time ``factor`` times longer, stats only (a merged cache's)."""
    moved = cache_io.without_samples(record)
    moved.device.key, moved.device.name, moved.fingerprint = device, "NVIDIA H100 80GB HBM3", "other"
    moved.toolchain.triton = "3.6.0"
    for m in moved.measurements:
        m.median_ms *= factor
    return moved


def test_a_ranked_replay_ranks_from_another_devices_records():
    foreign = [another_device(r, 1.4) for r in SUITE]
    result = replay_suite(SUITE, SearchSettings("ranked"), foreign=foreign)
    assert result.quality == 1.0 and result.time_share < 0.4
    assert all(s.configs_measured < 20 for s in result.shapes)
    alone = replay_suite(SUITE, SearchSettings("ranked"), clock=lambda: 0.0)  # no source: all, screened, then finals
    assert alone.quality == 1.0 and all(s.configs_measured == len(CONFIGS) - 2 for s in alone.shapes)
    screened = sum(short_measurement(m, ranked.SCREEN_SHARE, 20).seconds
                   for r in SUITE for m in r.measurements if m.status == "ok")
    assert alone.seconds - alone.finals_seconds == pytest.approx(screened)
    assert screened < 0.6 * exhaustive_seconds(SUITE) and alone.finals_seconds > 0
    interpreter = [TuningRecord() for _ in SUITE]  # no finals there: every config in full
    for copy, record in zip(interpreter, SUITE):
        copy.CopyFrom(record)
        copy.device.backend = "interpreter"
    assert replay_suite(interpreter, SearchSettings("ranked"), clock=lambda: 0.0).time_share == pytest.approx(1.0, rel=0.05)


def test_a_replay_keeps_a_records_typed_key_and_bench_dims():
    """A key holding a bool (fp8_gemm's per-row scaling) and a bench dim replay as they were
    recorded: the record a search would have written names the same shape."""
    typed = TuningRecord()
    typed.CopyFrom(SUITE[2])
    del typed.shape[:]
    cache_io.set_record_shape(typed, (1024, False))
    cache_io.set_record_bench_dims(typed, [("batch", 8)])
    outcome, searched = replay_shape(typed, SearchSettings("random", 6))
    assert cache_io.record_full_shape(searched) == (1024, False, 8) == outcome.shape
    assert outcome.configs_measured <= 6


def test_pareto_replays_ranked_from_another_devices_cache(records_file, tmp_path):
    foreign = tmp_path / "h100.tuning.pb"
    cache_io.write_cache(cache_io.sorted_cache(another_device(r, 1.4) for r in SUITE), foreign)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "tools.studies.pareto", "--out", str(out), "--records",
                           str(records_file), "--kernel", "vector_add", "--strategies", "random", "--budgets", "4",
                           "--seeds", "1", "--jobs", "1", "--ranked-from", str(foreign)],
                          cwd=REPO, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranked = json.loads((out / "pareto.json").read_text())["ranked"]
    assert ranked["quality"] == 1.0 and ranked["time_share"] < 0.4 and len(ranked["shapes"]) == len(SUITE)
    assert "ranked from h100-sxm (triton 3.6.0): " in proc.stdout and ranked["line"] in (out / "pareto.md").read_text()
