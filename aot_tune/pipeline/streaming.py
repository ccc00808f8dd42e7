"""Benches streaming behind compiles: an exhaustive bench task measures its configs in waves, each
wave the configs whose compiles have landed, instead of waiting for every compile of its shape
(one straggler compile would hold the GPU idle).

A compile task only queues its compile on the run's compile driver (as many threads as compile
workers, in the order of aot_tune.pipeline.compile_queue) and returns, so doit reaches the bench tasks at once
instead of after the last compile task started; a bench task depends on no compile task and
waits for its compiles to land. Where one was never queued (only bench tasks selected), the
bench claims it and runs it itself. Every compile runs once: the first to claim it runs it, the
others wait for it (``CompileClaims``); a compile that raised is reported by the benches that
needed it. The record does not depend on the waves: a record holds its measurements sorted by
config id, and every config is measured once either way. While it waits, a bench lets its device
go (``DeviceHold``), so that a bench whose configs have landed measures meanwhile. An adaptive
budgeted search does not stream: its compiles are not queued, it runs them as it reaches their
configs (``CompileClaims.run_all``, aot_tune.pipeline.searching).
"""
from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from aot_tune.bench.runner import STARTUP_WAITED, BenchRequest, ConfigMeasurement, MoreRequests
from aot_tune.manifest import BenchSettings
from aot_tune.tuning_schema import TuningRecord

#: The least a device worker may go without progress before its config is a timeout: a GPU
#: step includes loading a kernel (and compiling a default config outside the space); the
#: interpreter runs a whole launch on the CPU.
BENCH_TIMEOUT_FLOOR_S = {"cuda": 120.0, "interpreter": 600.0}

C = TypeVar("C")
U = TypeVar("U")

#: How often a bench with nothing landed looks again without being woken by a landing: its
#: straggler judge's pace (aot_tune.pipeline.stragglers), and where the compiles it waits for are
#: not this run's claims to announce (a caller's own ``landed``).
POLL_S = 0.5


class CompileClaims:
    """Each compile of the run runs on exactly one thread: the first to claim it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[str, threading.Event] = {}
        self.errors: dict[str, str] = {}  # name -> what the compile raised (not a kernel fault: those are results)
        self._watchers: dict[str, list[threading.Event]] = {}  # name -> the waits it ends (wait_for_any)
        #: compiles finished so far: a bench that saw none finish since it last looked has nothing
        #: new to take into its running batch, and does not scan its configs again
        self.landings = 0

    def _claim(self, name: str) -> threading.Event | None:
        """The new claim's event, or None if ``name`` was claimed before."""
        with self._lock:
            if name in self._done:
                return None
            done = self._done[name] = threading.Event()
            return done

    def _run(self, name: str, work: Callable[[], None], done: threading.Event) -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - reported by the benches waiting for it
            self.errors[name] = f"{type(exc).__name__}: {exc}"[:300]
            if not isinstance(exc, Exception):
                raise
        finally:
            with self._lock:
                done.set()
                self.landings += 1
                for wake in self._watchers.pop(name, ()):
                    wake.set()

    def wait_for_any(self, names: Sequence[str], timeout_s: float) -> None:
        """Until the claimant of one of ``names`` has finished (at once if one has), or ``timeout_s``.
        A waiting bench wakes when one of its own compiles lands, not at every landing nor by
        polling: every stale bench task waits on a thread of its own (aot_tune.commands.loader;
        fla-core's row kernels have 72). Woken all at each of its 480 landings, they left 2.2 s
        between the device's batches against 0.6-0.7 s this way (H200 host)."""
        wake = threading.Event()
        with self._lock:
            if any(self._done[name].is_set() for name in names if name in self._done):
                return
            for name in names:
                self._watchers.setdefault(name, []).append(wake)
        try:
            wake.wait(timeout_s)
        finally:
            with self._lock:
                for name in names:
                    waits = self._watchers.get(name)
                    if waits is not None and wake in waits:
                        waits.remove(wake)
                        if not waits:
                            del self._watchers[name]

    def schedule(self, name: str, work: Callable[[], None], submit: Callable[[Callable[[], None]], None]) -> None:
        """Queue ``work`` through ``submit`` (which runs the job it is given later, on another
        thread) if nobody claimed ``name`` yet; return at once."""
        done = self._claim(name)
        if done is not None:
            submit(lambda: self._run(name, work, done))

    def run_once(self, name: str, work: Callable[[], None]) -> None:
        """Run ``work`` here if nobody claimed ``name`` yet, else wait until its claimant finished."""
        done = self._claim(name)
        if done is not None:
            self._run(name, work, done)
            return
        with self._lock:
            done = self._done[name]
        done.wait()

    def run_all(self, works: Sequence[tuple[str, Callable[[], None]]], jobs: int) -> None:
        """Run each ``work`` whose name nobody claimed yet, up to ``jobs`` at a time on threads
        of their own, and wait for the claimants of the others: when it returns, every one of
        them has finished (a compile that raised is in ``errors``)."""
        mine = [(name, work, done) for name, work in works if (done := self._claim(name)) is not None]
        if mine:
            with ThreadPoolExecutor(min(max(1, jobs), len(mine)), thread_name_prefix="aot_tune-on-demand") as pool:
                for name, work, done in mine:
                    pool.submit(self._run, name, work, done)
        for name, _ in works:
            with self._lock:
                done = self._done[name]
            done.wait()

    def failures(self, names: Iterable[str]) -> str:
        """What the compiles of ``names`` raised (one line), or ""."""
        failed = sorted({name: self.errors[name] for name in names if name in self.errors}.items())
        return "; ".join(f"{name} failed: {error}" for name, error in failed[:3])

    def claimed(self, name: str) -> bool:
        with self._lock:
            return name in self._done

    def finished(self, name: str) -> bool:
        """Whether the claimant of ``name`` finished (with a record written, or failing)."""
        with self._lock:
            done = self._done.get(name)
        return done is not None and done.is_set()


def landed_waves(configs: Sequence[C], compiles_of: Callable[[C], Sequence[U]], landed: Callable[[U], bool],
                 claimed: Callable[[U], bool], run_here: Callable[[U], None],
                 on_wait: Callable[[], None] = lambda: None,
                 give_up: Callable[[list[C]], Sequence[C]] = lambda pending: (),
                 wait_for: Callable[[list[U], float], None] | None = None) -> Iterator[list[C]]:
    """``configs`` in waves, in their order within each: every config whose compiles have all
    landed (their record written, or their claimant finished), as soon as one has. With nothing
    landed, ``give_up`` may drop pending configs not worth waiting for (stragglers that cannot
    win: aot_tune.pipeline.stragglers); then a compile nobody claimed is run here (the first in
    config order), else the claimants are waited for: ``wait_for(compiles, POLL_S)`` returns when
    one of them lands (CompileClaims.wait_for_any) or ``POLL_S`` has passed; without it, the
    wait is ``POLL_S``. ``on_wait`` is called before each wait (the bench lets its device go)."""
    pending = list(configs)
    while pending:
        ready = [c for c in pending if all(landed(u) for u in compiles_of(c))]
        if ready:
            taken = set(map(id, ready))
            pending = [c for c in pending if id(c) not in taken]
            yield ready
            continue
        dropped = set(map(id, give_up(pending)))
        if dropped:
            pending = [c for c in pending if id(c) not in dropped]
            continue
        on_wait()
        waiting = [u for c in pending for u in compiles_of(c) if not landed(u)]
        unclaimed = next((u for u in waiting if not claimed(u)), None)
        if unclaimed is not None:
            run_here(unclaimed)
        elif wait_for is not None:
            wait_for(waiting, POLL_S)
        else:
            threading.Event().wait(POLL_S)


class DeviceHold:
    """A bench task's hold on a device of its model, taken when it has configs to measure and let
    go while it waits for compiles, so that a bench whose configs have landed measures meanwhile.
    Counts the Triton cache hits of its leases and the seconds it held a device (after the
    device's worker was up): the device time the bench stage's share of timed launches is of.
    ``on_progress`` hears, after each result (a batch of finals: once, at its end), the device
    seconds held so far and the configs measured so far, the finals left out (the progress
    estimate's measure of how far a running bench task has come: configs that land while a
    batch runs join it, so one batch may hold most of a shape's)."""

    def __init__(self, devices, device, on_progress: Callable[[float, int], None] | None = None) -> None:
        self._devices, self._device, self._on_progress = devices, device, on_progress
        self.measured = 0  # results of its batches, the finals' left out
        self._stack: contextlib.ExitStack | None = None
        self._lease = None
        self._since = 0.0
        self.cache_hits = self.cache_misses = 0
        self.held_s = 0.0
        self.seconds: Counter[str] = Counter()  # the leases' worker seconds (aot_tune.bench.runner.DeviceLease)
        self.batches = 0
        self.first_asked: float | None = None  # time.time() when it first had work for a device

    def lease(self, upcoming=None):
        """The device, taken now if not held (waiting for a free one and for its worker);
        ``upcoming``, the first request to be sent, lets the busy device prepare its shape."""
        if self._lease is None:
            if self.first_asked is None:
                self.first_asked = time.time()
            stack = contextlib.ExitStack()
            lease = stack.enter_context(self._devices.lease(self._device, upcoming))
            self._stack, self._lease = stack, lease
            lease.ready()  # a worker's start-up is not part of any measurement's seconds
            self._since = time.perf_counter()
        return self._lease

    def measure_all(self, requests, timeout_s: float, more: MoreRequests | None = None
                    ) -> list:
        """One batch on the device, taken now if not held (its results, all read, with those of
        the configs ``more`` added to it as it ran: ``DeviceLease.measure_all``)."""
        self.batches += 1
        finals = bool(requests and requests[0].final_rounds)
        measured = []
        for result in self.lease().measure_all(requests, timeout_s, more=more):
            measured.append(result)
            if not finals:
                self.measured += 1
                self._tell()
        if finals or not measured:
            self._tell()
        return measured

    def _tell(self) -> None:
        if self._on_progress is not None:
            self._on_progress(self.held_now(), self.measured)

    def held_now(self) -> float:
        """The device seconds held so far, the current lease's included."""
        if self._lease is None or not self._since:
            return self.held_s
        return self.held_s + time.perf_counter() - self._since - self._lease.seconds.get(STARTUP_WAITED, 0.0)

    def counts(self) -> tuple[int, int]:
        """Triton cache hits and misses of every lease so far, the held one included."""
        held = self._lease
        return (self.cache_hits + (held.cache_hits if held else 0), self.cache_misses + (held.cache_misses if held else 0))

    def release(self) -> None:
        if self._lease is None:
            return
        self.held_s = self.held_now()  # less what its batches waited for the worker to start (a cluster's)
        lease, stack = self._lease, self._stack
        self._lease = self._stack = None
        self._since = 0.0
        self.cache_hits, self.cache_misses = self.cache_hits + lease.cache_hits, self.cache_misses + lease.cache_misses
        self.seconds.update(lease.seconds)
        stack.close()


def waiting_benches(plan, staleness) -> int:
    """The stale bench tasks that wait for the compile stage's compiles: all but adaptive
    searches, which compile on demand as they go."""
    return sum(1 for kp in plan.kernels for unit in kp.bench_units
               if not unit.compiles_on_demand and not staleness.bench_done(kp, unit))


def bench_timeout(settings: BenchSettings, backend: str, previous: TuningRecord | None = None) -> float:
    """The manifest's ``timeout_s``, else the floor of the backend, raised to ten times the slowest
    measurement this shape took before and fifty times the GPU time a config is given."""
    if settings.timeout_s:
        return settings.timeout_s
    slowest = max((m.seconds for m in previous.measurements), default=0.0) if previous is not None else 0.0
    return max(BENCH_TIMEOUT_FLOOR_S[backend], 10 * slowest, 50 * (settings.warmup_ms + settings.rep_ms) / 1e3)


def measure_batch(hold: DeviceHold, requests: list[BenchRequest], timeout_s: float,
                  more: MoreRequests | None = None
                  ) -> tuple[list[ConfigMeasurement], dict[str, float]]:
    """Measure ``requests`` on the held device as one pipelined batch, with the configs ``more``
    adds while it runs: the measurements, and each one's share of the batch's wall seconds (from
    when the device is held: not the wait for it)."""
    hold.lease()
    began = time.perf_counter()
    measured = hold.measure_all(requests, timeout_s, more=more)
    return measured, share_out(time.perf_counter() - began, measured)


def share_out(wall: float, measured: list[ConfigMeasurement]) -> dict[str, float]:
    """A pipelined batch's wall time shared out over its measurements in proportion to each one's
    own phases on the device worker (less the graph capture, which overlapped the previous
    config's timed launches), so that they add up to what the batch cost."""
    own = {m.config_id: sum(s for phase, s in m.phase_seconds.items() if phase != "capture") for m in measured}
    total = sum(own.values())
    if total <= 0:
        return {config_id: wall / max(len(own), 1) for config_id in own}
    return {config_id: wall * value / total for config_id, value in own.items()}
