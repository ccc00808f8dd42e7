"""The CPU cores a run's GPU device workers keep to themselves while the compiles run beside them.

A device worker issues every launch of its benches from the host (Triton's launcher, the CUDA
graph captures), and its GPU idles or its timing stalls while that host work is slow. Beside a
full compile pool the same launches cost the device workers' host about 25% more (profiled on a
2x H200 host, 32 cores), and a lower priority for the compile workers (nice 10) did not help: it
cannot keep a compile off the other hardware thread of the worker's core. So where cores are to
spare, each GPU device worker runs on a physical core of its own (all its hardware threads), and
the compile workers, with the ``ptxas`` processes they start, on the others.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

#: Physical cores the compiles keep, at least, per core given to a device worker.
COMPILE_CORES_PER_DEVICE_CORE = 3


@dataclass(frozen=True)
class CoreSplit:
    devices: tuple[frozenset[int], ...]  # device worker i runs on devices[i]
    compiles: frozenset[int]

    def describe(self) -> str:
        return (f"each GPU device worker has a CPU core of its own ({', '.join(_cpus(c) for c in self.devices)}); "
                f"the compiles run on the other {len(self.compiles)} CPUs")


def split_cores(devices: int, allowed: Iterable[int] | None = None,
                siblings: Callable[[int], frozenset[int]] | None = None) -> CoreSplit | None:
    """One physical core for each of ``devices`` device workers, the last ones (the first take
    most interrupts), the rest for the compiles; None where there are too few to spare."""
    allowed = set(_allowed() if allowed is None else allowed)
    siblings = siblings or _siblings
    physical: dict[frozenset[int], None] = {}
    for cpu in sorted(allowed):
        physical.setdefault(frozenset(siblings(cpu) & allowed) or frozenset({cpu}), None)
    cores = sorted(physical, key=min)
    if devices < 1 or len(cores) < devices * (1 + COMPILE_CORES_PER_DEVICE_CORE):
        return None
    chosen = tuple(reversed(cores[-devices:]))
    return CoreSplit(chosen, frozenset(allowed - set().union(*chosen)))


def pin(cpus: Iterable[int] | None) -> None:
    """Run this process (and the processes it starts) on ``cpus``; where that is not possible, on
    whichever the system gives."""
    if cpus:
        try:
            os.sched_setaffinity(0, set(cpus))
        except (AttributeError, OSError, ValueError):
            pass


def _allowed() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux: no split
        return set()


def _siblings(cpu: int) -> frozenset[int]:
    """The hardware threads of ``cpu``'s physical core (Linux sysfs), ``{cpu}`` where unknown."""
    path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    try:
        return frozenset(_parse_list(path.read_text()))
    except (OSError, ValueError):
        return frozenset({cpu})


def _parse_list(text: str) -> set[int]:
    """A sysfs CPU list: ``0,32`` or ``0-1``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def _cpus(cpus: frozenset[int]) -> str:
    return "+".join(str(c) for c in sorted(cpus))
