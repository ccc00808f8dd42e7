"""Plain-data requests and results exchanged with device workers (they pickle across processes),
and the interface bench tasks lease devices through (``Runner``, ``DeviceLease``): implemented by
the local pool (aot_tune.bench.local.pool) and by a Dask cluster (aot_tune.bench.dask.client)."""
from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Callable, Iterable, Literal, Mapping, Protocol, Sequence, get_args

from aot_tune.manifest import BenchSettings
from aot_tune.bench.nvml import ClockReading
from aot_tune.runtime.devices import INTERPRETER

#: Outcome of one config on one shape; everything but "ok" is a typed failure and never chosen.
MeasurementStatus = Literal["ok", "wrong_result", "runtime_error", "crashed", "timeout", "invalid"]
MEASUREMENT_STATUSES: tuple[str, ...] = get_args(MeasurementStatus)


@dataclass(frozen=True)
class BenchRequest:
    """Measure one config of one kernel on one (shape, dtype)."""

    kernel: str
    root: str
    launch_ref: str
    inputs_ref: str
    reference_ref: str | None  # None: outputs are compared with ``check_config``'s
    shape: tuple[tuple[str, int], ...]
    dtype: str
    config_id: str
    config: tuple[tuple[str, object], ...]
    settings: BenchSettings
    #: Call ``launch_ref(*inputs)`` as it is, with no config: a vendor implementation (torch) timed
    #: as a baseline by the same engine.
    plain: bool = False
    #: Triton kernel hashes of the compiles a GPU launch of this config uses (from the compile
    #: stage), so a worker on another machine can be given those Triton cache entries.
    kernel_hashes: tuple[str, ...] = ()
    #: Without a reference: the config (params) whose output every config's is checked against.
    check_config: tuple[tuple[str, object], ...] | None = None
    #: The manifest's dtype combinations (``dtype`` may name one) and the correctness tolerance.
    combos: tuple = ()
    tolerance: float | None = None  # None: the dtype's default (aot_tune.dtypes.TOLERANCE)
    #: A baseline (the default config, the vendor function): its kernels are not the compile
    #: stage's, so their Triton cache lookups are not counted in the hit rate.
    baseline: bool = False
    #: > 0: one of a shape's finalists, timed with the others interleaved in this many rounds
    #: (aot_tune.bench.engine.pipeline); every request of such a batch has it.
    final_rounds: int = 0
    #: The share of a full timing this is: below 1, a search's screening timing, whose settings
    #: are already scaled (BenchSettings.screening) and whose fewest samples scale too
    #: (aot_tune.bench.engine.timing.min_samples).
    share: float = 1.0


@dataclass
class ConfigMeasurement:
    """One config's outcome on one (shape, dtype): its samples, how they were taken, and the clocks."""

    config_id: str
    status: MeasurementStatus
    message: str = ""
    times_ms: list[float] = field(default_factory=list)
    error_norm: float = 0.0
    method: str = ""               # "events", "graph" or "wall"
    launches_per_sample: int = 1
    cold_l2: bool = False
    clocks_start: ClockReading = ClockReading()
    clocks_end: ClockReading = ClockReading()
    phase_seconds: dict[str, float] = field(default_factory=dict)  # wall time of check, warmup, capture, timed

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class DeviceInfo:
    """What a device worker reports about itself; goes into every record's provenance."""

    key: str
    name: str
    compute_capability: str
    backend: str
    driver: str = ""
    cuda: str = ""
    l2_bytes: int = 0


@dataclass(frozen=True)
class DeviceModel:
    """A GPU model (or the interpreter) a run benchmarks on: the local GPUs of that model, or the
    workers of that model in a cluster; ``count`` devices of it take bench tasks side by side."""

    backend: str              # "cuda" or "interpreter"
    key: str                  # table key, e.g. "h100-sxm"
    name: str
    compute_capability: str   # "9.0", or "cpu"
    count: int                # device workers to run
    notice: str = ""

    @property
    def arch(self) -> int | None:
        if self.backend != "cuda":
            return None
        major, minor = self.compute_capability.split(".")
        return int(major) * 10 + int(minor)

    @property
    def target(self) -> str | None:
        return f"sm{self.arch}" if self.arch is not None else None


def workload_key(request: BenchRequest) -> tuple:
    """What one shape's input sets and references depend on: requests with the same key share them."""
    return (request.kernel, request.shape, request.dtype)


INTERPRETER_DEVICE = DeviceModel(INTERPRETER, INTERPRETER, "Triton interpreter (CPU)", "cpu", 1)


#: A lease's seconds (``DeviceLease.seconds``) that its batches waited for the device's worker to
#: start: a cluster worker starts its device process (torch, CUDA) with the run, so its first batch
#: may wait for it, on the worker, where the lease's ``ready`` cannot. Start-up, not device time held.
STARTUP_WAITED = "waited for start-up"


#: Configs of a running batch's shape that became ready since it last asked (none: nothing new):
#: a device that can take them into the batch asks as it goes (``DeviceLease.measure_all``).
MoreRequests = Callable[[], Sequence[BenchRequest]]


class DeviceLease(Protocol):
    """A device held by one bench task until its lease ends: the task's configs run there."""

    #: Triton cache hits and misses of the kernels the device's worker loaded for this lease
    #: (a miss means the compile stage's output was not used).
    cache_hits: int
    cache_misses: int
    #: Host seconds of the worker's batches for this lease ("batches") and of the set-up steps in
    #: them where the GPU idles ("inputs": input sets and reference outputs, "loads": kernel
    #: loads); and ``STARTUP_WAITED``, where the lease's batches waited for its worker to start.
    seconds: Mapping[str, float]

    @property
    def info(self) -> DeviceInfo:
        """The device, as its worker reports it (goes into every record's provenance)."""

    def ready(self) -> None:
        """Wait until the device's worker is up, so its start-up is no measurement's time."""

    def measure_all(self, requests: Sequence[BenchRequest], timeout_s: float,
                    more: MoreRequests | None = None) -> Iterable[ConfigMeasurement]:
        """One result per request, in any order. A config that kills the worker or runs past
        ``timeout_s`` in one step is recorded as crashed or timed out, never raised. ``more``:
        configs of the same shape that became ready meanwhile, which a device that can take them
        into the running batch asks for as it goes (their results come too); one that cannot
        never calls it."""


class Runner(Protocol):
    """The bench devices of a run (local GPUs, the interpreter, or a Dask cluster's GPUs): each
    leased to one bench task at a time, so no device runs two benchmarks at once."""

    #: time.time() when the device workers were asked to start, and when the last one was up
    #: (the run summary's start-up time); both None for a cluster, whose workers were up before the run.
    started_at: float | None
    ready_at: float | None

    def lease(self, device: DeviceModel, upcoming: BenchRequest | None = None) -> AbstractContextManager[DeviceLease]:
        """Hold a device of model ``device`` for one bench task until the block ends. ``upcoming``
        (the first request the task will send) lets a busy device build that shape's inputs while
        the task waits; a runner may ignore it."""

    def start(self) -> None:
        """Start the device workers in the background (e.g. while compiles run)."""

    def close(self) -> None:
        """Stop the device workers (the run is over)."""
