"""The compile queue: each kernel's largest config before any kernel's second, then the longest
expected first, with each kernel's seconds-per-estimate learned from its compiles that landed."""
from __future__ import annotations

import threading

from aot_tune.pipeline.compile_queue import TYPICAL_S, CompileQueue


def gated_queue():
    """One lane held by a first job until ``release`` is set, so the rest are ranked all at once."""
    queue, ran, release = CompileQueue(1), [], threading.Event()
    queue.put(lambda: release.wait(5), "gate", 1.0, None)
    return queue, ran, release


def job(ran: list, name: str):
    return lambda: ran.append(name)


def test_every_kernel_starts_with_its_largest_config_before_any_second_one():
    queue, ran, release = gated_queue()
    for key, estimate in (("a", 1), ("a", 8), ("b", 2), ("b", 4), ("c", 3)):
        queue.put(job(ran, f"{key}{estimate}"), key, estimate, None)
    release.set()
    queue.finish()
    assert ran[:3] == ["a8", "b4", "c3"]
    assert sorted(ran[3:]) == ["a1", "b2"]


def test_a_kernel_learned_slow_goes_first_whatever_its_estimates():
    queue, ran, release = gated_queue()
    queue.learn("slow", 1.0, 10.0)  # 10 s per unit of estimate
    queue.learn("fast", 100.0, 1.0)  # 0.01 s per unit
    for key, estimate in (("fast", 400), ("fast", 300), ("slow", 2), ("slow", 1)):
        queue.put(job(ran, f"{key}{estimate}"), key, estimate, None)
    release.set()
    queue.finish()
    assert ran == ["slow2", "slow1", "fast400", "fast300"]
    assert queue.expected("slow", 3) == 30.0 and queue.expected("unknown", 3) == 3 * 5.005


def test_compiles_recorded_in_an_earlier_run_take_their_place_by_their_seconds():
    queue, ran, release = gated_queue()
    queue.learn("k", 1.0, 2.0)
    queue.put(job(ran, "k1"), "k", 1.0, None)  # expected 2 s
    queue.put(job(ran, "old5"), "k", 1.0, 5.0)
    queue.put(job(ran, "old1"), "k", 1.0, 1.0)
    release.set()
    queue.finish()
    assert ran == ["old5", "k1", "old1"]


def test_nothing_learned_means_the_typical_compile():
    assert CompileQueue(2).expected("k", 123.0) == TYPICAL_S


def test_stop_drops_what_is_queued_and_finish_runs_it_all():
    queue, ran, release = gated_queue()
    for n in range(3):
        queue.put(job(ran, str(n)), "k", 1.0, None)
    assert queue.pending() == 4
    queue.stop()
    release.set()
    queue.finish()
    assert ran == [] and queue.pending() == 0
    queue.put(job(ran, "late"), "k", 1.0, None)  # a closed queue takes nothing more
    assert queue.pending() == 0
