"""Inside a device worker: check one config against the reference, then time it.

CUDA: CUDA events around each timed run; warm up first, then size the run count from the
measured per-run time; optionally flush L2 before each run (outside the timed events) with a
buffer sized to the device's L2. Interpreter: wall clock on the CPU, a functional check with a
rough time; its table is only ever used under the interpreter.
"""
from __future__ import annotations

import math
import time
import zlib
from typing import Any, Callable

from ..loading import resolve
from ..runtime import launch_with_config
from .records import BenchRequest, BenchSettings, ConfigMeasurement

#: ||out - ref|| / ||ref|| allowed per dtype (tf32 dots for float32 land near 3e-4).
TOLERANCE = {"float32": 2e-3, "float16": 1e-2, "bfloat16": 3e-2}
INTERPRETER_MAX_RUNS = 3
CUDA_MAX_RUNS = 10_000


class Workload:
    """The inputs, reference output and launch function for one (kernel, shape, dtype)."""

    def __init__(self, request: BenchRequest, device: str) -> None:
        import torch

        self.launch = resolve(request.root, request.launch_ref)
        make_inputs = resolve(request.root, request.inputs_ref)
        reference = resolve(request.root, request.reference_ref)
        torch.manual_seed(_seed(request))
        self.inputs = make_inputs(dict(request.shape), getattr(torch, request.dtype), device)
        self.expected = reference(*self.inputs)
        self.tolerance = TOLERANCE.get(request.dtype, 1e-2)


def _seed(request: BenchRequest) -> int:
    return zlib.crc32(repr((request.kernel, request.shape, request.dtype)).encode())


def check_result(output: Any, expected: Any, tolerance: float) -> tuple[bool, float, str]:
    """Relative error in float64; NaN or a wrong shape never passes."""
    import torch

    if tuple(output.shape) != tuple(expected.shape):
        return False, math.inf, f"output shape {tuple(output.shape)} != reference {tuple(expected.shape)}"
    out, ref = output.double(), expected.double()
    if not torch.isfinite(out).all():
        return False, math.inf, "output has NaN or Inf"
    denom = max(torch.linalg.vector_norm(ref).item(), 1e-30)
    error = torch.linalg.vector_norm(out - ref).item() / denom
    if error > tolerance:
        return False, error, f"relative error {error:.3g} exceeds {tolerance:g}"
    return True, error, ""


def measure_config(request: BenchRequest, workload: Workload, backend: str, l2_buffer: Any) -> ConfigMeasurement:
    config = dict(request.config)
    run = lambda: launch_with_config(workload.launch, workload.inputs, config, kernel=request.kernel)  # noqa: E731
    try:
        output = run()
        if backend == "cuda":
            import torch

            torch.cuda.synchronize()
        ok, error, message = check_result(output, workload.expected, workload.tolerance)
        if not ok:
            return ConfigMeasurement(request.config_id, "wrong_result", message, error_norm=error)
        if backend == "cuda":
            times = _time_cuda(run, request.settings, l2_buffer)
        else:
            times = _time_wall(run, request.settings)
    except Exception as exc:  # a config that raises is a result; the worker lives on
        return ConfigMeasurement(request.config_id, "runtime_error", f"{type(exc).__name__}: {exc}"[:500])
    return ConfigMeasurement(request.config_id, "ok", times_ms=times, error_norm=error)


def _time_wall(run: Callable[[], Any], settings: BenchSettings) -> list[float]:
    times: list[float] = []
    spent = 0.0
    while len(times) < INTERPRETER_MAX_RUNS and (not times or spent < settings.rep_ms):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
        spent += times[-1]
    return times


def _time_cuda(run: Callable[[], Any], settings: BenchSettings, l2_buffer: Any) -> list[float]:
    import torch

    def timed(n: int, flush: bool) -> list[float]:
        pairs = []
        for _ in range(n):
            if flush and l2_buffer is not None:
                l2_buffer.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in pairs]

    estimate = max(sorted(timed(5, False))[2], 1e-3)  # warm, unflushed median: a floor per run
    warmup_runs = min(CUDA_MAX_RUNS, max(1, math.ceil(settings.warmup_ms / estimate)))
    timed(warmup_runs, False)
    runs = min(CUDA_MAX_RUNS, max(5, math.ceil(settings.rep_ms / estimate)))
    return timed(runs, settings.l2_flush)
