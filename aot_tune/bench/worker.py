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
    """Process entry point: set the environment before torch/triton load, then serve requests."""
    os.environ["TRITON_CACHE_DIR"] = triton_cache_dir
    if backend == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"
    from .. import triton_compat

    triton_compat.pin_environment()
    from .measure import Workload, measure_config

    info, device, l2_buffer = _open_device(backend, device_index)
    conn.send(info)
    counter = triton_compat.CacheHitCounter()
    workloads: dict[tuple, Workload] = {}
    flush_buffers: dict[int, object] = {}
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
                    conn.send((failed, 0, 0))
                    continue
            flush = l2_buffer
            if backend == "cuda" and request.settings.l2_flush_bytes:
                flush = _flush_buffer(request.settings.l2_flush_bytes, device, flush_buffers)
            before = (counter.hits, counter.misses)
            result = measure_config(request, workloads[key], backend, flush)
            conn.send((result, counter.hits - before[0], counter.misses - before[1]))


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _flush_buffer(nbytes: int, device: str, buffers: dict):
    """A flush buffer of the size the manifest asks for, allocated once per size."""
    if nbytes not in buffers:
        import torch

        buffers[nbytes] = torch.empty(max(1, nbytes // 4), dtype=torch.int32, device=device)
    return buffers[nbytes]


def _open_device(backend: str, device_index: int):
    import torch

    from ..devices import device_key
    from ..hardware import INTERPRETER_DEVICE

    if backend == "interpreter":
        info = DeviceInfo(INTERPRETER_DEVICE.key, INTERPRETER_DEVICE.name, INTERPRETER_DEVICE.compute_capability,
                          backend)
        return info, "cpu", None
    torch.cuda.set_device(device_index)
    props = torch.cuda.get_device_properties(device_index)
    l2_bytes = int(getattr(props, "L2_cache_size", 0)) or 50 * 2**20
    info = DeviceInfo(
        key=device_key(props.name), name=props.name, compute_capability=f"{props.major}.{props.minor}",
        backend=backend, driver=_driver_version(), cuda=str(torch.version.cuda), l2_bytes=l2_bytes,
    )
    # Twice the L2 so nothing of the previous run survives the flush.
    device = f"cuda:{device_index}"
    return info, device, _flush_buffer(2 * l2_bytes, device, {})


def _driver_version() -> str:
    try:
        import subprocess

        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        return ""


if __name__ == "__main__":  # pragma: no cover - started through multiprocessing only
    sys.exit("aot_tune.bench.worker is started by the bench pool, not by hand")
