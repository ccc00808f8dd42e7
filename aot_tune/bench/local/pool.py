"""One worker process per device, leased to one bench task at a time.

Bench tasks run on threads of the tuning process; each leases a whole device for its shape, so
shapes spread over the GPUs and no GPU ever runs two benchmarks at once. A worker that dies or
hangs is killed and replaced; the config it was running is recorded as crashed or timed out
(when several configs had work queued on the GPU, each is first measured again alone).

A GPU worker is forked from the fork server the compile workers come from (aot_tune.forking),
which imported torch and triton once and never initialized CUDA: it initializes CUDA itself,
after the fork, and starts in about the time CUDA takes instead of importing for seconds first.
One asked for while the server is still importing torch (a run's first, started with its
captures) is spawned instead, and imports torch alone beside the server. A run's first GPU worker
is, where the command started one, the worker it spawned before its planning
(aot_tune.bench.local.early), which has imported torch and Triton meanwhile.
It checks first that nothing in the server initialized the CUDA driver (a CUDA build of torch
loads the driver's library when imported; loaded is fine, initialized is not); if something did,
it says so and the pool spawns its workers instead. The interpreter's worker is always spawned: Triton
decides when it is imported whether its own library functions are interpreted, and the server
imported it for compiling.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterator, Sequence

from aot_tune import forking
from aot_tune.bench.runner import (BenchRequest, ConfigMeasurement, DeviceInfo, DeviceLease, DeviceModel,
                                   MeasurementStatus, MoreRequests, Runner)
from aot_tune.bench.local import early
from aot_tune.bench.local.worker import worker_main
from aot_tune.bench.seats import Seats

STARTUP_TIMEOUT_S = 300.0
#: How often a quiet device worker is reported while a bench task waits for it (seconds).
PROGRESS_EVERY_S = 30.0


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: object
    info: DeviceInfo


@dataclass(frozen=True)
class _Suspects:
    """Configs that had work on a device when its worker died, hung or lost its CUDA context."""

    config_ids: tuple[str, ...]
    status: MeasurementStatus  # what the culprit gets: crashed or timeout
    reason: str


class LocalLease(DeviceLease):
    """A device held by one bench task; sends it the task's configs and collects the results."""

    def __init__(self, pool: "DevicePool", index: int, ahead: BenchRequest | None = None) -> None:
        self._pool = pool
        self.index = index
        self._ahead = ahead  # the shape to build next, when the caller knows it (a cluster's planning side)
        self.cache_hits = 0
        self.cache_misses = 0
        self.seconds: Counter[str] = Counter()  # the worker's batches and their set-up steps (host seconds)

    @property
    def info(self) -> DeviceInfo:
        return self._pool.worker(self.index).info

    def ready(self) -> None:
        """Wait for this device's worker to be up (a task that times its work starts after this)."""
        self._pool.worker(self.index)

    def measure(self, request: BenchRequest, timeout_s: float) -> ConfigMeasurement:
        (result,) = self.measure_all([request], timeout_s)  # drained, so the worker's "done" is read
        return result

    def measure_all(self, requests: Sequence[BenchRequest], timeout_s: float,
                    more: MoreRequests | None = None) -> Iterator[ConfigMeasurement]:
        """One result per request, as each completes (not in request order; iterate to the end,
        the worker's last message is read then). ``more`` is asked after each result for configs
        of the same shape to add to the running batch (their results follow too; if it raises,
        nothing more is added and it is raised once the batch is read to its end). A config that
        kills the worker or runs past ``timeout_s`` in one step is recorded as crashed or timed
        out, and the configs without a result yet go to a fresh worker. The worker names the
        configs with work on the device before each step; when a death, a hang or a lost CUDA
        context leaves several of them suspect, each is measured again on its own, so only the
        culprit is blamed."""
        remaining = list(requests)
        more_failed: list[Exception] = []  # what ``more`` raised
        while remaining:
            done: set[str] = set()
            suspects: tuple[str, ...] = ()
            sent = list(remaining)  # what this worker was given: the batch, then what joined it
            for message in self._exchange(remaining, timeout_s, None if more_failed else more, sent, more_failed):
                if isinstance(message, _Suspects):
                    # a config named on the device that already has its result is no suspect; with
                    # none left (the worker died after their results), the rest go to a fresh one
                    pending = tuple(config_id for config_id in message.config_ids if config_id not in done)
                    if len(pending) == 1:  # the only config on the device: its fault
                        done.add(pending[0])
                        yield ConfigMeasurement(pending[0], message.status, message.reason)
                    else:
                        suspects = pending
                    break
                result, hits, misses, usable = message
                self.cache_hits += hits
                self.cache_misses += misses
                done.add(result.config_id)
                yield result
                if not usable:  # the worker is exiting; the rest go to a fresh one
                    self._pool.discard(self.index)
                    break
            for request in [r for r in sent if r.config_id in suspects and r.config_id not in done]:
                for result in self.measure_all([request], timeout_s):  # alone: it cannot have suspects
                    done.add(result.config_id)
                    yield result
            remaining = [r for r in sent if r.config_id not in done]
        if more_failed:
            raise more_failed[0]

    def _wait(self, worker: "_Worker", timeout_s: float, first: BenchRequest, current: tuple[str, ...],
              phase: str) -> bool:
        """Wait for the worker's next message up to ``timeout_s``, saying every ``PROGRESS_EVERY_S``
        that it is still quiet, so a hang is visible before it times out. False on timeout."""
        waited = 0.0
        while waited < timeout_s:
            step = min(PROGRESS_EVERY_S, timeout_s - waited)
            if worker.conn.poll(step):
                return True
            waited += step
            if waited < timeout_s:
                shape = "x".join(str(v) for _, v in first.shape)
                print(f"[bench] {first.kernel} {first.dtype} {shape}: no word from the device worker for {waited:.0f}s "
                      f"({phase} of config {', '.join(current)}); it times out at {timeout_s:.0f}s (bench: timeout_s)",
                      file=sys.__stderr__, flush=True)
        return False

    def _exchange(self, batch: list[BenchRequest], timeout_s: float,
                  more: MoreRequests | None, sent: list[BenchRequest],
                  more_failed: list[Exception]) -> Iterator:
        """The worker's results for a batch and for what ``more`` added to it (appended to
        ``sent``), then stop; or, when it died, stopped answering or lost its CUDA context, the
        configs that had work on the device then (it is discarded). The batch names the shape
        the pool expects to give this device next, for the worker to build during the batch's
        timed launches. Configs added after the worker's pass had ended are a pass of their own
        there, with its own "done": the exchange ends at the "done" after the last result."""
        worker = self._pool.worker(self.index)
        current: tuple[str, ...] = (batch[0].config_id,)
        phase = "check"
        waiting = {request.config_id for request in batch}
        try:
            ahead = self._ahead if self._ahead is not None else self._pool.seats.next_for(self.index, batch[0])
            worker.conn.send(("batch", batch, ahead))
            while True:
                if not self._wait(worker, timeout_s, batch[0], current, phase):
                    self._pool.discard(self.index)
                    yield _Suspects(current, "timeout", f"no progress within {timeout_s:.0f} s")
                    return
                message = worker.conn.recv()
                if message[0] == "phase":
                    current, phase = tuple(message[1]), str(message[2])
                elif message[0] == "result":
                    waiting.discard(message[1].config_id)
                    yield message[1:]
                    if not message[4]:
                        return
                    try:
                        added = list(more()) if more is not None else []
                    except Exception as exc:  # noqa: BLE001 - raised once the worker's batch is read to its end
                        more_failed.append(exc)
                        more, added = None, []
                    if added:
                        worker.conn.send(("more", added))
                        sent.extend(added)
                        waiting.update(r.config_id for r in added)
                elif message[0] == "unattributed":
                    self._pool.discard(self.index)
                    yield _Suspects(tuple(message[1]), "crashed", message[2])
                    return
                else:  # "done"
                    self.seconds.update(message[1])
                    if not waiting:
                        return
                    # what was added after the pass ended is a pass of its own: until it says
                    # otherwise, a death is its first config's, as at a batch's start
                    current = (next(r.config_id for r in sent if r.config_id in waiting),)
                    phase = "check"
        except (EOFError, OSError, BrokenPipeError):
            worker.process.join(5)
            code = worker.process.exitcode
            self._pool.discard(self.index)
            yield _Suspects(current, "crashed", f"device worker died (exit code {code})")


class DevicePool(Runner):
    """Device workers for one backend: ``cuda`` (one per visible GPU) or ``interpreter`` (one)."""

    def __init__(self, backend: str, device_count: int, triton_cache_dir: str,
                 imports: Sequence[tuple[str, str]] = ()) -> None:
        self.backend = backend
        self.triton_cache_dir = triton_cache_dir
        #: (manifest folder, ``module:attr``) each worker imports while it starts, before it says it
        #: is up: a library's import (seconds: fla's is 4-7 s on an H100 host) overlaps the compiles
        #: instead of holding up the first batch with the device idle.
        self.imports = tuple(imports)
        self._workers: dict[int, _Worker] = {}
        self.seats = Seats(range(device_count))
        # One lock per device: starting one worker (seconds: torch, CUDA) never blocks another's lease.
        self._locks = [threading.Lock() for _ in range(device_count)]
        self._warming = threading.Lock()
        self._warm_started = False
        #: time.time() when the workers were asked to start, and when the last of them was up
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self._starting = device_count
        # None: the fork server's context, chosen when the first worker starts (see the module doc).
        self._context = multiprocessing.get_context("spawn") if backend != "cuda" else None

    @contextlib.contextmanager
    def lease(self, device: DeviceModel | None = None, upcoming: BenchRequest | None = None,
              ahead: BenchRequest | None = None) -> Iterator[LocalLease]:
        """Hold a free device of this pool (all of one model: ``device``, the model a bench task
        asks for, is the pool's own) until the block ends. ``upcoming``: the first request the
        lease will send, so that while it waits, the busy device's worker builds its shape.
        ``ahead``: the shape the worker builds during each batch, when the caller knows better
        than this pool (a cluster worker's one-device pool, told by the planning side)."""
        self._start_all_once()
        index = self.seats.take(upcoming)
        try:
            yield LocalLease(self, index, ahead)
        finally:
            self.seats.give_back(index)

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
            self.started_at = time.time()
        if self._context is None:
            forking.start_server()
        for index in range(len(self._locks)):
            threading.Thread(target=self._warm, args=(index,), name=f"aot_tune-warm-{index}", daemon=True).start()

    def _warm(self, index: int) -> None:
        with contextlib.suppress(Exception):
            self.worker(index)
        with self._warming:
            self._starting -= 1
            if self._starting == 0:
                self.ready_at = time.time()

    def worker(self, index: int) -> _Worker:
        with self._locks[index]:
            worker = self._workers.get(index)
            if worker is None or not worker.process.is_alive():
                worker = self._workers[index] = self._start(index)
            return worker

    def _start(self, index: int) -> _Worker:
        args = (self.backend, index, self.triton_cache_dir, forking.environment(), self.imports)
        started = early.take() if self.backend == "cuda" else None
        if started is not None:  # spawned with the run: it has imported torch and triton meanwhile
            try:
                return self._wait_until_up(index, *started, multiprocessing.get_context("spawn"), args)
            except RuntimeError as err:
                print(f"aot_tune: {err}; starting another", file=sys.__stderr__, flush=True)
        context = self._context or self._fresh_context()
        parent, child = context.Pipe()
        process = context.Process(target=worker_main, args=(child, *args), name=f"aot_tune-{self.backend}-{index}",
                                  daemon=True)
        process.start()
        child.close()
        return self._wait_until_up(index, process, parent, context)

    def _wait_until_up(self, index: int, process, parent, context, args: tuple | None = None) -> _Worker:
        """The worker once it says it is up (an early one is sent its ``args`` first)."""
        if args is not None:
            try:
                parent.send(args)
            except (OSError, BrokenPipeError):
                process.kill()
                raise RuntimeError(f"the early {self.backend} device worker had exited") from None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not parent.poll(1.0):
            if not process.is_alive() or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"{self.backend} device worker {index} failed to start "
                                   f"(exit code {process.exitcode})")
        try:
            info = parent.recv()
        except EOFError:  # it died before it said it was up
            process.join(5)
            raise RuntimeError(f"{self.backend} device worker {index} failed to start "
                               f"(exit code {process.exitcode})") from None
        if isinstance(info, tuple) and info[0] == "spawn instead":  # forked, and CUDA was not safe to use
            process.join(5)
            if context.get_start_method() == "spawn":
                raise RuntimeError(f"{self.backend} device worker {index} failed to start: {info[1]}")
            print(f"aot_tune: spawning {self.backend} device workers: {info[1]}", file=sys.__stderr__, flush=True)
            self._context = multiprocessing.get_context("spawn")
            return self._start(index)
        return _Worker(process, parent, info)

    def _fresh_context(self):
        """The fork server's context, or spawn for a GPU worker asked for while the server still
        imports torch: spawned, it imports torch alone and is up (CUDA included) while the server
        imports on, where a forked one would start its CUDA only after all of the server's imports
        (the first bench of a cold GEMM tune on an H200 host waited 2.1 s for it). A server of
        Triton alone (every kernel rebuilt from its recording) forks sooner than a spawn imports."""
        if self.backend == "cuda" and forking.importing_torch():
            return multiprocessing.get_context("spawn")
        return forking.context()

    def discard(self, index: int) -> None:
        self.seats.forget(index)  # a fresh worker holds no shape
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
