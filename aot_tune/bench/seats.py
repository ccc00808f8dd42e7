"""Which bench task holds which device: one task per device at a time, and a shape kept where its
inputs are.

A device here is whatever measures for one task at a time: a local GPU's worker (by index) or a
Dask bench worker (by address). Both the local pool and the cluster grant devices through this,
so a shape's batches stay on one device where they can (spread over devices, each of them builds
the shape's input sets and references and loads its kernels again), and a busy device builds the
shape it will most likely measure next during its current batch's timed launches.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from aot_tune.bench.runner import BenchRequest, workload_key


@dataclass
class _Ticket:
    """A seat asked for: the shape it will measure first, and the device once granted."""

    key: tuple | None
    upcoming: BenchRequest | None
    device: Hashable | None = None


class Seats:
    """Devices granted to bench tasks in the order they asked, except that a device goes first to
    a task whose shape it holds (built ahead, or measured last)."""

    def __init__(self, devices: Iterable[Hashable] = ()) -> None:
        self._lock = threading.Condition()
        self._members: list[Hashable] = list(devices)
        self._idle: list[Hashable] = list(self._members)
        self._waiting: list[_Ticket] = []
        self._built_ahead: dict[Hashable, tuple] = {}  # device -> the shape its worker was told to build next
        self._measuring: dict[Hashable, tuple] = {}  # device -> the shape of the last batch sent to it

    def take(self, upcoming: BenchRequest | None = None, *, poll_s: float | None = None,
             refresh: Callable[[], None] | None = None) -> Hashable | None:
        """A free device, waiting for one; ``upcoming``, the first request the task will send,
        lets a busy device build its shape meanwhile. With ``poll_s``, ``refresh`` (which may add
        or drop devices) runs every ``poll_s`` while it waits, and None comes back when no device
        is left at all (the caller says what that means)."""
        ticket = _Ticket(workload_key(upcoming) if upcoming is not None else None, upcoming)
        with self._lock:
            self._waiting.append(ticket)
            try:
                self._grant()
                while ticket.device is None:
                    if poll_s is not None and not self._members:
                        self._waiting.remove(ticket)
                        return None
                    self._lock.wait(poll_s)
                    if refresh is not None and ticket.device is None:
                        self._lock.release()
                        try:
                            refresh()
                        finally:
                            self._lock.acquire()
            except BaseException:  # interrupted: no device may stay granted to a ticket nobody holds
                if ticket in self._waiting:
                    self._waiting.remove(ticket)
                elif ticket.device is not None and ticket.device in self._members:
                    self._idle.append(ticket.device)
                    self._grant()
                raise
            return ticket.device

    def give_back(self, device: Hashable) -> None:
        with self._lock:
            if device in self._members and device not in self._idle:
                self._idle.append(device)
            self._grant()

    def members(self) -> tuple[Hashable, ...]:
        with self._lock:
            return tuple(self._members)

    def join(self, device: Hashable) -> None:
        """A device that came up (a cluster worker that joined): free now."""
        with self._lock:
            if device not in self._members:
                self._members.append(device)
                self._idle.append(device)
            self._grant()

    def leave(self, device: Hashable) -> None:
        """A device that went away: never granted again; the task holding it finds out by itself."""
        with self._lock:
            if device in self._members:
                self._members.remove(device)
            if device in self._idle:
                self._idle.remove(device)
            self.forget(device)
            self._lock.notify_all()

    def forget(self, device: Hashable) -> None:
        """The device's worker was replaced: it holds no shape."""
        with self._lock:
            self._built_ahead.pop(device, None)
            self._measuring.pop(device, None)

    def _grant(self) -> None:
        """Give idle devices to waiting tickets (under the lock): first to one whose shape a
        device holds, then in the order they were asked for."""
        while self._idle and self._waiting:
            device, ticket = next(((d, t) for t in self._waiting for d in self._idle
                                   if t.key is not None and t.key in (self._built_ahead.get(d), self._measuring.get(d))),
                                  (self._idle[0], self._waiting[0]))
            self._idle.remove(device)
            self._waiting.remove(ticket)
            ticket.device = device
        self._lock.notify_all()

    def next_for(self, device: Hashable, sending: BenchRequest) -> BenchRequest | None:
        """The first request of the shape ``device`` should build while it measures ``sending``'s:
        the one it was told before while a task still waits for it (its worker keeps only the
        shape it is told), else the longest-waiting task's whose shape no other device builds.
        Called as the batch is sent: the device then holds ``sending``'s shape."""
        with self._lock:
            self._measuring[device] = workload_key(sending)
            own = self._built_ahead.get(device)
            taken = {k for d, k in self._built_ahead.items() if d != device} | {workload_key(sending)}
            waiting = [t for t in self._waiting if t.key is not None and t.key not in taken]
            ticket = next((t for t in waiting if t.key == own), None) or next(iter(waiting), None)
            if ticket is None:
                self._built_ahead.pop(device, None)
                return None
            self._built_ahead[device] = ticket.key
            return ticket.upcoming
