"""A device worker: one process per GPU (or one for the interpreter), fed the configs of one shape.

It owns its device exclusively, so two benchmarks never share a GPU; if a config crashes the
process (illegal address, abort) or hangs, the pool kills it and starts a new one, and only that
config is lost. It imports torch and triton once (a GPU worker is forked from the fork server,
which has; see aot_tune.bench.local.pool) and caches the inputs of the current shape.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import Counter
from multiprocessing.connection import Connection
from typing import Sequence

from aot_tune.bench.local.gpu_profile import BatchProfile
from aot_tune.bench.runner import BenchRequest, ConfigMeasurement, DeviceInfo, workload_key


def worker_main(conn: Connection, backend: str, device_index: int, triton_cache_dir: str,
                environ: dict[str, str] | None = None, imports: Sequence[tuple[str, str]] = ()) -> None:
    """Process entry point: set the environment before torch/triton load (or, forked from the fork
    server, before the lazy reads of the knobs: aot_tune.workers.preload), import the kernels'
    modules (``imports``: manifest folder and ``module:attr``; one that fails is left to the batch
    that needs it, which reports it), then serve batches.

    A batch arrives as ``("batch", requests, next_request)``: requests for one (kernel, shape,
    dtype), and the first request of the shape the pool expects to send next (or None), whose
    input sets and references the worker builds during this batch's timed launches
    (``Workloads``). While the batch runs, ``("more", requests)`` adds configs of the same shape:
    the running pass takes them in (``measure_configs``'s ``more``), or, where it had ended
    first, they are the next batch, of the same shape. The worker sends, in order:
    ``("phase", config_ids, phase)`` before each step that may crash or hang, naming the configs
    with work on the device then (so the pool knows whose fault a death or a hang can be),
    ``("result", measurement, cache hits, cache misses, usable)`` for each config, and
    ``("done", seconds)`` at the end, with the host seconds of the batch and of its set-up
    steps. After a sticky CUDA error (illegal address, launch failure) the context is unusable:
    the worker says so and exits, and the pool gives the configs that have no result yet to a
    fresh one. If other configs had work on the device when the error
    surfaced, the worker cannot tell whose it was: it sends ``("unattributed", config_ids,
    message)`` instead, and the pool measures each of them again on its own.
    """
    from aot_tune import triton_compat
    from aot_tune import forking
    from aot_tune.build.loading import import_ahead

    forking.exit_with_owner(environ)
    forking.adopt_environment(environ)
    os.environ["TRITON_CACHE_DIR"] = triton_cache_dir
    if backend == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)  # as the fork server imported triton
    problem = forking.cuda_fork_problem() if backend == "cuda" and forking.forked_from_server() else None
    if problem:  # before anything touches CUDA: the pool spawns a worker instead
        conn.send(("spawn instead", problem))
        return
    triton_compat.pin_environment()
    from aot_tune.bench.engine.pipeline import context_usable, measure_configs

    info, device, clocks = _open_device(backend, device_index)
    if backend == "cuda" and not forking.forked_from_server():
        triton_compat.warm_first_lookup()  # what a forked worker inherits from the server's preload
    import_ahead(imports)  # before the worker says it is up
    conn.send(info)
    counter = triton_compat.CacheHitCounter()
    workloads = Workloads(device, info.l2_bytes)
    inbox = Inbox(conn)
    in_flight: tuple[str, ...] = ()  # the configs with work on the device, as last announced
    upcoming = None  # the shape the pool expects to send next, as the last batch named it

    def announce(config_ids: tuple[str, ...], phase: str) -> None:
        nonlocal in_flight
        in_flight = config_ids
        conn.send(("phase", config_ids, phase))

    with counter.installed() if backend == "cuda" else _nothing(), profiled(f"device{device_index}"):
        while True:
            message = inbox.recv()
            if message is None:
                return
            if message[0] == "more":  # it came after its batch's pass had ended: a batch of its own
                batch = message[1]
            else:
                _, batch, upcoming = message
            began = time.perf_counter()
            seconds: Counter[str] = Counter()  # where the batch's wall time went (the run summary's split)
            workload = workloads.take(batch[0], upcoming)
            if isinstance(workload, Exception):  # the input builder or reference failed: every config fails
                text = f"input builder or reference failed: {type(workload).__name__}: {workload}"[:500]
                for request in batch:
                    conn.send(("result", ConfigMeasurement(request.config_id, "runtime_error", text), 0, 0, True))
                conn.send(("done", {}))
                continue
            seconds["inputs"] = time.perf_counter() - began
            counted = [counter.hits, counter.misses]
            prepare = (lambda: workloads.prepare(upcoming)) if workloads.wants(upcoming) else None
            results = measure_configs(batch, workload, backend, info.l2_bytes, clocks, announce=announce,
                                      seconds=seconds, prepare=prepare, more=inbox.more)
            with BatchProfile(device_index, batch, backend) as profile:
                for result in results:
                    usable = backend != "cuda" or result.ok or context_usable()
                    if not usable and set(in_flight) - {result.config_id}:
                        conn.send(("unattributed", in_flight,
                                   f"the CUDA context did not survive: {result.message}"[:500]))
                        return
                    if not usable:
                        result.status = "crashed"
                        result.message = f"the CUDA context did not survive this config: {result.message}"[:500]
                    conn.send(("result", result, counter.hits - counted[0], counter.misses - counted[1], usable))
                    counted = [counter.hits, counter.misses]
                    if not usable:
                        return
                    profile.add(result)
            seconds["batches"] = time.perf_counter() - began
            conn.send(("done", dict(seconds)))


class Inbox:
    """The worker's end of the pool's pipe, read between a batch's steps for the configs the bench
    adds (``("more", requests)``) without taking anything else out of turn: any other message
    (the pool closing) is kept for the next ``recv``, and no more are taken after it."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._kept: list = []

    def recv(self):
        return self._kept.pop(0) if self._kept else self._conn.recv()

    def more(self) -> list[BenchRequest]:
        """The requests the bench added since the last call (never waits)."""
        added: list[BenchRequest] = []
        while not self._kept and self._conn.poll():
            message = self._conn.recv()
            if message is not None and message[0] == "more":
                added.extend(message[1])
            else:
                self._kept.append(message)
        return added


class Workloads:
    """The shape a worker measures now and, built ahead, the one it expects next: two at most,
    so device memory holds the input sets of two shapes, never more. A shape whose set-up
    failed is kept as its exception, for the batch that needs it to report."""

    def __init__(self, device: str, l2_bytes: int) -> None:
        self._device, self._l2_bytes = device, l2_bytes
        self._built: dict[tuple, object] = {}

    def take(self, request: BenchRequest, upcoming: BenchRequest | None):
        """The workload of ``request``'s shape (built now unless it was built ahead), after
        dropping every other one but ``upcoming``'s."""
        from aot_tune.bench.engine.workload import Workload

        key = workload_key(request)
        keep = {key} | ({workload_key(upcoming)} if upcoming is not None else set())
        for stale in [k for k in self._built if k not in keep]:
            del self._built[stale]
        if key not in self._built:
            try:
                self._built[key] = Workload(request, self._device)
            except Exception as exc:  # noqa: BLE001 - reported for every config of the batch
                self._built[key] = exc
        return self._built[key]

    def wants(self, upcoming: BenchRequest | None) -> bool:
        return upcoming is not None and workload_key(upcoming) not in self._built

    def prepare(self, upcoming: BenchRequest) -> None:
        """Build ``upcoming``'s shape now (input sets and references, queued on the device)."""
        from aot_tune.bench.engine.workload import Workload

        try:
            workload = Workload(upcoming, self._device)
            workload.prepare(upcoming.settings, self._l2_bytes)
        except Exception as exc:  # noqa: BLE001 - its own batch reports it, as if built then
            workload = exc
        self._built[workload_key(upcoming)] = workload


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


#: A folder: each device worker profiles the batches it serves (cProfile) and writes
#: ``<folder>/<device>-<pid>.pstats`` when the pool closes it (``python -m pstats`` reads it).
PROFILE_ENV = "AOT_TUNE_PROFILE"


@contextlib.contextmanager
def profiled(name: str):
    """The worker's batches under cProfile when ``AOT_TUNE_PROFILE`` names a folder: where a
    slow bench's host time goes, which the run summary's split cannot say."""
    folder = os.environ.get(PROFILE_ENV, "")
    if not folder:
        yield
        return
    import cProfile

    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        os.makedirs(folder, exist_ok=True)
        profile.dump_stats(os.path.join(folder, f"{name}-{os.getpid()}.pstats"))


def _open_device(backend: str, device_index: int):
    import torch

    from aot_tune.runtime.devices import device_key
    from aot_tune.bench.runner import INTERPRETER_DEVICE
    from aot_tune.bench.engine import norms
    from aot_tune.bench.engine.pipeline import warm_up_graphs
    from aot_tune.bench.nvml import GpuClocks

    if backend == "interpreter":
        info = DeviceInfo(INTERPRETER_DEVICE.key, INTERPRETER_DEVICE.name, INTERPRETER_DEVICE.compute_capability,
                          backend)
        return info, "cpu", None
    torch.cuda.set_device(device_index)
    warm_up_graphs(f"cuda:{device_index}")
    norms.warm(f"cuda:{device_index}")  # the check's comparison kernel, before the worker says it is up
    props = torch.cuda.get_device_properties(device_index)
    clocks = GpuClocks(str(getattr(props, "uuid", "")))
    info = DeviceInfo(
        key=device_key(props.name), name=props.name, compute_capability=f"{props.major}.{props.minor}",
        backend=backend, driver=clocks.driver, cuda=str(torch.version.cuda),
        l2_bytes=int(getattr(props, "L2_cache_size", 0)) or 50 * 2**20,
    )
    return info, f"cuda:{device_index}", clocks


if __name__ == "__main__":  # pragma: no cover - started through multiprocessing only
    sys.exit("aot_tune.bench.local.worker is started by the bench pool, not by hand")
