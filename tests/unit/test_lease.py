"""A local lease's exchange with its device worker (aot_tune.bench.local.pool), against a scripted
worker: whose fault a death is when configs join a running batch, and where the rest go."""
from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from aot_tune.bench.local.pool import LocalLease
from aot_tune.bench.runner import ConfigMeasurement


class ScriptedWorker:
    """A device worker's end of the pipe: ``script`` answers each message the lease sends with the
    messages to queue; with nothing queued, the pipe reads as closed (the worker died)."""

    def __init__(self, script) -> None:
        self.script, self.queued, self.got = script, deque(), []
        self.conn, self.process = self, SimpleNamespace(join=lambda timeout: None, exitcode=-11)

    def send(self, message) -> None:
        self.got.append(message)
        self.queued.extend(self.script(message))

    def poll(self, timeout: float = 0.0) -> bool:
        return True

    def recv(self):
        if not self.queued:
            raise EOFError
        return self.queued.popleft()


def ok(config_id: str) -> tuple:
    return ("result", ConfigMeasurement(config_id, "ok", times_ms=[1.0]), 0, 0, True)


def lease_of(*workers: ScriptedWorker) -> LocalLease:
    """A lease whose device gets each of ``workers`` in turn, the next one when one is discarded."""
    fresh = iter(workers)
    current = [next(fresh)]
    pool = SimpleNamespace(worker=lambda index: current[0], seats=SimpleNamespace(next_for=lambda index, first: None),
                           discard=lambda index: current.__setitem__(0, next(fresh, None)))
    return LocalLease(pool, 0)


def request(config_id: str):
    return SimpleNamespace(config_id=config_id, kernel="k", dtype="float32", shape=(("n", 1),))


def adding(*batches):
    """A bench's ``more``: each batch in turn, then nothing."""
    left = list(batches)
    return lambda: left.pop(0) if left else []


def statuses(results) -> list[tuple[str, str]]:
    return sorted((r.config_id, r.status) for r in results)


def test_a_death_in_the_pass_of_configs_added_after_its_batch_ended_is_theirs():
    """The batch's pass ended before the added config came, so the worker runs it as a pass of its
    own and dies before it names it: the death is the added config's, and the finished one keeps
    its one result."""
    first = ScriptedWorker(lambda message: [("phase", ("a",), "check"), ok("a"), ("done", {})]
                           if message[0] == "batch" else [])
    results = list(lease_of(first).measure_all([request("a")], 10.0, more=adding([request("b")])))
    assert statuses(results) == [("a", "ok"), ("b", "crashed")], results
    assert [m[0] for m in first.got] == ["batch", "more"]


def test_configs_taken_into_the_running_pass_end_with_its_one_done():
    worker = ScriptedWorker(lambda message: [ok("a")] if message[0] == "batch" else [ok("b"), ok("c"), ("done", {})])
    results = list(lease_of(worker).measure_all([request("a")], 10.0, more=adding([request("b"), request("c")])))
    assert statuses(results) == [("a", "ok"), ("b", "ok"), ("c", "ok")]
    assert [m[0] for m in worker.got] == ["batch", "more"]


def test_a_worker_that_dies_after_its_configs_results_blames_none_and_hands_on_the_added_ones():
    """The worker dies with the added configs queued and only a config that has its result named:
    nothing is blamed twice, and a fresh worker measures the added configs."""
    dying = ScriptedWorker(lambda message: [("phase", ("x",), "time"), ok("x")] if message[0] == "batch" else [])
    fresh = ScriptedWorker(lambda message: [ok(r.config_id) for r in message[1]] + [("done", {})])
    results = list(lease_of(dying, fresh).measure_all([request("x")], 10.0, more=adding([request("y"), request("z")])))
    assert statuses(results) == [("x", "ok"), ("y", "ok"), ("z", "ok")], results
    assert [(m[0], [r.config_id for r in m[1]]) for m in fresh.got] == [("batch", ["y", "z"])]
