"""The compile queue's order: references first, one compile of each kernel early, then the compile
expected to take longest from what the run learned of its kernel, else the plan's order."""
from __future__ import annotations

import threading
import time

from aot_tune.pipeline.compile_queue import CompileQueue


class Clock:
    """Seconds that pass only when a job says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _job(queue, clock, ran, name, seconds, gate=None):
    kernel = name.rstrip("0123456789")

    def run():
        if gate is not None:
            gate.wait(10)
        ran.append(name)
        clock.now += seconds
        queue.finished(kernel, 1.0, seconds)  # what Compiles.run reports of a valid compile
    return kernel, run


def _put(queue, clock, ran, name, seconds, gate=None, first=False):
    kernel, run = _job(queue, clock, ran, name, seconds, gate)
    queue.put(name, kernel, 1.0, run, predicted_s=1.0, first=first)


def _hold_both_threads(queue, clock, ran, first, second):
    """A two-thread queue's threads each held by a compile, ``(name, seconds)``, until its gate is set."""
    gates = threading.Event(), threading.Event()
    for (name, seconds), gate in zip((first, second), gates):
        _put(queue, clock, ran, name, seconds, gate)
        _wait_for(lambda: name in queue._running)
    return gates


def _wait_for(predicate):
    deadline = time.monotonic() + 10
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)


def test_a_kernel_that_compiles_slowly_goes_before_the_queued_compiles_of_fast_ones():
    """As fla-core's delta rule: a slow kernel's configs came last in the plan's order. Its first
    compile runs early (its kernel had none started), and its others follow it once it is known
    to be slow, ahead of the fast kernel's; the reference's compile, queued last, goes first."""
    clock, ran, gate = Clock(), [], threading.Event()
    queue = CompileQueue(1, clock=clock)
    _put(queue, clock, ran, "fast1", 1.0, gate)  # holds the only thread until everything is queued
    _wait_for(lambda: queue._running)
    for name in ("fast2", "fast3", "fast4", "slow1", "fast5", "slow2", "slow3"):
        _put(queue, clock, ran, name, 5.0 if name.startswith("slow") else 1.0)
    _put(queue, clock, ran, "ref1", 1.0, first=True)
    gate.set()
    queue.shutdown()
    assert ran == ["fast1", "ref1", "slow1", "slow2", "slow3", "fast2", "fast3", "fast4", "fast5"]


def test_a_compile_still_running_long_after_its_wave_promotes_its_kernels_others():
    """Two threads: one holds the slow kernel's first compile; the other learns, from the time it
    has run, that the slow kernel is slower than the fast one, and starts its other compiles first."""
    clock, ran = Clock(), []
    queue = CompileQueue(2, clock=clock)
    slow_gate, fast_gate = _hold_both_threads(queue, clock, ran, ("slow1", 5.0), ("fast1", 1.0))
    for name in ("fast2", "fast3", "fast4", "fast5", "slow2", "slow3"):
        _put(queue, clock, ran, name, 5.0 if name.startswith("slow") else 1.0)
    fast_gate.set()
    _wait_for(lambda: len(ran) == 7)
    # fast1 ends at 1 s: slow1 has run as long as it, so is expected to take twice as long
    assert ran == ["fast1", "slow2", "slow3", "fast2", "fast3", "fast4", "fast5"]
    slow_gate.set()
    queue.shutdown()
    assert ran[-1] == "slow1"


def test_without_anything_learned_the_plans_order_stands_and_a_cancel_drops_the_queued():
    clock, ran, gate = Clock(), [], threading.Event()
    queue = CompileQueue(1, clock=clock)
    _put(queue, clock, ran, "a1", 1.0, gate)
    _wait_for(lambda: queue._running)
    for name in ("a2", "a3", "a4"):
        _put(queue, clock, ran, name, 1.0)
    queue.shutdown(wait=False, cancel=True)
    gate.set()
    _wait_for(lambda: not queue._running)
    queue.shutdown()
    assert ran == ["a1"]

    ran.clear()
    queue = CompileQueue(1, clock=clock)
    gate = threading.Event()
    _put(queue, clock, ran, "a1", 1.0, gate)
    _wait_for(lambda: queue._running)
    for name in ("a2", "a3", "b1", "a4"):
        _put(queue, clock, ran, name, 1.0)
    gate.set()
    queue.shutdown()
    assert ran == ["a1", "b1", "a2", "a3", "a4"]  # b's first compile early, then a's in the plan's order


def test_a_straggler_of_a_kernel_whose_pace_is_known_does_not_promote_its_others():
    """gemm compiles in 1 s (known from a finished compile); one of its compiles hangs on. After
    rmsnorm's first compile (rule 2), its second still goes before gemm's: rmsnorm's take 2 s."""
    clock, ran = Clock(), []
    queue = CompileQueue(2, clock=clock)
    straggler_gate, gate = _hold_both_threads(queue, clock, ran, ("gemm1", 1.0), ("gemm2", 1.0))
    queue.finished("rmsnorm", 1.0, 2.0)  # as if an earlier rmsnorm compile had ended
    for name in ("gemm3", "gemm4", "rmsnorm2", "rmsnorm3"):
        _put(queue, clock, ran, name, 2.0 if name.startswith("rmsnorm") else 1.0)
    clock.now = 30.0  # gemm1 has run 30 s
    gate.set()
    _wait_for(lambda: len(ran) == 5)
    assert ran == ["gemm2", "rmsnorm2", "rmsnorm3", "gemm3", "gemm4"]
    straggler_gate.set()
    queue.shutdown()


def test_a_kernels_pace_is_the_median_of_its_compiles_not_thrown_by_one_straggler():
    clock, ran, gate = Clock(), [], threading.Event()
    queue = CompileQueue(1, clock=clock)
    _put(queue, clock, ran, "a1", 1.0, gate)
    _wait_for(lambda: queue._running)
    for seconds in (1.0, 10.0):  # a: 1, 1 and 10 s: median 1 s (mean 4 s)
        queue.finished("a", 1.0, seconds)
    for name in ("a2", "b1", "b2"):
        _put(queue, clock, ran, name, 2.0 if name.startswith("b") else 1.0)
    gate.set()
    queue.shutdown()
    assert ran == ["a1", "b1", "b2", "a2"]  # b's compiles take 2 s, a's 1 s
