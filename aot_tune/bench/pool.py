"""One worker process per device, leased to one bench task at a time.

Bench tasks run on threads of the tuning process; each leases a whole device for its shape, so
shapes spread over the GPUs and no GPU ever runs two benchmarks at once. A worker that dies or
hangs is killed and replaced; the config it was running is recorded as crashed or timed out.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import queue
import threading
import time
from dataclasses import dataclass
from typing import Iterator

from .records import BenchRequest, ConfigMeasurement, DeviceInfo
from .worker import worker_main

STARTUP_TIMEOUT_S = 300.0


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: object
    info: DeviceInfo


class DeviceLease:
    """A device held by one bench task; sends it configs one at a time."""

    def __init__(self, pool: "DevicePool", index: int) -> None:
        self._pool = pool
        self.index = index
        self.cache_hits = 0
        self.cache_misses = 0

    @property
    def info(self) -> DeviceInfo:
        return self._pool.worker(self.index).info

    def measure(self, request: BenchRequest, timeout_s: float) -> ConfigMeasurement:
        worker = self._pool.worker(self.index)
        try:
            worker.conn.send(request)
            if not worker.conn.poll(timeout_s):
                self._pool.discard(self.index)
                return ConfigMeasurement(request.config_id, "timeout", f"no result within {timeout_s:.0f} s")
            result, hits, misses, usable = worker.conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            worker.process.join(5)
            code = worker.process.exitcode
            self._pool.discard(self.index)
            return ConfigMeasurement(request.config_id, "crashed", f"device worker died (exit code {code})")
        self.cache_hits += hits
        self.cache_misses += misses
        if not usable:  # the worker is exiting; the next config gets a fresh one
            self._pool.discard(self.index)
        return result

    def measure_all(self, requests: list[BenchRequest], timeout_s: float) -> list[ConfigMeasurement]:
        """Measure configs one after another on this device (a batch of one bench task)."""
        return [self.measure(request, timeout_s) for request in requests]


class DevicePool:
    """Device workers for one backend: ``cuda`` (one per visible GPU) or ``interpreter`` (one)."""

    def __init__(self, backend: str, device_count: int, triton_cache_dir: str) -> None:
        self.backend = backend
        self.triton_cache_dir = triton_cache_dir
        self._workers: dict[int, _Worker] = {}
        self._free: queue.Queue[int] = queue.Queue()
        for index in range(device_count):
            self._free.put(index)
        # One lock per device: starting one worker (seconds: torch, CUDA) never blocks another's lease.
        self._locks = [threading.Lock() for _ in range(device_count)]
        self._warming = threading.Lock()
        self._warm_started = False
        self._context = multiprocessing.get_context("spawn")

    @contextlib.contextmanager
    def lease(self, device=None) -> Iterator[DeviceLease]:
        """Hold a free device of this pool (all of one model: ``device``, the model a bench task
        asks for, is the pool's own) until the block ends."""
        self._start_all_once()
        index = self._free.get()
        try:
            yield DeviceLease(self, index)
        finally:
            self._free.put(index)

    def start(self) -> None:
        """Start every device's worker in the background now (e.g. while compiles run)."""
        self._start_all_once()

    def _start_all_once(self) -> None:
        """Start every device's worker at once, so no GPU waits on another's start-up. A worker
        that fails to start fails the lease that needs it, with its reason."""
        with self._warming:
            if self._warm_started:
                return
            self._warm_started = True
        for index in range(len(self._locks)):
            threading.Thread(target=self._warm, args=(index,), name=f"aot_tune-warm-{index}", daemon=True).start()

    def _warm(self, index: int) -> None:
        with contextlib.suppress(Exception):
            self.worker(index)

    def worker(self, index: int) -> _Worker:
        with self._locks[index]:
            worker = self._workers.get(index)
            if worker is None or not worker.process.is_alive():
                worker = self._workers[index] = self._start(index)
            return worker

    def _start(self, index: int) -> _Worker:
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=worker_main, args=(child, self.backend, index, self.triton_cache_dir),
            name=f"aot_tune-{self.backend}-{index}", daemon=True,
        )
        process.start()
        child.close()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not parent.poll(1.0):
            if not process.is_alive() or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"{self.backend} device worker {index} failed to start "
                                   f"(exit code {process.exitcode})")
        return _Worker(process, parent, parent.recv())

    def discard(self, index: int) -> None:
        with self._locks[index]:
            worker = self._workers.pop(index, None)
        if worker is not None:
            worker.process.kill()
            worker.process.join(5)

    def close(self) -> None:
        workers = []
        for index, lock in enumerate(self._locks):
            with lock:  # waits for a start in flight, so no worker outlives the pool
                worker = self._workers.pop(index, None)
            if worker is not None:
                workers.append(worker)
        for worker in workers:
            with contextlib.suppress(OSError, BrokenPipeError):
                worker.conn.send(None)
        for worker in workers:
            worker.process.join(10)
            if worker.process.is_alive():
                worker.process.kill()
