"""The queued compiles of a run, run on one thread per compile worker, the longest expected first,
with what a compile is expected to take learned as the run goes.

Longest-first keeps a pool's tail short only if it knows which compiles are long. A compile run
before is expected to take its recorded seconds. A new kernel's compiles have only their
configs' relative estimate (``build.compile.compile_time_estimate``: big tiles over few warps),
which ranks one kernel's configs but says nothing across kernels: in a library's run, one
kernel's compiles can take 1.5 s each and another's 0.3 s. So each (kernel, target) starts with
its largest config, before any kernel's second one (the whole run learns every kernel's scale
in its first round of compiles), and from then on each compile is expected to take its estimate
times the median seconds-per-estimate of its kernel's compiles landed so far (else the run's).
"""
from __future__ import annotations

import heapq
import itertools
import statistics
import threading
from collections.abc import Callable, Hashable

#: What a compile nothing is known of is expected to take (seconds): it only ranks compiles.
TYPICAL_S = 1.0


class CompileQueue:
    """Compiles put by (kernel, target), run on ``lanes`` threads started on the first ``put``."""

    def __init__(self, lanes: int, name: str = "aot_tune-compile") -> None:
        self._lanes, self._name = max(1, lanes), name
        self._cv = threading.Condition()
        self._order = itertools.count()
        #: (kernel, target) -> heap of (-estimate, order, job, estimate) never compiled before
        self._new: dict[Hashable, list] = {}
        self._recorded: list = []  # heap of (-recorded seconds, order, job): compiled in an earlier run
        self._started: set[Hashable] = set()  # keys with a compile started (or learned) in this run
        self._rates: dict[Hashable, list[float]] = {}  # key -> seconds per estimate of its landed compiles
        self._threads: list[threading.Thread] = []
        self._running = 0
        self._closed = False

    def put(self, job: Callable[[], None], key: Hashable, estimate: float, recorded: float | None) -> None:
        """Queue ``job`` (one compile of ``key``): ``estimate`` its relative cost among the key's
        configs, ``recorded`` the seconds it took in an earlier run (None if never compiled)."""
        with self._cv:
            if self._closed:
                return
            if recorded is not None:
                heapq.heappush(self._recorded, (-recorded, next(self._order), job))
            else:
                heapq.heappush(self._new.setdefault(key, []), (-estimate, next(self._order), job, estimate))
            if len(self._threads) < self._lanes:
                thread = threading.Thread(target=self._serve, name=f"{self._name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            self._cv.notify()

    def learn(self, key: Hashable, estimate: float, seconds: float | None) -> None:
        """A compile of ``key`` landed, taking ``seconds`` (any compile of the run: queued here,
        claimed by a bench, or on demand)."""
        if seconds is None or seconds <= 0 or estimate <= 0:
            return
        with self._cv:
            self._started.add(key)
            self._rates.setdefault(key, []).append(seconds / estimate)

    def expected(self, key: Hashable, estimate: float) -> float:
        """Seconds a new compile of ``key`` with ``estimate`` is expected to take, from what landed."""
        with self._cv:
            return self._expected(key, estimate)

    def _expected(self, key: Hashable, estimate: float) -> float:
        rates = self._rates.get(key) or [r for found in self._rates.values() for r in found]
        return estimate * statistics.median(rates) if rates else TYPICAL_S

    def _take(self) -> Callable[[], None] | None:
        """The next job (the lock held): a key none of whose compiles started yet, in the order
        the keys came; else the longest expected of the recorded ones and each key's next."""
        for key, heap in self._new.items():
            if heap and key not in self._started:
                self._started.add(key)
                return self._pop(key)
        best, best_s = None, -1.0
        for key, heap in self._new.items():
            if heap and (seconds := self._expected(key, heap[0][3])) > best_s:
                best, best_s = key, seconds
        if self._recorded and -self._recorded[0][0] >= best_s:
            return heapq.heappop(self._recorded)[2]
        return self._pop(best) if best is not None else None

    def _pop(self, key: Hashable) -> Callable[[], None]:
        heap = self._new[key]
        job = heapq.heappop(heap)[2]
        if not heap:
            del self._new[key]
        return job

    def _serve(self) -> None:
        while True:
            with self._cv:
                job = self._take()
                while job is None and not self._closed:
                    self._cv.wait()
                    job = self._take()
                if job is None:
                    return
                self._running += 1
            try:
                job()  # never raises: CompileClaims records what a compile raised
            finally:
                with self._cv:
                    self._running -= 1
                    self._cv.notify_all()

    def pending(self) -> int:
        with self._cv:
            return len(self._recorded) + sum(map(len, self._new.values())) + self._running

    def finish(self) -> None:
        """Run every queued compile, then stop the threads."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for thread in list(self._threads):
            thread.join()

    def stop(self) -> None:
        """Drop the queued compiles (a run cut short); the running ones end with the compile pool."""
        with self._cv:
            self._closed = True
            self._new.clear()
            self._recorded.clear()
            self._cv.notify_all()
