"""The report's data: what ``report`` collects from the caches and the run log, and what its page,
its markdown and ``plots`` render (a module of its own, so the plots read it without the collecting)."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from aot_tune.cost import Rate
from aot_tune.runtime.devices import DevicePeak
from aot_tune.tables.check import Coverage


@dataclass(frozen=True)
class Timed:
    """One timed side of a row (tuned pick, default config or vendor): its median, or why none."""

    ms: float | None
    note: str          # the config, or why there is no time
    rate: Rate | None = None


@dataclass
class ShapeRow:
    dtype: str
    shape: str
    tuned: Timed
    default: Timed
    vendor: Timed
    floor_ms: float | None
    gpu: bool = True  # False: interpreter times, which no ratio is taken of
    passed: int = 0   # configs that passed the correctness check, of
    measured: int = 0

    @property
    def vs_default(self) -> float | None:
        """How many times faster the tuned config is than the default (>1: tuning paid)."""
        return ratio(self.default.ms, self.tuned.ms) if self.gpu else None

    @property
    def vs_vendor(self) -> float | None:
        """How many times faster the tuned config is than the vendor (>1: we beat it)."""
        return ratio(self.vendor.ms, self.tuned.ms) if self.gpu else None

    @property
    def of_floor(self) -> float | None:
        """Share of the device's peak the tuned config reaches (floor time / measured time)."""
        return ratio(self.floor_ms, self.tuned.ms)


@dataclass
class Heatmap:
    """Per parameter and value: the geometric mean over shapes of (fastest time) / (fastest time
    among configs with that value). 1.0: that value is in the fastest config of every shape."""

    params: list[str]
    values: list[list[object]]        # per param, its values
    scores: list[list[float | None]]  # per param, per value
    shapes: list[list[int]]           # per param, per value: shapes it was measured on


@dataclass
class FailureRow:
    reason: str
    count: int
    example: str


@dataclass
class DeviceSection:
    key: str
    name: str
    backend: str
    toolchain: str
    peak: DevicePeak | None
    rows: list[ShapeRow]
    heatmap: Heatmap
    failures: list[FailureRow]
    bench_seconds: float
    records: int
    measured: str                      # first .. last measurement date
    coverage: Coverage | None
    coverage_grid: list[list[str]]     # [shape, status per dtype...]
    plot: str | None = None            # base64 PNG
    heatmap_plot: str | None = None

    @property
    def gpu(self) -> bool:
        """Whether its times are a GPU's (the interpreter's are not: no times, rates or heatmap)."""
        return self.backend == "cuda"

    @property
    def peak_text(self) -> str:
        if not self.gpu:
            return ("Triton interpreter on the CPU: its timings only pick the config of its table, so no times, "
                    "rates or ratios are shown")
        if self.peak is None:
            return "no datasheet peak for this device, so no floor"
        rates = ", ".join(f"{dtype} {value:g}" for dtype, value in sorted(self.peak.matrix_tflops.items()))
        return f"peak {rates} TFLOP/s, {self.peak.memory_gbps:g} GB/s ({self.peak.source})"

    @property
    def missing_times(self) -> list[str]:
        """Why some sides of the rows have no time, each reason once with how many rows it hits."""
        notes: Counter[str] = Counter()
        for row in self.rows:
            for side in ("tuned", "default", "vendor"):
                timed = getattr(row, side)
                if timed.ms is None:
                    notes[f"{side}: {timed.note}"] += 1
        return [f"{note} ({count} of {len(self.rows)} rows)" for note, count in sorted(notes.items())]


@dataclass
class CompileTime:
    compiles: int
    seconds: float
    by_target: dict[str, tuple[int, float]]
    failures: list[FailureRow]


@dataclass
class KernelSection:
    name: str
    key: tuple[str, ...]
    dtypes: tuple[str, ...]
    unit: str | None                   # "TFLOP/s", "GB/s", or None without a cost
    default_declared: bool
    vendor: str
    devices: list[DeviceSection]
    compile_time: CompileTime | None
    #: devices the manifest declares (``devices:``) that have no table for this kernel
    absent: list[Coverage] = field(default_factory=list)


@dataclass
class RunRow:
    started_at: str
    kernels: str
    device: str
    wall_s: float
    split: dict[str, float]
    ok: bool
    predicted_s: float | None = None  # what the run predicted at its start (None: logged before predictions)


@dataclass
class Report:
    manifest: str
    generated_at: str
    version: str
    kernels: list[KernelSection]
    runs: list[RunRow]
    plots: bool
    notes: list[str] = field(default_factory=list)
    runs_plot: str | None = None
    #: why no run is shown (empty when some are): the log exists only where `doit tune` worked
    no_runs: str = ""


@dataclass(frozen=True)
class ReportPaths:
    html: Path
    markdown: Path


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator <= 0 or not math.isfinite(numerator):
        return None
    return numerator / denominator
