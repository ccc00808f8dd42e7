"""The next shape's set-up built ahead: the pool tells a device which shape it will measure next
(the longest-waiting lease's), the worker builds it during the current batch, and the lease of
that shape goes to that device."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from aot_tune.bench.local.pool import DevicePool
from aot_tune.bench.local.worker import Workloads
from aot_tune.bench.runner import BenchRequest
from aot_tune.manifest import BenchSettings

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = BenchSettings(warmup_ms=1, rep_ms=2, l2_flush=True, l2_flush_bytes=None)


def request(n: int, inputs: str = "tests.fixtures.counted_inputs:make_inputs", config_id: str = "c") -> BenchRequest:
    return BenchRequest(kernel="vector_add", root=str(ROOT), launch_ref="kernels.vector_add:add", inputs_ref=inputs,
                        reference_ref="tests.fixtures.counted_inputs:reference", shape=(("n", n),),
                        dtype="float32", config_id=config_id, config=(("BLOCK_SIZE", 256),), settings=SETTINGS)


@pytest.fixture
def pool(monkeypatch, tmp_path):
    """A pool of two devices whose workers never start: the grants alone."""
    pool = DevicePool("interpreter", 2, str(tmp_path))
    monkeypatch.setattr(pool, "_start_all_once", lambda: None)
    return pool


def waiting_lease(pool: DevicePool, upcoming: BenchRequest | None, granted: list,
                  until: threading.Event | None = None) -> threading.Thread:
    """A thread asking for a lease (returned once its ticket waits); it holds the device until ``until``."""
    def hold() -> None:
        with pool.lease(upcoming=upcoming) as lease:
            granted.append((upcoming.shape if upcoming else None, lease.index))
            if until is not None:
                until.wait(5)

    thread = threading.Thread(target=hold)
    before = len(pool.seats._waiting)
    thread.start()
    deadline = time.monotonic() + 5
    while len(pool.seats._waiting) == before and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.001)
    return thread


def test_a_busy_device_is_told_the_longest_waiting_shape_and_that_lease_gets_it(pool):
    granted: list = []
    with pool.lease(upcoming=request(1)) as first, pool.lease(upcoming=request(2)) as second:
        waiting = [waiting_lease(pool, request(n), granted) for n in (3, 4, 3)]
        assert [t.key[1] for t in pool.seats._waiting] == [(("n", 3),), (("n", 4),), (("n", 3),)]
        # the second device is told the oldest waiting shape that nobody builds yet; the first
        # then the next one; never the shape it is sending, never one built elsewhere
        assert pool.seats.next_for(second.index, request(2)).shape == (("n", 3),)
        assert pool.seats.next_for(first.index, request(1)).shape == (("n", 4),)
        assert pool.seats.next_for(first.index, request(1)).shape == (("n", 4),)  # what it builds already
        assert pool.seats.next_for(first.index, request(4)) is None  # it now measures that shape: nothing left
        assert pool.seats._built_ahead == {second.index: (("vector_add", (("n", 3),), "float32"))}
    for thread in waiting:  # which device each takes depends on which frees first: the test below
        thread.join(5)
    assert sorted(shape for shape, _ in granted) == [(("n", 3),), (("n", 3),), (("n", 4),)]


def test_a_freed_device_goes_to_the_lease_whose_shape_it_built(pool):
    granted: list = []
    with pool.lease(upcoming=request(9)):  # the other device, busy
        with pool.lease(upcoming=request(1)) as only:
            done = threading.Event()
            waiting = [waiting_lease(pool, request(n), granted, done) for n in (5, 6)]
            assert pool.seats.next_for(only.index, request(1)).shape == (("n", 5),)
            pool.seats._built_ahead[only.index] = ("vector_add", (("n", 6),), "float32")  # as if told the later one
            assert pool.seats.next_for(only.index, request(1)).shape == (("n", 6),)  # kept: a lease still waits for it
        while not granted:
            time.sleep(0.001)
        assert granted == [((("n", 6),), only.index)]  # the lease of the shape it built, not the oldest
        done.set()
        waiting[1].join(5)
    waiting[0].join(5)
    assert granted[1][0] == (("n", 5),)


def test_a_shape_goes_back_to_the_idle_device_that_measured_it_last(pool):
    """Its input sets, references and kernels are there; another idle device would build and
    load them again."""
    with pool.lease(upcoming=request(1)) as first, pool.lease(upcoming=request(2)) as second:
        pool.seats.next_for(first.index, request(1))  # as each batch is sent
        pool.seats.next_for(second.index, request(2))
    assert pool.seats._idle == [second.index, first.index]  # freed in that order
    with pool.lease(upcoming=request(1)) as again:
        assert again.index == first.index
    with pool.lease(upcoming=request(3)) as new:  # a shape no device holds: the first idle one
        assert new.index == second.index
    pool.discard(first.index)  # a fresh worker holds nothing
    assert pool.seats._measuring == {second.index: ("vector_add", (("n", 2),), "float32")}
    oldest_idle = pool.seats._idle[0]
    with pool.lease(upcoming=request(1)) as after:
        assert after.index == oldest_idle


def test_an_idle_device_is_not_kept_for_the_shape_another_one_built(pool):
    granted: list = []
    release_other = threading.Event()
    other_index: list = []

    def hold_other() -> None:
        with pool.lease(upcoming=request(9)) as other:
            other_index.append(other.index)
            release_other.wait(5)

    holder = threading.Thread(target=hold_other)
    holder.start()
    while not other_index:
        time.sleep(0.001)
    with pool.lease(upcoming=request(1)) as only:
        waiting = waiting_lease(pool, request(6), granted)
        assert pool.seats.next_for(only.index, request(1)).shape == (("n", 6),)
        release_other.set()  # the other device frees first: the waiting lease takes it at once
        waiting.join(5)
        assert granted == [((("n", 6),), other_index[0])]
    holder.join(5)


def test_a_worker_keeps_the_shape_it_measures_and_the_next_one_only():
    from tests.fixtures import counted_inputs

    counted_inputs.CALLS.clear()
    workloads = Workloads("cpu", 0)
    first = workloads.take(request(64), upcoming=request(128))
    assert workloads.wants(request(128)) and not workloads.wants(request(64)) and not workloads.wants(None)
    workloads.prepare(request(128))
    assert not workloads.wants(request(128))
    built = len(counted_inputs.CALLS)
    nxt = workloads.take(request(128, config_id="other"), upcoming=None)
    assert len(counted_inputs.CALLS) == built  # built ahead: nothing built again
    assert nxt.expected(0) is not None and nxt.rotation is not None
    assert workloads.take(request(64), upcoming=None) is not first  # dropped meanwhile: built again


def test_a_shape_whose_set_up_fails_ahead_fails_its_own_batch():
    workloads = Workloads("cpu", 0)
    workloads.take(request(64), upcoming=request(32, "tests.fixtures.counted_inputs:broken"))
    workloads.prepare(request(32, "tests.fixtures.counted_inputs:broken"))
    failure = workloads.take(request(32, "tests.fixtures.counted_inputs:broken"), upcoming=None)
    assert isinstance(failure, RuntimeError) and "no inputs today" in str(failure)


def test_all_zero_inputs_are_refused_when_the_pass_reads_them_not_when_built():
    workloads = Workloads("cpu", 0)
    zeros = request(16, "tests.fixtures.counted_inputs:zeros")
    workloads.take(request(64), upcoming=zeros)
    workloads.prepare(zeros)  # queued: nothing raised yet
    workload = workloads.take(zeros, upcoming=None)
    with pytest.raises(ValueError, match="all-zero"):
        workload.confirm_inputs()


def test_the_interpreter_pass_builds_the_next_shape_after_its_first_config():
    from aot_tune.bench.engine.pipeline import measure_configs
    from aot_tune.bench.engine.workload import Workload
    from collections import Counter

    calls = []
    seconds: Counter = Counter()
    requests = [request(64, config_id=f"c{i}") for i in range(3)]
    results = measure_configs(requests, Workload(requests[0], "cpu"), "interpreter", seconds=seconds,
                              prepare=lambda: calls.append(len(calls)))
    statuses = []
    for result in results:
        statuses.append((result.status, len(calls)))
    assert [s for s, _ in statuses] == ["ok"] * 3
    assert [c for _, c in statuses] == [0, 1, 1]  # once, after the first config
    assert seconds["prepared"] > 0


def test_configs_the_bench_adds_join_the_running_pass_in_order():
    """``more`` is asked before each config and once more at the end: what it returns joins the
    pass after the configs already there, so a pass ends only when nothing more has come."""
    from aot_tune.bench.engine.pipeline import measure_configs
    from aot_tune.bench.engine.workload import Workload

    requests = [request(64, config_id=f"c{i}") for i in range(2)]
    added = {1: [request(64, config_id="c2")], 3: [request(64, config_id="c3"), request(64, config_id="c4")]}
    asked = []

    def more():
        asked.append(len(asked))
        return added.pop(len(asked) - 1, [])

    seen = [r.config_id for r in measure_configs(requests, Workload(requests[0], "cpu"), "interpreter", more=more)]
    assert seen == ["c0", "c1", "c2", "c3", "c4"] and not added
    assert len(asked) == 6  # before each of the five, and at the end


def test_input_sets_are_drawn_from_the_keys_seeds_as_torch_manual_seed_would_give_them():
    """Each input set comes from the generators seeded with the key's seed plus its index, the
    same tensors ``torch.manual_seed`` gave (records made before stay comparable), built the same
    in every workload of the key and different from one set to the next."""
    import torch

    from aot_tune.bench.engine.workload import Workload

    first, again = Workload(request(64), "cpu"), Workload(request(64), "cpu")
    sets = [first.inputs(i) for i in range(3)]
    for index, built in enumerate(sets):
        torch.manual_seed(first._seed + index)
        expected = (torch.randn(64), torch.randn(64))
        assert all(torch.equal(a, b) for a, b in zip(built, expected))
        assert all(torch.equal(a, b) for a, b in zip(built, again.inputs(index)))
    assert not torch.equal(sets[0][0], sets[1][0])
