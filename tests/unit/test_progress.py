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
    elapsed / done would say 3 minutes are left; the tasks left are predicted at 4 s on 2 devices."""
    stream = io.StringIO()
    p = Progress("bench", 4, stream=stream, expected={"a": 1.0, "b": 1.0, "c": 2.0, "d": 1.0}, lanes=2)
    clock.now += 61.0
    p.advance(task="a", seconds=1.0)
    assert lines(stream) == ["[bench] 1/4 done, 1m01s elapsed, about 2.0s left"]  # max(4 s / 2, the longest 2 s)
    clock.now += 2.0
    p.advance(task="b", seconds=2.0)  # the finished tasks took 1.5x their prediction: so will the others
    assert lines(stream)[-1] == "[bench] 2/4 done, 1m03s elapsed, about 3.0s left"


def test_without_a_prediction_for_the_tasks_left_the_estimate_is_elapsed_per_task(clock) -> None:
    stream = io.StringIO()
    p = Progress("compile", 3, stream=stream, expected={"a": 1.0}, lanes=2)
    clock.now += 10.0
    p.advance(task="a", seconds=0.5)
    assert lines(stream) == ["[compile] 1/3 done, 10.0s elapsed, about 20.0s left"]
