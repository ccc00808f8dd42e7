"""The work of one shape (FLOPs, bytes moved) and what it means on a device: rates and floors.

A kernel's ``cost`` in the manifest gives FLOPs and bytes as expressions over its key dims and
``dtype_bytes``. With a device's datasheet peaks (aot_tune.runtime.devices) a measured time becomes a
rate (TFLOP/s when the kernel declares FLOPs, else GB/s) and the shape gets a floor: the time
the work takes at peak (roofline: the larger of the compute and the memory time). Work is
computed from the manifest when needed, never stored in records: a corrected formula then
needs no re-measurement.

No torch or triton here: the report runs on machines without them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from aot_tune.dtypes import DtypeCombo, element_bytes, members
from aot_tune.runtime.devices import DevicePeak
from aot_tune.space import Constraint

COST_NAMES = ("flops", "bytes")


@dataclass(frozen=True)
class Work:
    flops: float | None = None
    bytes: float | None = None


@dataclass(frozen=True)
class Cost:
    """The manifest's ``cost`` expressions; either may be absent."""

    flops: Constraint | None = None
    bytes: Constraint | None = None
    combos: tuple[DtypeCombo, ...] = ()  # the manifest's, for a combination's dtype_bytes

    def peak_dtype(self, dtype: str) -> str:
        """The dtype whose datasheet peak judges ``dtype``: a combination's first argument's (the
        fp8 of fp8_w8a8, the float16 activations of a w8a16 GEMM)."""
        return members(dtype, {c.name: c for c in self.combos})[0]

    def work(self, shape: Mapping[str, int], dtype: str) -> Work:
        env = {**shape, "dtype_bytes": element_bytes(dtype, {c.name: c for c in self.combos})}
        return Work(*(float(e.evaluate(env)) if e is not None else None for e in (self.flops, self.bytes)))


@dataclass(frozen=True)
class Rate:
    """A measured time as a rate, beside the device's peak for the same unit."""

    value: float
    unit: str            # "TFLOP/s" or "GB/s"
    peak: float | None   # the datasheet peak in that unit, if known


def rate(work: Work, ms: float, peak: DevicePeak | None, dtype: str) -> Rate | None:
    """TFLOP/s when the work has FLOPs (compute-shaped kernels), else GB/s; None without work."""
    if ms <= 0 or not math.isfinite(ms):
        return None
    if work.flops:
        return Rate(work.flops / (ms * 1e-3) / 1e12, "TFLOP/s", peak.matrix_tflops.get(dtype) if peak else None)
    if work.bytes:
        return Rate(work.bytes / (ms * 1e-3) / 1e9, "GB/s", peak.memory_gbps if peak else None)
    return None


def floor_ms(work: Work, peak: DevicePeak | None, dtype: str) -> float | None:
    """The time the work takes at the device's peaks (compute or memory, whichever is longer)."""
    if peak is None:
        return None
    times = []
    if work.flops and dtype in peak.matrix_tflops:
        times.append(work.flops / (peak.matrix_tflops[dtype] * 1e12) * 1e3)
    if work.bytes:
        times.append(work.bytes / (peak.memory_gbps * 1e9) * 1e3)
    return max(times) if times else None
