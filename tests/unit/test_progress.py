"""Tests for aot_tune.runs.progress: the progress lines of long stages."""

from __future__ import annotations

import io
import itertools
import types

import pytest

from aot_tune.runs import progress
from aot_tune.runs.progress import Progress


class Clock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_final_line_is_always_printed(clock) -> None:
    stream = io.StringIO()
    p = Progress("bench", 3, stream=stream)
    for _ in range(3):
        clock.now += 0.1
        p.advance()
    out = lines(stream)
    assert out[-1].startswith("[bench] 3/3 done, ")
    assert "left" not in out[-1]
    assert p.done == 3


def test_partial_line_has_an_estimate_of_what_is_left(clock) -> None:
    stream = io.StringIO()
    p = Progress("bench", 40, stream=stream)
    for _ in range(11):
        p.advance()
    stream.truncate(0)
    stream.seek(0)
    clock.now += 31.0
    p.advance()
    assert lines(stream) == ["[bench] 12/40 done, 31.0s elapsed, about 1m12s left"]


def test_note_is_appended(clock) -> None:
    stream = io.StringIO()
    p = Progress("compile", 2, stream=stream)
    clock.now += 5
    p.advance("gemm/abc")
    assert lines(stream) == ["[compile] 1/2 done, 5.0s elapsed, about 5.0s left  gemm/abc"]


def test_intermediate_lines_are_rate_limited(clock) -> None:
    stream = io.StringIO()
    p = Progress("bench", 100, stream=stream)
    for _ in range(50):  # 50 steps over 5 seconds, 0.1 s apart
        clock.now += 0.1
        p.advance()
    printed = lines(stream)
    assert 2 <= len(printed) <= 4  # at most one line every 2 s
    assert all("/100 done" in line for line in printed)
    done_counts = [int(line.split()[1].split("/")[0]) for line in printed]
    assert done_counts == sorted(done_counts)
    assert all(b - a >= 19 for a, b in itertools.pairwise(done_counts))

    for _ in range(50):
        p.advance()  # no time passes: only the last step prints
    assert lines(stream)[-1].startswith("[bench] 100/100 done")
    assert len(lines(stream)) == len(printed) + 1


def test_long_durations(clock) -> None:
    stream = io.StringIO()
    p = Progress("bench", 2, stream=stream)
    clock.now += 2 * 3600 + 5 * 60
    p.advance()
    assert lines(stream) == ["[bench] 1/2 done, 2h05m elapsed, about 2h05m left"]



def test_with_a_prediction_the_estimate_is_the_predicted_seconds_left(clock) -> None:
    """A bench stage whose first task waited a minute for compiles, then took its predicted 1 s:
    elapsed / done would say 3 minutes are left; the tasks left are predicted at 5 s on 2 devices."""
    stream = io.StringIO()
    p = Progress("bench", 5, stream=stream, expected={"a": 1.0, "b": 1.0, "c": 2.0, "d": 1.0, "e": 1.0}, lanes=2)
    clock.now += 61.0
    p.advance(task="a", seconds=1.0)
    assert lines(stream) == ["[bench] 1/5 done, 1m01s elapsed, about 2.5s left"]  # max(5 s / 2, the longest 2 s)
    clock.now += 2.0
    p.advance(task="b", seconds=5.0)  # the other device's first: it also imported the kernel's modules
    assert lines(stream)[-1] == "[bench] 2/5 done, 1m03s elapsed, about 2.0s left"
    clock.now += 3.0
    p.advance(task="c", seconds=3.0)  # 1.5x its prediction: so will the others
    assert lines(stream)[-1] == "[bench] 3/5 done, 1m06s elapsed, about 1.5s left"


def test_without_a_prediction_for_the_tasks_left_the_estimate_is_elapsed_per_task(clock) -> None:
    stream = io.StringIO()
    p = Progress("compile", 3, stream=stream, expected={"a": 1.0}, lanes=2)
    clock.now += 10.0
    p.advance(task="a", seconds=0.5)
    assert lines(stream) == ["[compile] 1/3 done, 10.0s elapsed, about 20.0s left"]


def test_the_runs_estimate_converges_on_its_own_compiles(clock) -> None:
    """100 compiles predicted at 0.35 s on 2 workers, then 3 s of benches after them and 4 s of
    merge and the rest: the machine compiles at 0.7 s (twice the prediction), each worker's first
    compile at 2.1 s. From 20% of the compiles on, the run's estimate is within 20% of what is left."""
    stream = io.StringIO()
    run = progress.RunClock(bench_after_s=3.0, rest_s=4.0)
    compiles = Progress("compile", 100, stream=stream, expected={f"c{i}": 0.35 for i in range(100)}, lanes=2, run=run)
    Progress("bench", 4, stream=stream, expected={f"b{i}": 0.5 for i in range(4)}, lanes=1, run=run)
    lanes = [0.0, 0.0]  # when each worker is free
    ends = []
    for i in range(100):
        lane = lanes.index(min(lanes))
        took = 2.1 if i < 2 else 0.7
        lanes[lane] += took
        ends.append((lanes[lane], f"c{i}", took))
    end_of_run = max(lanes) + 3.0 + 4.0
    errors = []
    for when, task, took in sorted(ends):
        clock.now = 1000.0 + when
        compiles.advance(task=task, seconds=took)
        if compiles.done >= 20 and not compiles.finished:
            errors.append(run.left_s() / (end_of_run - when) - 1)
    assert errors and max(abs(e) for e in errors) < 0.2, (min(errors), max(errors))
    assert "(the run: about " in lines(stream)[0]


def test_once_the_compiles_are_done_the_run_waits_for_the_benches_and_the_rest(clock) -> None:
    stream = io.StringIO()
    run = progress.RunClock(bench_after_s=3.0, rest_s=4.0)
    compiles = Progress("compile", 1, stream=stream, expected={"c": 1.0}, run=run)
    benches = Progress("bench", 4, stream=stream, expected={n: 2.0 for n in "abcd"}, lanes=1, run=run)
    assert run.left_s() == pytest.approx(1.0 + 3.0 + 4.0)  # nothing finished: as predicted
    clock.now += 5.0
    benches.advance(task="a", seconds=6.0)  # the first: the device imported the kernel's modules
    assert run.left_s() == pytest.approx(1.0 + 3.0 + 4.0)
    benches.advance(task="b", seconds=4.0)  # twice its prediction, while compiles ran
    assert run.left_s() == pytest.approx(1.0 + 2 * 3.0 + 4.0)
    compiles.advance(task="c", seconds=1.0)
    assert run.left_s() == pytest.approx(2 * 2 * 2.0 + 4.0)  # the two benches left, at the finished one's pace
    benches.advance(task="c", seconds=4.0)
    benches.advance(task="d", seconds=4.0)
    assert run.left_s() is None  # the stages are done: no line asks


def test_each_workers_first_task_is_left_out_of_the_pace(clock) -> None:
    p = Progress("compile", 10, stream=io.StringIO(), expected={f"c{i}": 1.0 for i in range(10)}, lanes=2)
    p.advance(task="c0", seconds=3.0)
    p.advance(task="c1", seconds=3.0)
    assert p.scale() == 1.0  # the workers' first compiles warmed Triton up: the prediction stands
    for i in range(2, 5):
        p.advance(task=f"c{i}", seconds=2.0)
    assert p.scale() == 2.0


def test_each_kernels_tasks_go_at_that_kernels_pace(clock) -> None:
    """GEMM compiles take twice their prediction, vector_add's theirs: what is left of each goes
    at its own pace, and a kernel none of whose compiles finished at the stage's."""
    expected = {**{f"compile:gemm:sm90:s:{i}": 1.0 for i in range(6)},
                **{f"compile:add:sm90:s:{i}": 0.5 for i in range(4)}, "compile:softmax:sm90:s:0": 1.0}
    p = Progress("compile", len(expected), stream=io.StringIO(), expected=expected, lanes=1)
    for i in range(4):  # the first warms up, the next three take twice their prediction
        p.advance(task=f"compile:gemm:sm90:s:{i}", seconds=2.0)
    p.advance(task="compile:add:sm90:s:0", seconds=0.5)
    assert p.scale("gemm") == 2.0 and p.scale("add") == 1.0
    assert p.scale("softmax") == p.scale() == pytest.approx(6.5 / 3.5)
    # gemm: 2 x 1 s x 2, add: 3 x 0.5 s x 1, softmax: 1 s at the stage's pace
    assert p.left_s(10.0) == pytest.approx(4.0 + 1.5 + 6.5 / 3.5)


def test_kernels_that_finish_fast_do_not_speed_up_one_none_of_whose_tasks_finished(clock) -> None:
    """The first compiles to finish ran faster than predicted (0.4x); a slow kernel's compiles,
    still running, keep their own prediction rather than that pace."""
    expected = {**{f"compile:fast:sm90:s:{i}": 1.0 for i in range(5)},
                **{f"compile:slow:sm90:s:{i}": 6.0 for i in range(2)}}
    p = Progress("compile", len(expected), stream=io.StringIO(), expected=expected, lanes=1)
    for i in range(5):
        p.advance(task=f"compile:fast:sm90:s:{i}", seconds=0.4)
    assert p.scale() == pytest.approx(0.4) and p.scale("fast") == pytest.approx(0.4)
    assert p.scale("slow") == 1.0
    assert p.left_s(2.0) == pytest.approx(12.0)


def test_a_running_task_that_outran_its_kernels_pace_goes_by_its_own_prediction(clock) -> None:
    """The kernel's small config finished at half its prediction; its large one, predicted 10 s,
    has run 6 s: 4 s are left, not the floor of the halved 5 s; one that has run 2 s keeps the pace."""
    expected = {"w": 1.0, "compile:slow:sm90:s:0": 4.0, "compile:slow:sm90:s:1": 10.0, "compile:slow:sm90:s:2": 10.0}
    p = Progress("compile", len(expected), stream=io.StringIO(), expected=expected, lanes=1)
    p.advance(task="w", seconds=1.0)  # the lane's first: it warms up, and sets no pace
    p.start("compile:slow:sm90:s:1")
    clock.now += 4.0
    p.start("compile:slow:sm90:s:2")
    clock.now += 2.0
    p.advance(task="compile:slow:sm90:s:0", seconds=2.0)
    assert p.scale("slow") == pytest.approx(0.5)
    assert p.left_s(6.0) == pytest.approx(max((10.0 - 6.0) + (5.0 - 2.0), 10.0 - 6.0))


def test_while_compiles_run_the_benches_wait_for_the_devices_predicted_readiness(clock) -> None:
    """A short run: 2 compiles of 1 s left, devices predicted ready 6 s after the compiles began
    (a spawned worker's start-up and its import of the kernel's modules), then 12 s of benches: the
    benches end when the devices are ready and have done their work, not 6 s after the last
    compile; a device that waited for compiles has done none of it, whatever the time since."""
    stream = io.StringIO()
    run = progress.RunClock(bench_after_s=6.5, rest_s=4.0, device_wait_s=6.0, tail_s=0.5)
    compiles = Progress("compile", 3, stream=stream, expected={f"c{i}": 1.0 for i in range(3)}, run=run)
    benches = Progress("bench", 4, stream=stream, expected={f"b{i}": 3.0 for i in range(4)}, run=run)
    clock.now += 3.0
    compiles.advance(task="c0", seconds=1.0)
    assert run.left_s() == pytest.approx(max(2.0 + 0.5, 3.0 + 12.0) + 4.0)
    clock.now += 5.0  # the devices were due 2 s ago, and measured nothing: their work is all left
    assert run.left_s() == pytest.approx(12.0 + 4.0)
    benches.spent("b0", 1.5)  # two benches held the device 1.5 s each
    benches.spent("b1", 1.5)
    assert run.left_s() == pytest.approx(1.5 + 1.5 + 3.0 + 3.0 + 4.0)
    # then finished, the second at twice its prediction (the first of the lane is left out of the
    # pace): the two left and the tail go at that pace
    benches.advance(task="b0", seconds=3.0)
    benches.advance(task="b1", seconds=6.0)
    assert run.left_s() == pytest.approx(max(2.0 + 0.5 * 2, 2 * 3.0 * 2) + 4.0)
    # benches without a prediction of their own: no pace of theirs while none finished, so the
    # compiles' end and what the prediction says the benches add after them
    run = progress.RunClock(bench_after_s=6.5, rest_s=4.0, device_wait_s=6.0, tail_s=0.5)
    compiles = Progress("compile", 2, stream=stream, expected={"c0": 1.0, "c1": 1.0}, run=run)
    Progress("bench", 4, stream=stream, run=run)
    clock.now += 3.0
    compiles.advance(task="c0", seconds=1.0)
    assert run.left_s() == pytest.approx(1.0 + 6.5 + 4.0)


def test_a_running_task_counts_only_what_is_left_of_its_prediction(clock) -> None:
    """The stage's slow compile (8 s predicted) started with the others: once the short ones
    are done it has run 7 s, so about 1 s is left, not 8; past its prediction, a tenth of it."""
    p = Progress("compile", 3, stream=io.StringIO(), expected={"slow": 8.0, "a": 1.0, "b": 1.0}, lanes=2)
    p.start("slow")
    p.start("a")
    clock.now += 1.0
    p.advance(task="a", seconds=1.0)
    p.start("b")
    assert p.left_s(1.0) == pytest.approx(7.0)  # max((7 + 1) / 2, 7)
    clock.now += 6.0
    p.advance(task="b", seconds=1.0)
    assert p.left_s(7.0) == pytest.approx(1.0)
    clock.now += 3.0
    assert p.left_s(10.0) == pytest.approx(0.8)  # 10 s into 8: not about to end
    p.advance(task="slow", seconds=10.0)
    assert p.finished and not p._started


def test_a_bench_task_counts_what_is_left_of_its_prediction_by_the_device_time_it_held(clock) -> None:
    """Streaming benches wait for compiles without a device, most of them at once: a bench task's
    progress is the device time it reported (``spent``), not its wall time. Four tasks of 10 s
    that measured 6 s each while compiles ran leave 16 s, not 40 s, once the compiles are done."""
    benches = Progress("bench", 4, stream=io.StringIO(), expected={n: 10.0 for n in "abcd"}, lanes=1)
    for task in "abcd":
        benches.start(task)  # started long ago, waiting on compiles: the wall time says nothing
    clock.now += 100.0
    for task in "abcd":
        benches.spent(task, 6.0)
    assert benches.left_s(100.0) == pytest.approx(4 * 4.0)
    benches.spent("a", 12.0)  # past its prediction: a tenth of it still
    assert benches.left_s(100.0) == pytest.approx(1.0 + 3 * 4.0)
    benches.advance(task="a", seconds=12.0)
    assert "a" not in benches._spent


def test_a_bench_task_that_measured_some_of_its_configs_has_the_rest_of_them_left(clock) -> None:
    """A device that measures three times as fast as predicted (fla-core's l2norm under the
    interpreter) has done more than its seconds tell: two tasks of 10 s predicted for 20
    measurements, 15 made in 2.5 s, leave a quarter of their predictions, not 7.5 s each; one
    past its count (its finals) a tenth; one with no count yet goes by its device time."""
    benches = Progress("bench", 3, stream=io.StringIO(), expected={n: 10.0 for n in "abc"}, lanes=1,
                       measurements={"a": 20, "b": 20})
    for task in "ab":
        benches.spent(task, 2.5, measured=15)
    benches.spent("c", 2.5)
    assert benches.left_s(100.0) == pytest.approx(2.5 + 2.5 + 7.5)
    benches.spent("a", 3.0, measured=23)
    assert benches.left_s(100.0) == pytest.approx(1.0 + 2.5 + 7.5)
    benches.advance(task="a", seconds=3.0)
    assert "a" not in benches._measured
