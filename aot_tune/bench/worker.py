"""A device worker: one process per GPU (or one for the interpreter), fed one config at a time.

It owns its device exclusively, so two benchmarks never share a GPU; if a config crashes the
process (illegal address, abort) or hangs, the pool kills it and starts a new one, and only that
config is lost. It imports torch and triton once and caches the inputs of the current shape.
"""
from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection

from .records import BenchRequest, ConfigMeasurement, DeviceInfo


def worker_main(conn: Connection, backend: str, device_index: int, triton_cache_dir: str) -> None:
    """Process entry point: set the environment before torch/triton load, then serve requests.

    Each reply is ``(measurement, cache hits, cache misses, usable)``; after a sticky CUDA error
    (illegal address, launch failure) the context is unusable, so the worker says so and exits,
    and the pool starts a fresh one for the next config.
    """
    os.environ["TRITON_CACHE_DIR"] = triton_cache_dir
    if backend == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"
    from .. import triton_compat

    triton_compat.pin_environment()
    from .measure import Workload, context_usable, measure_config

    info, device, clocks = _open_device(backend, device_index)
    conn.send(info)
    counter = triton_compat.CacheHitCounter()
    workloads: dict[tuple, Workload] = {}
    with counter.installed() if backend == "cuda" else _nothing():
        while True:
            message = conn.recv()
            if message is None:
                return
            request: BenchRequest = message
            key = (request.kernel, request.shape, request.dtype)
            if key not in workloads:
                workloads.clear()  # one shape at a time keeps device memory flat
                try:
                    workloads[key] = Workload(request, device)
                except Exception as exc:  # the input builder or reference failed: every config fails
                    failed = ConfigMeasurement(request.config_id, "runtime_error",
                                               f"input builder or reference failed: {type(exc).__name__}: {exc}"[:500])
                    conn.send((failed, 0, 0, True))
                    continue
            before = (counter.hits, counter.misses)
            result = measure_config(request, workloads[key], backend, info.l2_bytes, clocks)
            usable = backend != "cuda" or result.ok or context_usable()
            if not usable:
                result.status = "crashed"
                result.message = f"the CUDA context did not survive this config: {result.message}"[:500]
            conn.send((result, counter.hits - before[0], counter.misses - before[1], usable))
            if not usable:
                return


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _open_device(backend: str, device_index: int):
    import torch

    from ..devices import device_key
    from ..hardware import INTERPRETER_DEVICE
    from .nvml import GpuClocks

    if backend == "interpreter":
        info = DeviceInfo(INTERPRETER_DEVICE.key, INTERPRETER_DEVICE.name, INTERPRETER_DEVICE.compute_capability,
                          backend)
        return info, "cpu", None
    torch.cuda.set_device(device_index)
    props = torch.cuda.get_device_properties(device_index)
    clocks = GpuClocks(str(getattr(props, "uuid", "")))
    info = DeviceInfo(
        key=device_key(props.name), name=props.name, compute_capability=f"{props.major}.{props.minor}",
        backend=backend, driver=clocks.driver, cuda=str(torch.version.cuda),
        l2_bytes=int(getattr(props, "L2_cache_size", 0)) or 50 * 2**20,
    )
    return info, f"cuda:{device_index}", clocks


if __name__ == "__main__":  # pragma: no cover - started through multiprocessing only
    sys.exit("aot_tune.bench.worker is started by the bench pool, not by hand")
