"""Inside a device worker: check one config against the reference, then time it.

Correctness. Every config runs once on random inputs and is compared with the kernel's torch
reference under a dtype-aware relative tolerance; NaN, Inf or a wrong shape never pass.
Consecutive configs are checked on different input sets, so a config that writes nothing cannot
pass on the output its predecessor left in a reused buffer.

Timing (CUDA), in three steps:

1. Warm up with back-to-back launches in doubling batches until ``warmup_ms`` of GPU time has
   run; the last batch gives the per-launch GPU time and the host time to issue one launch.
2. Kernels that are short (under ``GRAPH_BELOW_MS``) or shorter than their own launch on the
   host are timed as CUDA-graph replays of many launches, so host launch overhead cannot leak
   into the samples; the others get a pair of CUDA events around each launch. The run count is
   sized from the warm estimate to fill ``rep_ms`` of GPU time.
3. Cold L2 without a flush kernel: timed launches cycle through enough independent input sets
   that every launch reads inputs other launches have pushed out of L2 (``l2_flush_bytes`` of
   other inputs in between, twice the device's L2 by default). The GPU spends the whole timed
   phase in the kernel under test, instead of zeroing a 256 MB buffer before every run.

Interpreter: wall clock on the CPU, a functional check with a rough time; its table is only
ever used under the interpreter.
"""
from __future__ import annotations

import math
import time
import warnings
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

from ..loading import resolve
from ..runtime import launch_with_config
from .nvml import ClockReading, GpuClocks
from .records import BenchRequest, BenchSettings, ConfigMeasurement

#: ||out - ref|| / ||ref|| allowed per dtype (tf32 dots for float32 land near 3e-4).
TOLERANCE = {"float32": 2e-3, "float16": 1e-2, "bfloat16": 3e-2}
#: Input sets the correctness checks rotate through (consecutive configs never share one).
CHECK_SETS = 2
#: Kernels faster than this are timed with CUDA graphs.
GRAPH_BELOW_MS = 0.010
#: ... and so are kernels whose GPU time is under this multiple of their host launch time.
HOST_BOUND_RATIO = 1.5
#: GPU time one graph replay (one sample) spans at least.
GRAPH_SAMPLE_MS = 0.25
MAX_GRAPH_LAUNCHES = 1024
MAX_INPUT_SETS = 1024
#: Share of free device memory the rotating input sets may take.
ROTATION_MEMORY_SHARE = 0.25
MIN_SAMPLES = 10
MAX_SAMPLES = 10_000
MAX_WARMUP_BATCH = 4096
INTERPRETER_MAX_RUNS = 3


class Workload:
    """The inputs, reference outputs and launch function of one (kernel, shape, dtype).

    Input sets are built on demand from seeds derived from the key, so every run of the tuner
    sees the same inputs, and only the sets a measurement needs are ever allocated.
    """

    def __init__(self, request: BenchRequest, device: str) -> None:
        import torch

        self.kernel = request.kernel
        self.root = request.root
        self.launch = resolve(request.root, request.launch_ref)
        self._make_inputs = resolve(request.root, request.inputs_ref)
        self._reference = resolve(request.root, request.reference_ref)
        self._shape = dict(request.shape)
        self._dtype = getattr(torch, request.dtype)
        self._device = device
        self._seed = zlib.crc32(repr((request.kernel, request.shape, request.dtype)).encode())
        self._sets: list[tuple] = []
        self._expected: dict[int, Any] = {}
        self._checked = 0
        self.tolerance = TOLERANCE.get(request.dtype, 1e-2)
        self.rotation: Rotation | None = None
        self.inputs(0)  # fail here, once per shape, if the input builder is broken

    def inputs(self, index: int) -> tuple:
        import torch

        while len(self._sets) <= index:
            torch.manual_seed(self._seed + len(self._sets))
            built = self._make_inputs(dict(self._shape), self._dtype, self._device)
            self._sets.append(tuple(built))
        return self._sets[index]

    def expected(self, index: int) -> Any:
        if index not in self._expected:
            inputs = self.inputs(index)
            if _all_zero(inputs):
                raise ValueError("the input builder returned all-zero tensors, so a kernel that writes zeros "
                                 "would pass the check; fix: build random inputs")
            self._expected[index] = self._reference(*inputs)
        return self._expected[index]

    def next_check_set(self) -> int:
        index = self._checked % CHECK_SETS
        self._checked += 1
        return index

    def run(self, index: int, config: dict) -> Any:
        return launch_with_config(self.launch, self.inputs(index), config, kernel=self.kernel)

    def runner(self, request: BenchRequest) -> Callable[[int], Any]:
        """What one launch of the request does on input set ``i``: the kernel with the request's
        config, or (``plain``) the named function as it is, e.g. the vendor baseline."""
        if request.plain:
            function = resolve(self.root, request.launch_ref)
            return lambda i: function(*self.inputs(i))
        config = dict(request.config)
        return lambda i: self.run(i, config)

    def rotation_for(self, settings: BenchSettings, l2_bytes: int) -> "Rotation":
        """How many input sets timed launches cycle through (decided once per shape)."""
        if self.rotation is None:
            import torch

            cold_bytes = (settings.l2_flush_bytes or 2 * l2_bytes) if settings.l2_flush else 0
            free_bytes = torch.cuda.mem_get_info()[0] if self._device != "cpu" else 0
            self.rotation = plan_rotation(_tensor_bytes(self.inputs(0)), cold_bytes, free_bytes)
            self.inputs(self.rotation.sets - 1)  # build every set now, never inside a timed phase
            torch.cuda.synchronize()
        return self.rotation


@dataclass(frozen=True)
class Rotation:
    sets: int
    cold_l2: bool


def plan_rotation(set_bytes: int, cold_bytes: int, free_bytes: int) -> Rotation:
    """Sets to cycle through so that between two reads of one set at least ``cold_bytes`` of other
    inputs pass through L2; capped by memory and ``MAX_INPUT_SETS``. ``cold_l2`` says whether
    the cap still let that happen (tiny inputs may not: they stay L2-resident in real use too)."""
    if cold_bytes <= 0 or set_bytes <= 0:
        return Rotation(1, False)
    wanted = math.ceil(cold_bytes / set_bytes) + 1
    affordable = max(1, int(free_bytes * ROTATION_MEMORY_SHARE) // set_bytes)
    sets = max(1, min(wanted, affordable, MAX_INPUT_SETS))
    return Rotation(sets, (sets - 1) * set_bytes >= cold_bytes)


def _tensor_bytes(inputs: tuple) -> int:
    return sum(x.numel() * x.element_size() for x in inputs if hasattr(x, "element_size"))


def _all_zero(inputs: tuple) -> bool:
    tensors = [x for x in inputs if hasattr(x, "element_size") and x.numel() > 0]
    return bool(tensors) and all(not x.any().item() for x in tensors)


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


@dataclass
class Timing:
    times_ms: list[float]
    method: str
    launches_per_sample: int = 1
    cold_l2: bool = False
    phase_seconds: dict[str, float] = field(default_factory=dict)


def measure_config(request: BenchRequest, workload: Workload, backend: str, l2_bytes: int = 0,
                   clocks: GpuClocks | None = None) -> ConfigMeasurement:
    """Check, then time one config. Never raises for a kernel fault: it becomes the result."""
    start = clocks.read() if clocks else ClockReading()
    index = workload.next_check_set()
    began = time.perf_counter()
    try:
        run = workload.runner(request)
        output = run(index)
        if backend == "cuda":
            import torch

            torch.cuda.synchronize()
        ok, error, message = check_result(output, workload.expected(index), workload.tolerance)
        if not ok:
            return ConfigMeasurement(request.config_id, "wrong_result", message, error_norm=error)
        del output
        checked = time.perf_counter()
        if backend == "cuda":
            rotation = workload.rotation_for(request.settings, l2_bytes)
            timing = time_cuda(run, rotation, request.settings)
        else:
            timing = time_wall(lambda: run(index), request.settings)
    except Exception as exc:  # a config that raises is a result; the worker decides if it can go on
        return ConfigMeasurement(request.config_id, "runtime_error", f"{type(exc).__name__}: {exc}"[:500])
    end = clocks.read() if clocks else ClockReading()
    return ConfigMeasurement(request.config_id, "ok", times_ms=timing.times_ms, error_norm=error,
                             method=timing.method, launches_per_sample=timing.launches_per_sample,
                             cold_l2=timing.cold_l2, clocks_start=start, clocks_end=end,
                             phase_seconds={"check": checked - began, **timing.phase_seconds})


def time_wall(run: Callable[[], Any], settings: BenchSettings) -> Timing:
    times: list[float] = []
    spent = 0.0
    while len(times) < INTERPRETER_MAX_RUNS and (not times or spent < settings.rep_ms):
        began = time.perf_counter()
        run()
        times.append((time.perf_counter() - began) * 1e3)
        spent += times[-1]
    return Timing(times, "wall")


def time_cuda(launch: Callable[[int], Any], rotation: Rotation, settings: BenchSettings) -> Timing:
    """Warm up, pick events or graph replays, then fill ``rep_ms`` of GPU time with samples."""
    began = time.perf_counter()
    gpu_ms, host_ms, next_set = _warm_up(launch, rotation.sets, settings.warmup_ms)
    warmed = time.perf_counter()
    timing = None
    if gpu_ms < GRAPH_BELOW_MS or gpu_ms < HOST_BOUND_RATIO * host_ms:
        timing = _time_graph(launch, rotation, settings, gpu_ms, next_set)
    if timing is None:
        runs = _clamp(math.ceil(settings.rep_ms / max(gpu_ms, 1e-4)), MIN_SAMPLES, MAX_SAMPLES)
        timing = Timing(_time_events(launch, rotation.sets, runs, next_set), "events", 1, rotation.cold_l2)
    timing.phase_seconds = {"warmup": warmed - began, **timing.phase_seconds,
                            "timed": time.perf_counter() - warmed - timing.phase_seconds.get("capture", 0.0)}
    return timing


def _warm_up(launch: Callable[[int], Any], sets: int, warmup_ms: float) -> tuple[float, float, int]:
    """(GPU ms per launch, host ms to issue one launch, next input set), from the last batch."""
    import torch

    batch, spent, issued = 1, 0.0, 0
    while True:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        began = time.perf_counter()
        start.record()
        for _ in range(batch):
            launch(issued % sets)
            issued += 1
        end.record()
        host = (time.perf_counter() - began) * 1e3
        end.synchronize()
        gpu = start.elapsed_time(end)
        spent += gpu
        if spent >= warmup_ms or batch >= MAX_WARMUP_BATCH:
            return gpu / batch, host / batch, issued % sets
        batch *= 2


def _time_events(launch: Callable[[int], Any], sets: int, runs: int, first_set: int) -> list[float]:
    return _event_times(runs, lambda i: launch((first_set + i) % sets))


def _event_times(runs: int, body: Callable[[int], Any]) -> list[float]:
    """GPU ms of ``body(i)`` for i in range(runs), a pair of CUDA events around each call."""
    import torch

    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(runs)]
    for i, (start, end) in enumerate(pairs):
        start.record()
        body(i)
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def _time_graph(launch: Callable[[int], Any], rotation: Rotation, settings: BenchSettings, gpu_ms: float,
                first_set: int) -> Timing | None:
    """Samples are replays of one captured graph of ``k`` launches (over all rotating sets, so
    the cold-L2 property holds inside the graph too), each divided by ``k``. None if the launch
    function cannot be captured (it synchronizes, for example); events are used instead."""
    import torch

    k = _clamp(max(math.ceil(GRAPH_SAMPLE_MS / max(gpu_ms, 1e-4)), rotation.sets), 1, MAX_GRAPH_LAUNCHES)
    began = time.perf_counter()
    for _ in range(2):  # a capture that recorded nothing is retried once (seen on a process's first)
        graph = torch.cuda.CUDAGraph()
        try:
            with warnings.catch_warnings(), torch.cuda.graph(graph):
                warnings.filterwarnings("ignore", message="The CUDA Graph is empty")  # handled below
                for i in range(k):
                    last = launch((first_set + i) % rotation.sets)
            if _replay_writes(graph, last):
                break
        except Exception:  # noqa: BLE001 - capture is an optimization; a failed one falls back
            torch.cuda.synchronize()
            return None
    else:
        return None
    captured = time.perf_counter()
    per_sample = max(_event_times(1, lambda _: graph.replay())[0], 1e-4)
    runs = _clamp(math.ceil(settings.rep_ms / per_sample), MIN_SAMPLES, MAX_SAMPLES)
    times = [t / k for t in _event_times(runs, lambda _: graph.replay())]
    return Timing(times, "graph", k, rotation.cold_l2 and k >= rotation.sets,
                  {"capture": captured - began})


def _replay_writes(graph: Any, output: Any) -> bool:
    """Whether replaying the graph writes the last captured launch's output: poison it, replay,
    and look. (Outputs that are not floating-point tensors cannot be poisoned; trusted.)"""
    import torch

    poisoned = isinstance(output, torch.Tensor) and output.is_floating_point() and output.numel() > 0
    if poisoned:
        output.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    return not poisoned or not bool(torch.isnan(output).all().item())


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def context_usable() -> bool:
    """False after a sticky CUDA error (illegal address, launch failure): the process must go."""
    import torch

    try:
        torch.cuda.synchronize()
        probe = torch.ones(1, device="cuda")
        return bool((probe + 1).item() == 2.0)
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return False
