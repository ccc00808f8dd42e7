"""The bench engine: statistics, the noise-aware pick, input rotation, and fault isolation.

The fault tests send planted configs (tests/fixtures/planted_kernels.py) through a real interpreter
device worker: a process that segfaults or hangs costs only its own config, the worker comes
back, and wrong or NaN outputs are rejected with their error.
"""
from __future__ import annotations

import random
from dataclasses import replace
from types import SimpleNamespace

import pytest
from tunerun import planted

from aot_tune.bench.engine import timing
from aot_tune.bench.engine.workload import MAX_INPUT_SETS, Rotation, plan_rotation
from aot_tune.bench.local.pool import DevicePool
from aot_tune.bench.runner import BenchRequest
from aot_tune.cache import median_interval
from aot_tune.manifest import BenchSettings
from aot_tune.select import TIE_FLOOR, choose, tied_with_fastest
from aot_tune.tuning_schema import Measurement


# -- statistics and the pick ----------------------------------------------------------------

def test_median_interval_brackets_the_median_and_narrows_with_more_samples():
    rng = random.Random(7)
    few = [rng.gauss(1.0, 0.05) for _ in range(20)]
    many = [rng.gauss(1.0, 0.05) for _ in range(2000)]
    for samples in (few, many):
        low, high = median_interval(samples)
        median = sorted(samples)[len(samples) // 2]
        assert low <= median <= high
    assert (median_interval(many)[1] - median_interval(many)[0]) < (median_interval(few)[1] - median_interval(few)[0]) / 4


def test_median_interval_of_few_samples_is_their_range():
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)
    assert median_interval([]) == (0.0, 0.0)


def measured(config_id: str, median: float, spread: float = 0.0, status: str = "ok") -> Measurement:
    m = Measurement(status=status, median_ms=median, runs=100 if status == "ok" else 0,
                    median_ci_low_ms=median - spread, median_ci_high_ms=median + spread)
    m.config.id = config_id
    return m


def test_overlapping_intervals_are_ties_and_clear_gaps_are_not():
    fastest, close, slow = measured("b", 1.000, 0.004), measured("a", 1.006, 0.004), measured("c", 1.10, 0.004)
    assert [m.config.id for m in tied_with_fastest([slow, close, fastest])] == ["b", "a"]
    assert choose([slow, close, fastest]).config.id == "b"


def test_a_tie_keeps_the_previous_pick_and_a_real_gap_does_not():
    fastest, previous = measured("b", 1.000, 0.004), measured("a", 1.006, 0.004)
    assert choose([fastest, previous], previous_pick="a").config.id == "a"
    slower = measured("a", 1.0 + 10 * TIE_FLOOR, 0.001)
    assert choose([fastest, slower], previous_pick="a").config.id == "b"


def test_failed_configs_are_never_chosen_even_when_faster():
    wrong = measured("a", 0.1, status="wrong_result")
    assert choose([wrong, measured("b", 2.0)], previous_pick="a").config.id == "b"
    assert choose([wrong]) is None


def test_records_without_intervals_compare_by_median_with_the_floor():
    old_a, old_b = measured("a", 1.0), measured("b", 1.002)
    old_a.ClearField("median_ci_low_ms"), old_a.ClearField("median_ci_high_ms")
    old_b.ClearField("median_ci_low_ms"), old_b.ClearField("median_ci_high_ms")
    assert len(tied_with_fastest([old_a, old_b])) == 2  # 0.2% apart: inside the floor
    assert choose([old_a, measured("c", 1.5)]).config.id == "a"


# -- input rotation for cold-L2 timing -----------------------------------------------------

def test_rotation_puts_the_cold_bytes_between_two_reads_of_one_set():
    rotation = plan_rotation(set_bytes=32 << 20, cold_bytes=120 << 20, free_bytes=100 << 30)
    assert rotation.sets == 5 and rotation.cold_l2  # 4 other sets of 32 MB pass in between
    assert plan_rotation(set_bytes=64 << 20, cold_bytes=120 << 20, free_bytes=100 << 30).sets == 3


def test_rotation_is_capped_by_memory_and_count_and_says_when_l2_stays_warm():
    assert plan_rotation(set_bytes=4 << 30, cold_bytes=120 << 20, free_bytes=8 << 30) == plan_rotation(4 << 30, 1, 8 << 30)
    tiny = plan_rotation(set_bytes=1024, cold_bytes=120 << 20, free_bytes=100 << 30)
    assert tiny.sets == MAX_INPUT_SETS and not tiny.cold_l2
    off = plan_rotation(set_bytes=1 << 20, cold_bytes=0, free_bytes=100 << 30)
    assert off.sets == 1 and not off.cold_l2


def test_a_screening_graph_cycles_through_half_the_rotation_and_a_full_timing_through_all(monkeypatch):
    """A graph's launches are its capture's host time (one Python launch each): a screening
    timing's graph of a µs kernel covers half the shape's sets, one L2's bytes between two reads
    of a set instead of two, and is still recorded cold; a full timing's covers every set."""
    captured = []
    monkeypatch.setattr(timing, "_capture", lambda launch, k, first, sets: captured.append(k) or (object(), None))
    settings = BenchSettings(warmup_ms=2.0, rep_ms=20.0, l2_flush=True, l2_flush_bytes=None)
    request = BenchRequest(kernel="gemm", root=".", launch_ref="m:f", inputs_ref="m:g", reference_ref=None,
                           shape=(("M", 256),), dtype="float16", config_id="c", config=(("BLOCK", 64),),
                           settings=settings)
    workload = SimpleNamespace(rotation=Rotation(sets=75, cold_l2=True), take_sets=lambda count: 0)
    for share, launches in ((1.0, 75), (1 / 9, 38), (0.25, 38)):
        config = timing.ConfigTiming(replace(request, settings=settings.screening(share), share=share), None, 0.0,
                                     {}, launch=lambda i: None, workload=workload, gpu_ms=0.007, host_ms=0.03,
                                     check_ms=0.007)
        config.capture()
        assert config.method == "graph" and captured[-1] == launches, (share, captured)
    assert captured == [75, 38, 38]


def _request(settings: BenchSettings, **changes) -> BenchRequest:
    """A GEMM config's request, as the engine's timing sees it."""
    return BenchRequest(kernel="gemm", root=".", launch_ref="m:f", inputs_ref="m:g", reference_ref=None,
                        shape=(("M", 4096),), dtype="float16", config_id="c", config=(("BLOCK", 64),),
                        settings=settings, **changes)


def _events_read_as(monkeypatch, sample_ms: float) -> None:
    """No GPU: each queued sample runs its body at once and reads ``sample_ms``."""
    monkeypatch.setattr(timing, "_record_events", lambda runs, body: [body(i) for i in range(runs)])
    monkeypatch.setattr(timing, "_read_events", lambda pairs: [sample_ms] * len(pairs))
    monkeypatch.setattr(timing, "_span_ms", lambda pairs: 0.0)


def test_interleaved_finals_report_each_phase_once_over_their_rounds(monkeypatch):
    """A finalist is checked and captured once, then timed in rounds; its measurement's phases
    (what a batch's wall time is shared out by, and what records keep) hold the check once and
    every round's warm-up and timed seconds, not the check once per round."""
    from aot_tune.bench.engine import pipeline

    ticks = iter(range(10_000))
    monkeypatch.setattr(timing.time, "perf_counter", lambda: float(next(ticks)))
    _events_read_as(monkeypatch, 0.5)
    settings = BenchSettings(warmup_ms=2.0, rep_ms=6.0, l2_flush=True, l2_flush_bytes=None)
    request = _request(settings, final_rounds=3)
    workload = SimpleNamespace(rotation=Rotation(sets=3, cold_l2=True), take_sets=lambda count: 0)
    config = timing.ConfigTiming(request, None, 0.0, {"check": 7.0}, launch=lambda i: None, workload=workload,
                                 gpu_ms=0.5, host_ms=0.01, check_ms=0.5)
    config.capture()
    assert config.method == "events" and "capture" not in config.phases
    config.rep_ms, config.min_samples = settings.rep_ms / 3, 4  # as _Pass.measure_interleaved sets them
    slices = []
    for round_ in range(3):
        config.start()
        slices.append(config.finish(keep=round_ < 2))
    joined = pipeline._joined(slices)
    assert joined.phase_seconds["check"] == 7.0
    assert joined.phase_seconds["warmup"] == 3 and joined.phase_seconds["timed"] == 6  # 1 tick per step and round
    assert len(joined.times_ms) == 12  # 4 samples of 0.5 ms fill each round's 2 ms


def test_a_config_warms_up_on_its_own_launches_only_where_nothing_runs_ahead_of_it(monkeypatch):
    """``warmup_ms`` of GPU time runs right before a config's timed launches. A pass's first
    config makes it up with its own launches (the check and probe count); behind another
    config's queued timed launches, and in its later rounds, it runs one launch of its own."""
    from aot_tune.bench.engine import pipeline

    launches = []
    _events_read_as(monkeypatch, 0.25)
    settings = BenchSettings(warmup_ms=2.0, rep_ms=5.0, l2_flush=True, l2_flush_bytes=None)
    request = _request(settings)
    workload = SimpleNamespace(rotation=Rotation(sets=3, cold_l2=True), take_sets=lambda count: 0)

    def own_warmup(ahead_ms: float, rounds: int = 1) -> list[int]:
        """The config's own untimed launches before each round's timed ones (events-timed: a
        0.25 ms kernel, 20 timed launches a round)."""
        config = timing.ConfigTiming(request, None, 0.0, {}, launch=launches.append, workload=workload,
                                     gpu_ms=0.25, host_ms=0.01, check_ms=0.25)
        config.capture()
        assert config.method == "events"
        counts = []
        for round_ in range(rounds):
            launches.clear()
            config.start(ahead_ms if round_ == 0 else 0.0)
            counts.append(len(launches) - 20)
            config.finish(keep=round_ < rounds - 1)
        return counts

    assert own_warmup(0.0) == [6]  # 2 ms less the check's and probe's 0.5 ms, in 0.25 ms launches
    assert own_warmup(2.0) == [1]
    assert own_warmup(1.0) == [2]  # what the queue ahead leaves of warmup_ms
    assert own_warmup(0.0, rounds=3) == [6, 1, 1]

    class Queued:
        def __init__(self, ms: float) -> None:
            self.ms = ms

        def queued_for(self, ms: float) -> bool:
            return self.ms >= ms

    first = SimpleNamespace(settings=settings)
    assert pipeline._ahead_ms(first, None) == 0.0
    assert pipeline._ahead_ms(first, Queued(1.0)) == 0.0  # too little ahead: the GPU may idle before it
    assert pipeline._ahead_ms(first, Queued(3.0)) == 2.0


def test_a_timing_holds_back_its_tail_for_after_a_load_and_reads_every_sample(monkeypatch):
    """A config started right before the pass loads kernels (which drains the GPU) queues all but
    about ``hold_back_ms`` of its timed launches, never all of them; ``resume`` queues the rest
    after one launch of its own, and ``finish`` reads the samples of both parts as one timing."""
    launches = []
    _events_read_as(monkeypatch, 0.25)
    settings = BenchSettings(warmup_ms=2.0, rep_ms=5.0, l2_flush=True, l2_flush_bytes=None)
    workload = SimpleNamespace(rotation=Rotation(sets=3, cold_l2=True), take_sets=lambda count: 0)

    def config() -> timing.ConfigTiming:
        made = timing.ConfigTiming(_request(settings), None, 0.0, {}, launch=launches.append, workload=workload,
                                   gpu_ms=0.25, host_ms=0.01, check_ms=0.25)
        made.capture()
        assert made.method == "events"
        return made

    held = config()
    held.start(2.0, hold_back_ms=1.0)
    assert held.held_back and len(launches) == 1 + 16  # one launch of its own, 16 of the 20 timed
    launches.clear()
    held.resume()
    assert not held.held_back and len(launches) == 1 + 4
    held.resume()  # nothing left to queue
    assert len(launches) == 5
    assert len(held.finish().times_ms) == 20

    launches.clear()
    most = config()
    most.start(2.0, hold_back_ms=100.0)
    assert len(launches) == 1 + 1  # at least one timed launch before the load
    launches.clear()
    plain = config()
    plain.start(2.0)
    assert not plain.held_back and len(launches) == 1 + 20


def test_samples_short_of_rep_ms_get_more_after_one_launch_of_their_own(monkeypatch):
    """A probe that read the kernel twice as slow as its samples leaves them covering half of
    ``rep_ms``: ``finish`` queues the missing samples behind one untimed launch of its own."""
    launches = []
    _events_read_as(monkeypatch, 0.25)
    settings = BenchSettings(warmup_ms=0.5, rep_ms=5.0, l2_flush=True, l2_flush_bytes=None)
    workload = SimpleNamespace(rotation=Rotation(sets=3, cold_l2=True), take_sets=lambda count: 0)
    config = timing.ConfigTiming(_request(settings), None, 0.0, {}, launch=launches.append, workload=workload,
                                 gpu_ms=0.5, host_ms=0.01, check_ms=0.5)
    config.capture()
    assert config.method == "events"
    config.start(0.5)
    assert len(launches) == 1 + 10  # 10 samples of the probe's 0.5 ms fill rep_ms
    launches.clear()
    assert len(config.finish().times_ms) == 20  # they read 0.25 ms: 10 more
    assert len(launches) == 1 + 10


# -- faults through a real device worker ---------------------------------------------------

#: How long a hanging config is waited for: each hang costs this much of the run. The planted
#: kernels' steps take well under a second on a busy 2-core CPU (at most 0.2 s between two of a
#: worker's messages), and a fresh worker's start-up is not counted in it.
HANG_TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    devices = DevicePool("interpreter", 1, str(tmp_path_factory.mktemp("triton-cache")))
    yield devices
    devices.close()


def measure(pool: DevicePool, request: BenchRequest, timeout_s: float = 120.0):
    with pool.lease() as lease:
        return lease.measure(request, timeout_s)


def test_correct_config_is_timed_and_checked(pool):
    result = measure(pool, planted(0))
    assert result.status == "ok" and result.times_ms and result.method == "wall", result
    assert result.error_norm == 0.0


@pytest.mark.parametrize("fault, message", [(1, "relative error"), (2, "NaN")])
def test_wrong_and_nan_outputs_are_rejected_with_their_error(pool, fault, message):
    result = measure(pool, planted(fault))
    assert result.status == "wrong_result" and message in result.message, result


def test_a_config_that_kills_its_worker_costs_only_itself(pool):
    result = measure(pool, planted(3))
    assert result.status == "crashed" and "device worker died" in result.message, result
    assert measure(pool, planted(0, block=128)).status == "ok"  # a fresh worker took over


def test_a_hanging_config_times_out_and_the_next_one_runs(pool, monkeypatch, capfd):
    from aot_tune.bench.local import pool as pool_module

    monkeypatch.setattr(pool_module, "PROGRESS_EVERY_S", 1.5)
    result = measure(pool, planted(4), timeout_s=HANG_TIMEOUT_S)
    assert result.status == "timeout", result
    quiet = [line for line in capfd.readouterr().err.splitlines() if "no word from the device worker" in line]
    assert len(quiet) == 3 and "config fault4-block64" in quiet[0] and "times out at 5s" in quiet[0], quiet
    assert measure(pool, planted(0, block=32)).status == "ok"


def test_a_batch_goes_on_past_crashes_hangs_and_wrong_results(pool):
    """One bench task's configs go to the worker as one batch: a config that kills the worker or
    hangs costs only itself, and the configs after it are measured by a fresh worker."""
    batch = [planted(0, block=32), planted(3), planted(0, block=64), planted(4), planted(1), planted(0, block=128)]
    with pool.lease() as lease:
        results = {r.config_id: r for r in lease.measure_all(batch, HANG_TIMEOUT_S)}
    assert sorted(results) == sorted(r.config_id for r in batch)
    statuses = {config_id: r.status for config_id, r in results.items()}
    assert statuses == {"fault0-block32": "ok", "fault3-block64": "crashed", "fault0-block64": "ok",
                        "fault4-block64": "timeout", "fault1-block64": "wrong_result", "fault0-block128": "ok"}


def test_configs_added_while_a_batch_runs_are_measured_once_and_a_crash_among_them_costs_only_itself(pool):
    """A bench adds the configs whose compiles landed while its batch runs (``more``, asked after
    each result): each is measured once, in the running pass or, where that pass had ended, in
    a pass of its own; one that kills the worker costs only itself, and the configs added with
    it or after it are measured by a fresh worker."""
    added = [[planted(0, block=16), planted(3, block=16)], [planted(1, block=16)], [], [planted(0, block=256)]]
    asked = []

    def more():
        asked.append(len(asked))
        return added.pop(0) if added else []

    batch = [planted(0, block=32), planted(0, block=64), planted(0, block=128)]
    with pool.lease() as lease:
        results = [(r.config_id, r.status) for r in lease.measure_all(batch, 15.0, more=more)]
    assert sorted(results) == sorted([("fault0-block32", "ok"), ("fault0-block64", "ok"), ("fault0-block128", "ok"),
                                      ("fault0-block16", "ok"), ("fault3-block16", "crashed"),
                                      ("fault1-block16", "wrong_result"), ("fault0-block256", "ok")]), results
    assert not added and len(asked) == 6  # after each of the worker's results (the crash is none)


def test_a_bench_that_fails_to_add_configs_gets_its_batch_read_to_the_end_then_the_error(pool):
    """The worker's batch is read to its last message before ``more``'s error is raised, so the
    next lease of the device reads no result of this one."""
    def more():
        raise OSError("compile record unreadable")

    got = []
    with pool.lease() as lease:
        with pytest.raises(OSError, match="unreadable"):
            for result in lease.measure_all([planted(0, block=32), planted(0, block=64)], 15.0, more=more):
                got.append(result.config_id)
    assert sorted(got) == ["fault0-block32", "fault0-block64"]
    assert measure(pool, planted(1, block=32)).status == "wrong_result"  # its own result, not a stale one


def test_a_fault_with_several_configs_on_the_device_is_pinned_on_its_culprit(tmp_path, monkeypatch):
    """A GPU pass has several configs' work queued at once. When the worker dies or hangs with
    all of a batch named as on the device, the pool measures each suspect again on its own: the
    crash and the hang are blamed on their configs alone, and the others are measured."""
    from fixtures import suspects_worker

    from aot_tune.bench.local import pool as pool_module

    monkeypatch.setattr(pool_module, "worker_main", suspects_worker.main)
    devices = DevicePool("interpreter", 1, str(tmp_path / "triton-cache"))
    batch = [planted(0, block=32), planted(3), planted(0, block=64), planted(4), planted(1), planted(0, block=128)]
    try:
        with devices.lease() as lease:
            results = [(r.config_id, r.status) for r in lease.measure_all(batch, HANG_TIMEOUT_S)]
    finally:
        devices.close()
    assert sorted(results) == sorted([("fault0-block32", "ok"), ("fault3-block64", "crashed"),
                                      ("fault0-block64", "ok"), ("fault4-block64", "timeout"),
                                      ("fault1-block64", "wrong_result"), ("fault0-block128", "ok")]), results


def test_the_pass_profile_charges_idle_gaps_to_the_innermost_host_step():
    """tools.bench.profile_bench_pass: busy time is the union of kernel intervals; each idle gap is
    charged to the innermost host step running meanwhile, the rest to 'between steps'."""
    from tools.bench import profile_bench_pass as tool

    assert tool.merged([(20.0, 25.0), (0.0, 10.0), (5.0, 12.0)]) == [(0.0, 12.0), (20.0, 25.0)]
    assert tool.merged([]) == []
    steps = [(0.0, 30.0, "outer"), (14.0, 18.0, "inner"), (32.0, 34.0, "inner")]
    assert tool.innermost_segments(steps) == [(0.0, 14.0, 0), (14.0, 18.0, 1), (18.0, 30.0, 0), (32.0, 34.0, 2)]
    charged = tool.charge_gaps([(0.0, 12.0), (20.0, 25.0)], tool.innermost_segments(steps), (0.0, 40.0))
    assert charged == {0: 2.0 + 2.0 + 5.0, 1: 4.0, 2: 2.0, None: 2.0 + 6.0}
    assert tool.by_label(steps, charged) == {"outer": [9.0], "inner": [4.0, 2.0], "between steps": [8.0]}


def test_device_workers_import_the_kernels_modules_before_they_are_up(tmp_path):
    """A library's import (seconds) is paid while the worker starts, overlapping the compiles,
    not in the first batch; an import that fails leaves the worker up (its batch reports it)."""
    (tmp_path / "imported_ahead.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path(__file__).with_name('imported-by').write_text(str(os.getpid()))\n"
        "def launch(): pass\n")
    imports = [(str(tmp_path), "imported_ahead:launch"), (str(tmp_path), "no_such_module:launch")]
    devices = DevicePool("interpreter", 1, str(tmp_path / "triton-cache"), imports=imports)
    try:
        with devices.lease() as lease:
            lease.ready()
            worker_pid = devices.worker(lease.index).process.pid
            assert (tmp_path / "imported-by").read_text() == str(worker_pid)
    finally:
        devices.close()


def test_the_pass_profile_times_screenings_in_batches_as_a_search_sends_them():
    """tools.bench.profile_bench_pass --share/--batch: a shape's sampled configs as screening
    timings of that share of rep_ms, in passes of that many; bad values are refused."""
    from tools.bench import profile_bench_pass as tool

    full = tool.requests_for(tool.options(["--shape", "256,256,256", "--configs", "6"]))
    passes = tool.requests_for(tool.options(["--shape", "256,256,256", "--shape", "512,512,512", "--configs", "6",
                                             "--share", "0.25", "--batch", "4"]))
    assert [len(p) for p in passes] == [4, 2, 4, 2]
    assert [r.config_id for p in passes[:2] for r in p] == [r.config_id for r in full[0]]
    screened = passes[0][0]
    assert screened.share == 0.25
    assert screened.settings.rep_ms == full[0][0].settings.rep_ms * 0.25
    assert len(full) == 1 and full[0][0].share == 1.0
    for bad in (["--share", "0"], ["--share", "1.5"], ["--batch", "-1"]):
        with pytest.raises(SystemExit):
            tool.options(bad)
