"""What runs inside a Dask bench worker: describe the worker, and run bench batches on its GPU.

A worker owns one GPU (or the interpreter) and runs one batch at a time. As on a local run, the
configs are measured in a device worker process (aot_tune.bench.local.pool), so a config that kills
its CUDA context costs that config, not the Dask worker. The device process stays up between
batches of the same project sources, so torch and CUDA start once per worker, and it keeps the
shape it measured last and the one the planning side said comes next (built during the batch's
timed launches). Triton cache entries shipped with a batch are installed into the worker's own
Triton cache first, so its launches load the compile stage's binaries instead of compiling.
"""
from __future__ import annotations

import multiprocessing
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

from aot_tune import triton_compat
from aot_tune.bench.local.pool import DevicePool
from aot_tune.bench.runner import STARTUP_WAITED, BenchRequest, ConfigMeasurement, DeviceInfo
from aot_tune.bench.local.detect import visible_gpus
from aot_tune.bench.dask import declared_kinds
from aot_tune.bench.dask.sources import SourceBundle, unpack


@dataclass(frozen=True)
class WorkerDescription:
    """What the planning side needs to know of a bench worker, read without importing torch."""

    address: str
    name: str
    kinds: tuple[str, ...]          # declared through its resources
    gpus: tuple[tuple[str, str], ...]  # (name, compute capability) of the GPUs it sees
    triton: str
    torch: str
    daemonic: bool                  # a nanny's child: it could not start a device process


@dataclass(frozen=True)
class RemoteBatch:
    """Configs of one bench task for one worker of the model ``kind``."""

    label: str
    kind: str
    backend: str
    sources: SourceBundle
    requests: tuple[BenchRequest, ...]
    cache_entries: dict[str, dict[str, bytes]]  # kernel hash -> file name -> zlib-compressed content
    timeout_s: float
    ahead: BenchRequest | None = None  # the shape to build during this batch's timed launches


@dataclass
class BatchResult:
    worker: str
    info: DeviceInfo
    measurements: list[ConfigMeasurement]
    cache_hits: int = 0
    cache_misses: int = 0
    entries_installed: int = 0
    seconds: dict = field(default_factory=dict)  # the device worker's batch and set-up seconds, its start-up waited


def describe(dask_worker) -> WorkerDescription:
    """Run on each worker through ``Client.run`` while planning."""
    versions = triton_compat.versions()
    return WorkerDescription(
        address=dask_worker.address, name=str(dask_worker.name),
        kinds=tuple(declared_kinds(dask_worker.state.total_resources)),
        gpus=tuple((g.name, g.compute_capability) for g in visible_gpus()),
        triton=versions["triton"], torch=versions["torch"],
        daemonic=bool(multiprocessing.current_process().daemon),
    )


class _WorkerState:
    """Per Dask worker process: its folders, and the device pool of the sources in use."""

    def __init__(self, local_directory: str) -> None:
        base = Path(local_directory) / "aot_tune"
        self.sources_dir = base / "sources"
        self.triton_cache_dir = str(base / "triton-cache")
        self.lock = threading.Lock()  # one batch at a time, whatever the worker's thread count
        self._pool: DevicePool | None = None
        self._pool_key: tuple[str, str] | None = None

    def pool(self, backend: str, sources: SourceBundle) -> tuple[DevicePool, Path]:
        """The device pool for these sources: a new device process when the sources changed,
        since a running one keeps the kernel modules it imported."""
        root = unpack(sources, self.sources_dir)
        if self._pool_key != (backend, sources.digest):
            if self._pool is not None:
                self._pool.close()
            self._pool = DevicePool(backend, 1, self.triton_cache_dir)
            self._pool_key = (backend, sources.digest)
        return self._pool, root


_state: _WorkerState | None = None
_state_lock = threading.Lock()


def _worker_state(dask_worker) -> _WorkerState:
    global _state
    with _state_lock:
        if _state is None:
            _state = _WorkerState(dask_worker.local_directory)
        return _state


def warm(backend: str, sources: SourceBundle, dask_worker) -> bool:
    """Start this worker's device process in the background (run while the compiles run)."""
    state = _worker_state(dask_worker)
    if not state.lock.acquire(blocking=False):
        return False  # a batch is running: the device process is up
    try:
        pool, _ = state.pool(backend, sources)
        pool.start()
        return True
    finally:
        state.lock.release()


def run_batch(batch: RemoteBatch) -> BatchResult:
    """A Dask task: measure the batch's configs on this worker's device, one after another."""
    from distributed import get_worker

    dask_worker = get_worker()
    state = _worker_state(dask_worker)
    with state.lock:
        if multiprocessing.current_process().daemon:
            raise RuntimeError("this Dask worker is a daemonic process (a nanny's child) and cannot start its "
                               "device process; start bench workers with `python -m aot_tune.bench.dask worker`")
        installed = sum(triton_compat.install_cache_entry(
            state.triton_cache_dir, kernel_hash, {name: zlib.decompress(data) for name, data in files.items()})
            for kernel_hash, files in batch.cache_entries.items())
        pool, root = state.pool(batch.backend, batch.sources)
        print(f"[aot_tune {dask_worker.name}] {batch.label}: {len(batch.requests)} configs "
              f"({installed} Triton cache entries installed)", file=sys.stderr, flush=True)
        requests = [replace(request, root=str(root)) for request in batch.requests]
        ahead = replace(batch.ahead, root=str(root)) if batch.ahead is not None else None
        with pool.lease(ahead=ahead) as lease:
            began = time.perf_counter()
            lease.ready()  # the device process started with the run: its first batch may wait for it
            waited = time.perf_counter() - began
            measurements = list(lease.measure_all(requests, batch.timeout_s))
            seconds = {**lease.seconds, STARTUP_WAITED: waited}
            return BatchResult(str(dask_worker.name), lease.info, measurements, lease.cache_hits,
                               lease.cache_misses, installed, seconds)
