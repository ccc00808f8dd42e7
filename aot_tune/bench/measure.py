"""Inside a device worker: check one config against the reference, then time it.

Correctness. Every config runs once on random inputs and is compared with the kernel's torch
reference under a dtype-aware relative tolerance; NaN, Inf or a wrong shape never pass.
Consecutive configs are checked on different input sets, so a config that writes nothing cannot
pass on the output its predecessor left in a reused buffer.

Timing (CUDA), in three steps:

1. Probe with back-to-back launches (one, then sixteen if it may be host-bound, then a batch
   sized to end the probe) until ``PROBE_MS`` of GPU time (or all of ``warmup_ms``, if less)
   has run; the last batch gives the per-launch GPU time and the host time to issue one launch.
   The rest of ``warmup_ms`` is enqueued right before the timed
   launches, with no synchronization in between, so no batch overshoots the warm-up and the
   GPU does not idle while the host waits for each batch. Short kernels finish their warm-up as
   graph replays (step 2), at full GPU speed.
2. Kernels that are short (under ``GRAPH_BELOW_MS``) or shorter than their own launch on the
   host are timed as CUDA-graph replays of many launches, so host launch overhead cannot leak
   into the samples; the others get a pair of CUDA events around each launch. The run count is
   sized from the warm estimate to fill ``rep_ms`` of GPU time.
3. Cold L2 without a flush kernel: timed launches cycle through enough independent input sets
   that every launch reads inputs other launches have pushed out of L2 (``l2_flush_bytes`` of
   other inputs in between, twice the device's L2 by default). The GPU spends the whole timed
   phase in the kernel under test, instead of zeroing a 256 MB buffer before every run.

The configs of one shape are measured as a pipeline that keeps the GPU busy: the host captures
the next config's CUDA graph (one Python launch per captured launch, the costly part of timing a
short kernel) while the GPU runs the previous config's timed launches.

Interpreter: wall clock on the CPU, a functional check with a rough time; its table is only
ever used under the interpreter.
"""
from __future__ import annotations

import math
import time
import warnings
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

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
#: Launches after which a short or host-bound kernel stops its launch-by-launch warm-up.
PROBE_LAUNCHES = 16
#: GPU time of the synchronized warm-up probe that estimates a launch's time; the rest of the
#: warm-up runs unsynchronized right before the timed launches.
PROBE_MS = 0.5
#: GPU time of launches right before the timed ones (other work may have run since the warm-up).
REWARM_MS = 0.5
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


class Comparison:
    """An output against its reference, computed on the device in float64 and read later, so
    the check needs no synchronization of its own. NaN, Inf or a wrong shape never pass."""

    def __init__(self, output: Any, expected: Any) -> None:
        import torch

        self._values = None
        self._shape_error = ""
        if tuple(output.shape) != tuple(expected.shape):
            self._shape_error = f"output shape {tuple(output.shape)} != reference {tuple(expected.shape)}"
            return
        out, ref = output.double(), expected.double()
        self._values = torch.stack([torch.isfinite(out).all().double(), torch.linalg.vector_norm(out - ref),
                                    torch.linalg.vector_norm(ref)])

    def verdict(self, tolerance: float) -> tuple[bool, float, str]:
        """(passed, relative error, why not); waits for the comparison if it has not run yet."""
        if self._values is None:
            return False, math.inf, self._shape_error
        finite, diff, norm = self._values.tolist()
        if not finite:
            return False, math.inf, "output has NaN or Inf"
        error = diff / max(norm, 1e-30)
        if error > tolerance:
            return False, error, f"relative error {error:.3g} exceeds {tolerance:g}"
        return True, error, ""


def check_result(output: Any, expected: Any, tolerance: float) -> tuple[bool, float, str]:
    """Relative error in float64, read at once; NaN or a wrong shape never passes."""
    return Comparison(output, expected).verdict(tolerance)


@dataclass
class Timing:
    times_ms: list[float]
    method: str
    launches_per_sample: int = 1
    cold_l2: bool = False


Announce = Callable[[str, str], None]  # (config id, phase) before each phase that may crash or hang


def measure_configs(requests: Sequence[BenchRequest], workload: Workload, backend: str, l2_bytes: int = 0,
                    clocks: GpuClocks | None = None, announce: Announce | None = None) -> Iterator[ConfigMeasurement]:
    """Check and time configs of one (kernel, shape, dtype), one after another, keeping the GPU
    busy: while the GPU runs one config's timed launches, the host captures the next config's
    CUDA graph (the costly part of timing a short kernel: one Python launch per captured
    launch). So the GPU work is check(i), warm-up(i), timed(i-1), check(i+1), ..., and each
    result is yielded when it is complete (a passing config's one step after its check).
    Loading a kernel's binary synchronizes the device, so it is left to the check's launch,
    when the GPU has nothing queued anyway. Never raises for a kernel fault: it becomes the
    config's result."""
    announce = announce or (lambda config_id, phase: None)
    pending: ConfigTiming | None = None
    for request in requests:
        announce(request.config_id, "check")
        prepared = prepare_config(request, workload, backend, l2_bytes, clocks)
        if isinstance(prepared, ConfigMeasurement):
            yield prepared
            continue
        if pending is not None:
            announce(pending.request.config_id, "time")
            pending.start()
        announce(request.config_id, "capture")
        prepared.capture()  # host work, overlapping the GPU work just started
        if pending is not None:
            announce(pending.request.config_id, "time")
            yield pending.finish()
        pending = prepared
    if pending is not None:
        announce(pending.request.config_id, "time")
        pending.start()
        yield pending.finish()


def prepare_config(request: BenchRequest, workload: Workload, backend: str, l2_bytes: int,
                   clocks: GpuClocks | None) -> "ConfigTiming | ConfigMeasurement":
    """Check the config against the reference and warm it up (which decides how it is timed);
    a failure is returned as its measurement. The comparison is enqueued behind the check's
    launch and read after the warm-up probe's first batch: one device synchronization for both."""
    index = workload.next_check_set()
    began = time.perf_counter()
    try:
        run = workload.runner(request)
        output = run(index)  # the first synchronization also surfaces a fault of this launch
        comparison = Comparison(output, workload.expected(index))
        del output
        if backend != "cuda":
            ok, error, message = comparison.verdict(workload.tolerance)
            if not ok:
                return ConfigMeasurement(request.config_id, "wrong_result", message, error_norm=error)
            return ConfigTiming(request, None, error, {"check": time.perf_counter() - began}, wall=lambda: run(index))
        rotation = workload.rotation_for(request.settings, l2_bytes)
        checked = time.perf_counter()
        gpu_ms, host_ms, next_set, warmed_ms = _warm_up(run, rotation.sets, request.settings.warmup_ms)
        ok, error, message = comparison.verdict(workload.tolerance)  # complete since the probe's first sync
        if not ok:
            return ConfigMeasurement(request.config_id, "wrong_result", message, error_norm=error)
        phases = {"check": checked - began, "warmup": time.perf_counter() - checked}
        return ConfigTiming(request, clocks, error, phases, launch=run, rotation=rotation,
                            gpu_ms=gpu_ms, host_ms=host_ms, next_set=next_set, warmed_ms=warmed_ms)
    except Exception as exc:  # a config that raises is a result; the worker decides if it can go on
        return _runtime_error(request, exc)


def _runtime_error(request: BenchRequest, exc: BaseException) -> ConfigMeasurement:
    return ConfigMeasurement(request.config_id, "runtime_error", f"{type(exc).__name__}: {exc}"[:500])


class ConfigTiming:
    """The timing of one checked, warmed-up config, in three steps the caller can interleave with
    another config's: ``capture`` (host only: the CUDA graph of a short kernel), ``start``
    (enqueue the timed launches, asynchronously) and ``finish`` (synchronize, read the samples).

    Kernels that are short (under ``GRAPH_BELOW_MS``) or shorter than their own launch on the
    host are timed as replays of a graph of ``k`` launches over all rotating input sets (so
    host launch overhead cannot leak into the samples and the cold-L2 property holds inside the
    graph); the others get a pair of CUDA events around each launch. Sample counts fill
    ``rep_ms`` of GPU time.
    """

    def __init__(self, request: BenchRequest, clocks: GpuClocks | None, error: float,
                 phases: dict[str, float], *, wall: Callable[[], Any] | None = None,
                 launch: Callable[[int], Any] | None = None, rotation: Rotation | None = None,
                 gpu_ms: float = 0.0, host_ms: float = 0.0, next_set: int = 0, warmed_ms: float = 0.0) -> None:
        self.request = request
        self.settings = request.settings
        self._clocks, self._error = clocks, error
        self._clocks_start = ClockReading()
        self.phases = phases
        self._wall, self._launch, self._rotation = wall, launch, rotation
        self._gpu_ms, self._host_ms, self._next_set, self._warmed_ms = gpu_ms, host_ms, next_set, warmed_ms
        self._graph: Any = None
        self._graph_output: Any = None
        self._k = 1
        self._events: list | None = None
        self._failure: ConfigMeasurement | None = None
        self.method = "wall" if wall is not None else ("graph" if _graph_timed(gpu_ms, host_ms) else "events")

    # -- capture: host only --------------------------------------------------------------------
    def capture(self) -> None:
        """Capture the graph of a short kernel on a side stream without synchronizing the device,
        so the GPU goes on with work enqueued before. A launch function that cannot be captured
        (it synchronizes, say) is timed with events instead."""
        if self.method != "graph":
            return
        began = time.perf_counter()
        rotation = self._rotation
        self._k = _clamp(max(math.ceil(GRAPH_SAMPLE_MS / max(self._gpu_ms, 1e-4)), rotation.sets), 1,
                         MAX_GRAPH_LAUNCHES)
        try:
            self._graph, self._graph_output = _capture(self._launch, self._k, self._next_set, rotation.sets)
        except Exception:  # noqa: BLE001 - capture is an optimization; a failed one falls back
            self.method, self._graph = "events", None
        self.phases["capture"] = time.perf_counter() - began

    # -- start: enqueue, asynchronously --------------------------------------------------------
    def start(self) -> None:
        if self.method == "wall":
            return
        try:
            rewarming = time.perf_counter()
            replay_ms = self._graph_writes() if self.method == "graph" else None
            if self.method == "graph" and replay_ms is None:
                self.method, self._graph = "events", None
            # The rest of the warm-up (graph replays run at full GPU speed), then at least
            # REWARM_MS, as the other config's work ran since this one's warm-up.
            rewarm_ms = max(REWARM_MS, self.settings.warmup_ms - self._warmed_ms)
            if self.method == "graph":
                graph = self._graph
                per_sample = max(replay_ms, 1e-4)
                for _ in range(_clamp(math.ceil(rewarm_ms / per_sample) - 1, 0, MAX_SAMPLES)):
                    graph.replay()
                self.phases["rewarm"] = time.perf_counter() - rewarming
                began = time.perf_counter()
                runs = _clamp(math.ceil(self.settings.rep_ms / per_sample), MIN_SAMPLES, MAX_SAMPLES)
                self._events = _record_events(runs, lambda _: graph.replay())
            else:
                launch, sets = self._launch, self._rotation.sets
                rewarm = _clamp(math.ceil(rewarm_ms / max(self._gpu_ms, 1e-4)), 1, MAX_WARMUP_BATCH)
                for i in range(rewarm):
                    launch((self._next_set + i) % sets)
                first = (self._next_set + rewarm) % sets  # the rotation goes on: the timed launches stay cold
                self.phases["rewarm"] = time.perf_counter() - rewarming
                began = time.perf_counter()
                runs = _clamp(math.ceil(self.settings.rep_ms / max(self._gpu_ms, 1e-4)), MIN_SAMPLES, MAX_SAMPLES)
                self._events = _record_events(runs, lambda i: launch((first + i) % sets))
            self.phases["enqueue"] = time.perf_counter() - began
            self._clocks_start = self._read_clocks()  # the GPU is running the launches just enqueued
        except Exception as exc:  # noqa: BLE001 - a fault while timing is this config's result
            self._failure = _runtime_error(self.request, exc)

    def _graph_writes(self) -> float | None:
        """GPU ms of one replay of the graph if it writes the last captured launch's output (poison
        it, replay, look), else None; a capture that recorded nothing is retried once, synchronously."""
        replay_ms = _replay_writes(self._graph, self._graph_output)
        if replay_ms is not None:
            return replay_ms
        self._graph, self._graph_output = _capture(self._launch, self._k, self._next_set, self._rotation.sets)
        return _replay_writes(self._graph, self._graph_output)

    def _read_clocks(self) -> ClockReading:
        """SM and memory clocks now (NVML), read while this config's timed launches run."""
        if self._clocks is None:
            return ClockReading()
        began = time.perf_counter()
        reading = self._clocks.read()
        self.phases["clocks"] = self.phases.get("clocks", 0.0) + time.perf_counter() - began
        return reading

    # -- finish: synchronize and read ----------------------------------------------------------
    def finish(self) -> ConfigMeasurement:
        if self._failure is not None:
            return self._failure
        clocks_end = self._read_clocks()  # before the synchronization: the timed launches still run
        began = time.perf_counter()
        try:
            if self.method == "wall":
                timing = time_wall(self._wall, self.settings)
            else:
                times = _read_events(self._events)
                if self.method == "graph":
                    times = [t / self._k for t in times]
                cold = self._rotation.cold_l2 and (self.method != "graph" or self._k >= self._rotation.sets)
                timing = Timing(times, self.method, self._k if self.method == "graph" else 1, cold)
        except Exception as exc:  # noqa: BLE001
            return _runtime_error(self.request, exc)
        self.phases["timed"] = self.phases.pop("enqueue", 0.0) + time.perf_counter() - began
        self._graph = self._graph_output = self._events = None
        return ConfigMeasurement(self.request.config_id, "ok", times_ms=timing.times_ms, error_norm=self._error,
                                 method=timing.method, launches_per_sample=timing.launches_per_sample,
                                 cold_l2=timing.cold_l2, clocks_start=self._clocks_start, clocks_end=clocks_end,
                                 phase_seconds=dict(self.phases))


def time_wall(run: Callable[[], Any], settings: BenchSettings) -> Timing:
    times: list[float] = []
    spent = 0.0
    while len(times) < INTERPRETER_MAX_RUNS and (not times or spent < settings.rep_ms):
        began = time.perf_counter()
        run()
        times.append((time.perf_counter() - began) * 1e3)
        spent += times[-1]
    return Timing(times, "wall")


def _warm_up(launch: Callable[[int], Any], sets: int, warmup_ms: float) -> tuple[float, float, int, float]:
    """(GPU ms per launch, host ms to issue one launch, next input set, GPU ms warmed up), from a
    probe of back-to-back launches that runs until ``PROBE_MS`` (at most ``warmup_ms``) of GPU
    time: enough for a warm estimate; ``ConfigTiming.start`` enqueues the rest of the warm-up.
    One launch first; if it looks short or host-bound, ``PROBE_LAUNCHES`` launches decide that
    (it will be timed as graph replays, which finish its warm-up at full GPU speed); the last
    batch is sized from the estimate to end the probe. Each batch costs a device sync,
    so a probe takes two or three instead of one per doubling."""
    import torch

    target = min(warmup_ms, PROBE_MS)
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
        gpu_ms, host_ms = gpu / batch, host / batch
        if spent >= target or batch >= MAX_WARMUP_BATCH or (batch >= PROBE_LAUNCHES and _graph_timed(gpu_ms, host_ms)):
            return gpu_ms, host_ms, issued % sets, spent
        if batch < PROBE_LAUNCHES and _graph_timed(gpu_ms, host_ms):
            batch = PROBE_LAUNCHES  # (a first launch's host time is an upper bound: others are not host-bound)
        else:
            batch = _clamp(math.ceil((target - spent) / max(gpu_ms, 1e-4)), 1, MAX_WARMUP_BATCH)


def _graph_timed(gpu_ms: float, host_ms: float) -> bool:
    return gpu_ms < GRAPH_BELOW_MS or gpu_ms < HOST_BOUND_RATIO * host_ms


def _record_events(runs: int, body: Callable[[int], Any]) -> list:
    """Enqueue ``body(i)`` for i in range(runs) with a pair of CUDA events around each call."""
    import torch

    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(runs)]
    for i, (start, end) in enumerate(pairs):
        start.record()
        body(i)
        end.record()
    return pairs


def _read_events(pairs: list) -> list[float]:
    """GPU ms of each pair, read as soon as it completes: the host reads the early pairs while the
    GPU still runs the later launches (reading a thousand pairs after the last one, as a
    synchronize-then-read would, leaves the GPU idle for milliseconds)."""
    times = []
    for start, end in pairs:
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def _capture(launch: Callable[[int], Any], k: int, first_set: int, sets: int) -> tuple[Any, Any]:
    """A graph of ``k`` launches cycling through the input sets, captured on a side stream.
    Unlike ``torch.cuda.graph``, this neither synchronizes the device nor collects garbage
    first, so work already enqueued keeps the GPU busy meanwhile."""
    import torch

    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # inputs were written on the current stream
    last = None
    with warnings.catch_warnings(), torch.cuda.stream(stream):
        warnings.filterwarnings("ignore", message="The CUDA Graph is empty")  # caught by the replay check
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            for i in range(k):
                last = launch((first_set + i) % sets)
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    return graph, last


def _replay_writes(graph: Any, output: Any) -> float | None:
    """GPU ms of one replay if replaying writes the last captured launch's output (poison the
    output, replay twice, look), else None. The second replay is the one timed: the first may pay
    the graph's upload. Outputs that are not floating-point tensors cannot be poisoned: trusted."""
    import torch

    poisoned = isinstance(output, torch.Tensor) and output.is_floating_point() and output.numel() > 0
    if poisoned:
        output.fill_(float("nan"))
    graph.replay()
    pairs = _record_events(1, lambda _: graph.replay())
    unwritten = torch.isnan(output).all() if poisoned else None
    replay_ms = _read_events(pairs)[0]
    if unwritten is not None and bool(unwritten.item()):  # enqueued before the read: no second wait
        return None
    return replay_ms


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
