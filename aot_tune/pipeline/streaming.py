"""Benches streaming behind compiles: an exhaustive bench task measures its configs in waves, each
wave the configs whose compiles have landed, instead of waiting for every compile of its shape
(one straggler compile would hold the GPU idle).

Its doit task therefore does not depend on the compile tasks. doit dispatches tasks in their
order and the compile tasks come first, so every compile a bench waits for has started on
another thread; and where one has not (only bench tasks selected, or a scheduler that reorders),
the bench claims it and runs it itself. Every compile runs once: the first thread to claim it
runs it, the others wait for it (``CompileClaims``). The record does not depend on the waves:
a record holds its measurements sorted by config id, and every config is measured once either way.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

C = TypeVar("C")
U = TypeVar("U")

#: How often a bench with nothing landed looks again (a compile takes a second or more).
POLL_S = 0.05


class CompileClaims:
    """Each compile of the run runs on exactly one thread: the first to claim it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[str, threading.Event] = {}

    def run_once(self, name: str, work: Callable[[], None]) -> None:
        """Run ``work`` if nobody claimed ``name`` yet, else wait until its claimant finished."""
        with self._lock:
            done = self._done.get(name)
            mine = done is None
            if mine:
                done = self._done[name] = threading.Event()
        if not mine:
            done.wait()
            return
        try:
            work()
        finally:
            done.set()

    def claimed(self, name: str) -> bool:
        with self._lock:
            return name in self._done

    def finished(self, name: str) -> bool:
        """Whether the claimant of ``name`` finished (with a record written, or failing)."""
        with self._lock:
            done = self._done.get(name)
        return done is not None and done.is_set()


def landed_waves(configs: Sequence[C], compiles_of: Callable[[C], Sequence[U]], landed: Callable[[U], bool],
                 claimed: Callable[[U], bool], run_here: Callable[[U], None]) -> Iterator[list[C]]:
    """``configs`` in waves, in their order within each: every config whose compiles have all
    landed (their record written, or their claimant finished), as soon as one has. With nothing
    landed, a compile nobody claimed is run here (the first in config order), else the claimants
    are waited for."""
    pending = list(configs)
    while pending:
        ready = [c for c in pending if all(landed(u) for u in compiles_of(c))]
        if ready:
            taken = set(map(id, ready))
            pending = [c for c in pending if id(c) not in taken]
            yield ready
            continue
        unclaimed = next((u for c in pending for u in compiles_of(c) if not landed(u) and not claimed(u)), None)
        if unclaimed is not None:
            run_here(unclaimed)
        else:
            threading.Event().wait(POLL_S)
