"""The order the queued compiles run in: the next one is picked when a compile thread frees up,
from what the run has learned of each kernel's compiles so far.

The plan orders compiles longest first by an estimate from the config (``compile_time_estimate``)
or a recorded time. Across kernels that estimate says little: fla-core's ``chunk_bwd_kernel_dqkwg``
compiles 4x slower than a kernel with twice its code, and its five configs, estimated small, came
last, so the compile stage ran 2.8-4.5 s past its slowest compile (H200 hosts; 1.4-2.4 s with
this queue). So the queue keeps each kernel's compiles in the plan's order and picks across kernels:

1. the compiles of the configs the shapes' references launch (every check needs them);
2. then a compile of a kernel none of whose compiles has started: one of each kernel runs
   early, and says how fast that kernel compiles;
3. then the compile expected to take longest: from its kernel's finished compiles in this run
   (seconds over the config's ``compile_weight``); before any has finished, the
   run's prediction, raised to ``RUNNING_FACTOR`` times what a running compile of its kernel has
   taken so far, scaled alike (a kernel's first compile still running after the others of its
   wave ended is a slow kernel's, known before it ends; once the kernel's pace is known, a
   compile of it running long is a straggler of its own, not news of the others);
4. then the plan's order.
"""
from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

#: A compile that has run ``t`` seconds is expected to take this times ``t`` in all: with no more
#: known of it, it is as likely to be past the middle of its time as before it (compile times are
#: heavy-tailed, and the first of a slow kernel's compiles must promote its others early).
RUNNING_FACTOR = 2.0


@dataclass
class Queued:
    name: str
    kernel: str
    weight: float  # build.compile.compile_weight of the config's estimate
    predicted_s: float  # the run's prediction (0: none)
    first: bool  # a reference's compile
    index: int  # the plan's order
    job: Callable[[], None]


class CompileQueue:
    """Runs queued jobs ``jobs`` at a time on threads of its own, in the order the module doc
    gives. Thread-safe. ``clock``: seconds, monotonic (a test's own)."""

    def __init__(self, jobs: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.jobs = max(1, jobs)
        self._clock = clock
        self._cond = threading.Condition()
        self._pending: dict[str, deque[Queued]] = {}  # kernel -> its queued compiles, in the plan's order
        self._running: dict[str, tuple[str, float, float]] = {}  # name -> (kernel, started, weight)
        self._rates: dict[str, list[float]] = {}  # kernel -> seconds / weight of its finished compiles, sorted
        self._started_kernels: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a job
        self._closing = False
        self._count = 0

    def put(self, name: str, kernel: str, weight: float, job: Callable[[], None], predicted_s: float = 0.0,
            first: bool = False) -> None:
        """Queue ``job`` (a compile of ``kernel``); returns at once."""
        with self._cond:
            if self._closing:
                raise RuntimeError("the compile queue is shut down")
            self._pending.setdefault(kernel, deque()).append(
                Queued(name, kernel, weight, predicted_s, first, self._count, job))
            self._count += 1
            if self._idle == 0 and len(self._threads) < self.jobs:
                thread = threading.Thread(target=self._work, name=f"aot_tune-compile-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            self._cond.notify()

    def finished(self, kernel: str, weight: float, seconds: float) -> None:
        """A valid compile of ``kernel`` took ``seconds`` in its worker: how fast the kernel compiles."""
        if seconds > 0:
            with self._cond:
                bisect.insort(self._rates.setdefault(kernel, []), seconds / max(weight, 1e-12))

    def shutdown(self, wait: bool = True, cancel: bool = False) -> None:
        """No more jobs. ``cancel``: drop the queued ones; ``wait``: return when the rest have run."""
        with self._cond:
            self._closing = True
            if cancel:
                self._pending.clear()
            self._cond.notify_all()
        if wait:
            for thread in list(self._threads):
                thread.join()

    def _expected_s(self, item: Queued, now: float) -> float:
        """How long ``item`` is expected to take (rule 3 of the module doc); locked by the caller."""
        rates = self._rates.get(item.kernel)
        if rates:  # their median (sorted as they come: a pick is made for every compile)
            middle = len(rates) // 2
            return (rates[middle] if len(rates) % 2 else (rates[middle - 1] + rates[middle]) / 2) * item.weight
        seconds = item.predicted_s
        for kernel, started, weight in self._running.values():
            if kernel == item.kernel:
                seconds = max(seconds, RUNNING_FACTOR * (now - started) * item.weight / max(weight, 1e-12))
        return seconds

    def _take(self) -> Queued | None:
        heads = [queue[0] for queue in self._pending.values() if queue]
        if not heads:
            return None
        now = self._clock()
        item = min(heads, key=lambda h: (not h.first, h.kernel in self._started_kernels,
                                         -self._expected_s(h, now), h.index))
        self._pending[item.kernel].popleft()
        self._started_kernels.add(item.kernel)
        self._running[item.name] = (item.kernel, now, item.weight)
        return item

    def _work(self) -> None:
        while True:
            with self._cond:
                item = self._take()
                while item is None:
                    if self._closing:
                        return
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                    item = self._take()
            try:
                item.job()
            finally:
                with self._cond:
                    self._running.pop(item.name, None)
