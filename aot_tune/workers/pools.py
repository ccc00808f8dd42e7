"""Worker processes shared by all tasks of one run: a compile pool and the bench devices.

doit runs our tasks on threads (``-P thread``); each task hands its work to a pool here and
waits. Workers start once and stay alive across tasks. Compile workers are forked from a fork
server that imported torch and triton and did their one-time set-up once (aot_tune.forking), so
each starts in milliseconds instead of importing for seconds; they are all started as soon as
the run knows it will compile (``start_compiles``), while the server's imports may still be
running. Nothing starts until the run knows it needs it, so a run with nothing to do starts nothing.

The bench devices are the local device pool (``--executor local``), or the GPUs of a Dask
cluster (``--executor dask``, aot_tune.bench.dask); both lease a device of a given model to one
bench task at a time. Compiles always run here.
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from aot_tune import forking
from aot_tune.bench.engine.norms import precompile as precompile_norms
from aot_tune.bench.local.pool import DevicePool
from aot_tune.build.compile import CompileRequest, CompileResult, compile_config
from aot_tune.build.deadline import CompileDeadline
from aot_tune.build.loading import import_ahead
from aot_tune.errors import TuneError
from aot_tune.bench.runner import DeviceModel, Runner
from aot_tune.build.specialize import UNBOUND, SpecializeRequest, SpecializeResult, capture, launch_key

DEFAULT_COMPILE_TIMEOUT_S = 600.0
#: How much lower than the tuning process's the compile workers' CPU priority is (``nice``) when
#: the benches run on GPUs. They fill every core while the device workers measure, and a device
#: worker's host work (checks, graph captures, launches) then waited for the CPU: on a 4x H200
#: host a GEMM config measured while 64 compiles ran cost 6.8 ms of device time besides its
#: timed launches, 3.2 ms after. Lower, they take only the CPU time the device workers and the
#: tuning process leave. Under the interpreter the device worker's measurements are CPU work
#: like the compiles, which the benches wait for: there the priorities stay equal.
COMPILE_NICENESS = 10


#: How this worker started (read by ``worker_state``): whether torch was already imported when
#: the initializer ran, i.e. inherited from the fork server.
_STARTED: dict = {}


def _warm_compile_worker(triton_cache_dir: str, environ: dict[str, str] | None = None,
                         imports: tuple[tuple[str, str], ...] = (), torch: bool = True, niceness: int = 0) -> None:
    """Pool initializer: take the pool's environment, pin Triton's cache and env before any
    compile, and import what the fork server did not (everything, for a spawned worker), then
    the kernels' modules (``imports``): every worker starts with the run, so a library's import
    overlaps the captures instead of delaying a worker's first compile. ``torch=False``: no
    compile of the run needs torch (aot_tune.forking.start_server), so none is imported.
    ``niceness``: how much to lower the worker's CPU priority (``COMPILE_NICENESS``, or 0)."""
    _STARTED["torch_preloaded"] = "torch" in sys.modules
    if niceness and hasattr(os, "nice"):
        os.nice(niceness)
    modules = len(sys.modules)
    forking.exit_with_owner(environ)
    forking.adopt_environment(environ)
    os.environ["TRITON_CACHE_DIR"] = triton_cache_dir
    os.environ.pop("TRITON_INTERPRET", None)
    from aot_tune import triton_compat

    triton_compat.pin_environment()
    if torch:
        import torch  # noqa: F401
    import triton  # noqa: F401

    _STARTED["modules_imported"] = len(sys.modules) - modules
    began = time.perf_counter()
    import_ahead(imports)
    _STARTED["kernel_imports_s"] = time.perf_counter() - began


def _started() -> int:
    """A no-op task: submitting one per worker starts them all at once."""
    return os.getpid()


def worker_state(hold_s: float = 0.0, module: str = "") -> dict:
    """What a compile worker runs with (for tests and diagnostics), after ``hold_s`` seconds (so
    that tasks submitted together land on different workers); ``module``: whether it is imported."""
    import time

    time.sleep(hold_s)
    preload = sys.modules.get(forking.PRELOAD_MODULE)  # inherited from the fork server, if forked from it
    return {"pid": os.getpid(), "forked": forking.forked_from_server(), **_STARTED,
            "niceness": os.nice(0) if hasattr(os, "nice") else None,
            "preload": dict(preload.STATE) if preload is not None else {},
            "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR"), "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET"),
            "environ": dict(os.environ), "imported": bool(module) and module in sys.modules}


class Executors:
    def __init__(self, device: DeviceModel, triton_cache_dir: Path, compile_jobs: int,
                 compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S, cluster=None,
                 deadline: CompileDeadline = CompileDeadline()) -> None:
        """``cluster``: an ``aot_tune.bench.dask.ClusterDevices`` to bench on instead of local devices.
        ``deadline``: when a compile is given up relative to the valid compiles of its kernel and
        target in this run (``compile_timeout_s`` is the absolute limit, for a hang)."""
        self.device = device
        self._cluster = cluster
        self.triton_cache_dir = str(triton_cache_dir)
        self.compile_jobs = max(1, compile_jobs)
        self.compile_timeout_s = compile_timeout_s
        self.deadline = deadline
        self._peer_seconds: dict[tuple[str, str], list[float]] = defaultdict(list)
        self._abandoned = 0
        self._compile_pool: cf.ProcessPoolExecutor | None = None
        self._device_pool: DevicePool | None = None
        self._compiles_started = False
        self._closed = False
        self._lock = threading.Lock()
        #: (manifest folder, ``module:attr``) the compile workers and the local device workers
        #: import while they start (aot_tune.build.loading.import_ahead); set before either starts.
        self.kernel_imports: tuple[tuple[str, str], ...] = ()
        #: Whether the compile workers import torch (False: every compile of the run is of a kernel
        #: rebuilt from its recorded source, on stand-ins for its tensors); set before they start.
        self.compiles_need_torch = True

    def _pool(self) -> cf.ProcessPoolExecutor:
        context = forking.context()  # the first call in a process waits for the fork server's first worker
        with self._lock:
            if self._closed:
                raise RuntimeError("the compile pool is closed")
            if self._compile_pool is None:
                self._compile_pool = self._new_pool(self.compile_jobs, context)
            return self._compile_pool

    def _new_pool(self, workers: int, context) -> cf.ProcessPoolExecutor:
        """Compile workers in ``context`` (the fork server's, or spawn), set up for this run."""
        return cf.ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_warm_compile_worker,
                                      initargs=(self.triton_cache_dir, forking.environment(), self.kernel_imports,
                                                self.compiles_need_torch,
                                                COMPILE_NICENESS if self.device.backend == "cuda" else 0))

    def start_compiles(self) -> None:
        """Start the compile workers now, all of them, in the background: the fork server begins
        its imports at once, and every worker is up when the first compiles are submitted
        (a pool starts one worker per submitted task otherwise). Idempotent."""
        with self._lock:
            if self._compiles_started:
                return
            self._compiles_started = True
        forking.start_server()
        threading.Thread(target=self._start_all_compile_workers, name="aot_tune-compile-start", daemon=True).start()

    def _start_all_compile_workers(self) -> None:
        try:
            pool = self._pool()
            for _ in range(self.compile_jobs):
                pool.submit(_started)
        except RuntimeError:  # closed, or broken meanwhile (the next compile renews it)
            pass

    def precompile_checks(self) -> None:
        """Have a compile worker compile the check's comparison kernel for the local GPUs into the
        run's Triton cache now (aot_tune.bench.engine.norms.precompile), in the background: the
        device workers start meanwhile and then load it instead of compiling it. Nothing for the
        interpreter or a cluster (whose workers keep their own caches)."""
        if self._cluster is not None or self.device.arch is None:
            return
        threading.Thread(target=self._precompile_checks, args=(self.device.arch,), name="aot_tune-precompile",
                         daemon=True).start()  # the pool waits for the fork server's imports: not on this thread

    def _precompile_checks(self, arch: int) -> None:
        try:
            self._pool().submit(precompile_norms, arch)
        except (RuntimeError, cf.process.BrokenProcessPool):  # closed or broken: the device workers compile it
            pass

    def _replace_pool(self, broken: cf.ProcessPoolExecutor) -> None:
        with self._lock:
            if self._compile_pool is broken:
                self._compile_pool = None
        _kill(broken)

    def compile(self, request: CompileRequest, config_id: str,
                may_win: Callable[[], bool | None] = lambda: None,
                lost: Callable[[], bool] = lambda: False) -> CompileResult:
        """Compile in the pool; a worker crash or hang becomes a typed result, and the pool is
        renewed. ``may_win``: whether a bench of this run may still pick the config (None: no
        bench uses this compile), asked before the deadline gives the compile up; ``lost``:
        whether every bench that uses it gave it up, asked about once a second as it runs (it is
        then given up at once, before the deadline; with the deadline off, never)."""
        pool = self._pool()
        try:
            return self._await(pool.submit(compile_config, request, config_id), request, config_id, may_win, lost)
        except cf.TimeoutError:
            self._replace_pool(pool)
            return self._timed_out(request, config_id)
        except cf.process.BrokenProcessPool:  # this config, or another one in the pool, killed a worker
            self._replace_pool(pool)
        alone = self._new_pool(1, forking.context())
        try:  # again on a worker of its own: only its own crash counts against it
            return alone.submit(compile_config, request, config_id).result(timeout=self.compile_timeout_s)
        except cf.TimeoutError:
            return self._timed_out(request, config_id)
        except cf.process.BrokenProcessPool:
            return CompileResult(request.kernel, config_id, request.target, status="crashed",
                                 message="the compiler process died (alone on its worker)")
        finally:
            _kill(alone)

    def _await(self, future: cf.Future, request: CompileRequest, config_id: str,
               may_win: Callable[[], bool | None], lost: Callable[[], bool] = lambda: False) -> CompileResult:
        """The compile's result, or ``timeout`` once it has run past the batch's deadline and no
        bench may still pick it (``may_win``), or as soon as every bench that uses it gave it up
        (``lost``): the compile is abandoned (its worker finishes it, unread; the pool is killed
        at close), so the tasks waiting on it go on and the run does not wait for it. While a
        bench may still pick it, it runs on. ``cf.TimeoutError`` past the absolute limit."""
        peers = self._peer_seconds[(request.kernel, request.target)]
        began = None
        while True:
            now = time.monotonic()
            if began is None and future.running():
                began = now
            waited = 0.0 if began is None else now - began
            limit = min(self.compile_timeout_s, self.deadline.seconds(peers))
            try:
                wait_s = (max(0.05, min(1.0, limit - waited)) if waited < limit else 1.0) if began else 0.2
                result = future.result(timeout=wait_s)
            except cf.TimeoutError:
                if began is not None and self.deadline.factor > 0 and lost():  # --compile-deadline 0: wait
                    self._abandoned += 1
                    return CompileResult(request.kernel, config_id, request.target, status="timeout",
                                         seconds=time.monotonic() - began,
                                         message=f"given up after {time.monotonic() - began:.0f} s: every bench of "
                                                 f"this run that uses it judged it a straggler that cannot win")
                if began is None or time.monotonic() - began < limit:
                    continue
                if limit >= self.compile_timeout_s:
                    raise
                wanted = may_win()
                if wanted:  # a bench may still pick it: only the absolute limit stops it
                    if time.monotonic() - began < self.compile_timeout_s:
                        continue
                    raise
                self._abandoned += 1
                why = "; no bench of this run could still pick it" if wanted is False else ""
                return CompileResult(request.kernel, config_id, request.target, status="timeout",
                                     seconds=time.monotonic() - began,
                                     message=f"compile deadline: over {limit:.0f} s ({self.deadline.describe()}, "
                                             f"median {statistics.median(peers):.1f} s){why}; --compile-deadline 0 "
                                             f"turns it off")
            if result.status == "ok":
                peers.append(result.seconds)
            return result

    def _timed_out(self, request: CompileRequest, config_id: str) -> CompileResult:
        return CompileResult(request.kernel, config_id, request.target, status="timeout",
                             message=f"compile exceeded {self.compile_timeout_s:.0f} s")

    def specialize(self, request: SpecializeRequest) -> SpecializeResult:
        """Capture launch specializations in the pool (its workers then stay warm for the compiles).
        A launch that kills its worker (os._exit, abort, a segfault, even on meta tensors) costs
        only its config: the request is captured again one launch at a time, and each launch that
        kills a worker is recorded as unbound, so its compile task reproduces the crash and records
        it as ``crashed``. A hang is the launch function waiting on something: one line."""
        try:
            return self._capture(request)
        except cf.process.BrokenProcessPool:
            pass
        result = SpecializeResult(request.target)
        for shape, shape_dict, dtype, configs in request.launches:
            for config in configs:
                single = replace(request, launches=((shape, shape_dict, dtype, (config,)),))
                try:
                    part = self._capture(single)
                except cf.process.BrokenProcessPool:
                    part = SpecializeResult(request.target, launches=1)
                    part.by_launch[launch_key(shape, dtype)] = {config[0]: UNBOUND}
                    part.described[UNBOUND] = "the launch function killed its process (on meta tensors)"
                result.merge(part)
        return result

    def _capture(self, request: SpecializeRequest) -> SpecializeResult:
        pool = self._pool()
        future = pool.submit(capture, request)
        try:
            return future.result(timeout=self.compile_timeout_s)
        except cf.TimeoutError:
            self._replace_pool(pool)
            raise TuneError(f"{request.kernel}: its launch function ran on meta tensors for {request.target} for more "
                            f"than {self.compile_timeout_s:.0f} s without returning; fix: make the launch function "
                            f"shape-driven (no waiting on data or devices), see docs/reference/tuning-yaml.md") from None
        except cf.process.BrokenProcessPool:
            self._replace_pool(pool)
            raise

    @property
    def devices(self) -> Runner:
        """Where bench tasks lease a device: the cluster's, or the local pool (made on first use)."""
        if self._cluster is not None:
            return self._cluster
        with self._lock:
            if self._device_pool is None:
                self._device_pool = DevicePool(self.device.backend, self.device.count, self.triton_cache_dir,
                                               imports=self.kernel_imports)
            return self._device_pool

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._compile_pool = self._compile_pool, None
            # The closed device pool stays, so the run summary reads its start-up times (a new one
            # would have none, and the summary would say the workers were up before the run).
            devices = self._device_pool
        if pool is not None and self._abandoned:
            _kill(pool)  # do not wait for the compiles the deadline gave up
        elif pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if devices is not None:
            devices.close()
        if self._cluster is not None:
            self._cluster.close()


def _kill(pool: cf.ProcessPoolExecutor) -> None:
    for process in list((getattr(pool, "_processes", None) or {}).values()):  # None once broken
        process.kill()
    pool.shutdown(wait=False, cancel_futures=True)
