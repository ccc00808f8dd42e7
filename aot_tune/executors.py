"""Worker processes shared by all tasks of one run: a compile pool and the bench devices.

doit runs our tasks on threads (``-P thread``); each task hands its work to a pool here and
waits. Workers are spawned once and stay alive across tasks, so importing torch and triton
(seconds) is paid once per worker, not once per compile. Nothing starts until a task needs it,
so a run with nothing to do spawns nothing.

The bench devices are the local device pool (``--executor local``), or the GPUs of a Dask
cluster (``--executor dask``, aot_tune.cluster); both lease a device of a given model to one
bench task at a time. Compiles always run here.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import threading
from pathlib import Path

from .bench.pool import DevicePool
from .compile import CompileRequest, CompileResult, compile_config
from .errors import TuneError
from .hardware import LocalDevice
from .specialize import SpecializeRequest, SpecializeResult, capture

DEFAULT_COMPILE_TIMEOUT_S = 600.0


def _warm_compile_worker(triton_cache_dir: str) -> None:
    """Pool initializer: pay the imports up front, pin Triton's cache and env before any compile."""
    os.environ["TRITON_CACHE_DIR"] = triton_cache_dir
    os.environ.pop("TRITON_INTERPRET", None)
    from . import triton_compat

    triton_compat.pin_environment()
    import torch  # noqa: F401
    import triton  # noqa: F401


class Executors:
    def __init__(self, device: LocalDevice, triton_cache_dir: Path, compile_jobs: int,
                 compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S, cluster=None) -> None:
        """``cluster``: an ``aot_tune.cluster.ClusterDevices`` to bench on instead of local devices."""
        self.device = device
        self._cluster = cluster
        self.triton_cache_dir = str(triton_cache_dir)
        self.compile_jobs = max(1, compile_jobs)
        self.compile_timeout_s = compile_timeout_s
        self._compile_pool: cf.ProcessPoolExecutor | None = None
        self._device_pool: DevicePool | None = None
        self._closed_device_pool: DevicePool | None = None
        self._lock = threading.Lock()

    def _pool(self) -> cf.ProcessPoolExecutor:
        with self._lock:
            if self._compile_pool is None:
                self._compile_pool = cf.ProcessPoolExecutor(
                    max_workers=self.compile_jobs, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_warm_compile_worker, initargs=(self.triton_cache_dir,),
                )
            return self._compile_pool

    def _replace_pool(self, broken: cf.ProcessPoolExecutor) -> None:
        with self._lock:
            if self._compile_pool is broken:
                self._compile_pool = None
        _kill(broken)

    def compile(self, request: CompileRequest, config_id: str) -> CompileResult:
        """Compile in the pool; a worker crash or hang becomes a typed result, and the pool is renewed."""
        for attempt in (1, 2):
            pool = self._pool()
            future = pool.submit(compile_config, request, config_id)
            try:
                return future.result(timeout=self.compile_timeout_s)
            except cf.TimeoutError:
                self._replace_pool(pool)
                return CompileResult(request.kernel, config_id, request.target, status="timeout",
                                     message=f"compile exceeded {self.compile_timeout_s:.0f} s")
            except cf.process.BrokenProcessPool:
                self._replace_pool(pool)
                if attempt == 2:  # crashed twice: this config kills the compiler
                    return CompileResult(request.kernel, config_id, request.target, status="crashed",
                                         message="the compiler process died")
        raise AssertionError("unreachable")

    def specialize(self, request: SpecializeRequest) -> SpecializeResult:
        """Capture launch specializations in the pool (its workers then stay warm for the compiles)."""
        pool = self._pool()
        future = pool.submit(capture, request)
        try:
            return future.result(timeout=self.compile_timeout_s)
        except (cf.TimeoutError, cf.process.BrokenProcessPool):
            self._replace_pool(pool)
            raise TuneError(f"{request.kernel}: running its launch function on meta tensors for {request.target} "
                            f"crashed or hung a worker; fix: make the launch function shape-driven "
                            f"(no reads of tensor data), see README 'tuning.yaml reference'") from None

    @property
    def devices(self):
        """Where bench tasks lease a device: ``lease(device)``, ``start()``, ``close()``."""
        if self._cluster is not None:
            return self._cluster
        with self._lock:
            if self._device_pool is None:
                self._device_pool = DevicePool(self.device.backend, self.device.count, self.triton_cache_dir)
            return self._device_pool

    @property
    def used_devices(self):
        """The local device pool this run started (still readable after ``close``: the run summary
        reports its start-up), the cluster, or None; never starts anything."""
        return self._cluster or self._device_pool or self._closed_device_pool

    def close(self) -> None:
        with self._lock:
            pool, self._compile_pool = self._compile_pool, None
            devices, self._device_pool = self._device_pool, None
            self._closed_device_pool = devices or self._closed_device_pool
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if devices is not None:
            devices.close()
        if self._cluster is not None:
            self._cluster.close()


def _kill(pool: cf.ProcessPoolExecutor) -> None:
    for process in list(getattr(pool, "_processes", {}).values()):
        process.kill()
    pool.shutdown(wait=False, cancel_futures=True)
