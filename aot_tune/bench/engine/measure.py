"""Inside a device worker: check one config against the reference, then time it.

Correctness. Every config runs once on random inputs and is compared with the kernel's torch
reference under a dtype-aware relative tolerance; NaN, Inf or a wrong shape never pass.
Consecutive configs are checked on different input sets, so a config that writes nothing cannot
pass on the output its predecessor left in a reused buffer.

Timing (CUDA):

1. A probe launch right after the check launch, each between a pair of CUDA events, queued
   behind other work (or behind ``SPACER_MS`` of GPU spinning when too little is queued) so
   the events time the kernel and not the host issuing it. It gives the per-launch GPU time
   and the host time to issue one launch. The rest of ``warmup_ms`` (at least ``REWARM_MS``)
   runs right before the timed launches.
2. Kernels that are short (under ``GRAPH_BELOW_MS``) or shorter than their own launch on the
   host are timed as CUDA-graph replays of many launches, so host launch overhead cannot leak
   into the samples; the others get a pair of CUDA events around each launch. The run count is
   sized from the probe to fill ``rep_ms`` of GPU time; samples that fall short of
   ``TOP_UP_BELOW`` of it get more.
3. Cold L2 without a flush kernel: timed launches cycle through enough independent input sets
   that every launch reads inputs other launches have pushed out of L2 (``l2_flush_bytes`` of
   other inputs in between, twice the device's L2 by default), one cycle across all of a
   shape's configs, the probe included. The GPU spends the whole timed phase in the kernel
   under test, instead of zeroing a 256 MB buffer before every run.

The configs of one shape are measured as a pipeline in which the host never waits for an idle
GPU: every config's kernels are loaded first (a load synchronizes the device), then the GPU runs
check(i+1) and probe(i+1) queued between timed(i-1) and timed(i). The host reads config i+1's
check while timed(i) runs, and captures its CUDA graph then. Device values (the comparison, the
graph's write check) are read through pinned copies with their own events: ``.item()`` would
wait for all the work queued after them. Since several configs have work queued at once, the
worker is told which ones before every wait (``announce``): a fault that kills the context is
pinned on one config by the pool measuring those again one at a time.

Interpreter: wall clock on the CPU, a functional check with a rough time; its table is only
ever used under the interpreter.
"""
from __future__ import annotations

import math
import statistics
import time
import warnings
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from aot_tune.build.loading import resolve
from aot_tune.runtime.forcing import launch_with_config
from aot_tune.triton_compat import load_instead_of_launch
from aot_tune.bench.nvml import ClockReading, GpuClocks
from aot_tune.bench.runner import BenchRequest, BenchSettings, ConfigMeasurement

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
MAX_WARMUP_LAUNCHES = 4096
#: GPU time of launches right before the timed ones (other work ran since the check and probe).
REWARM_MS = 0.5
#: Samples that cover less than this share of ``rep_ms`` (the probe overestimated the kernel)
#: get more.
TOP_UP_BELOW = 0.8
#: Idle GPU work queued before a check when less than this is queued (``torch.cuda._sleep``),
#: so the check's and probe's event pairs time the kernel rather than the host issuing it.
SPACER_MS = 1.0
#: Throwaway CUDA graphs a worker captures and replays when it opens its GPU. On the H200, the
#: first three graphs a process replayed ran a 1.8 us kernel at 1.4 us per launch, all later
#: ones at 1.8 us; three throwaway graphs first made the first real ones read like the rest
#: (docs/bench-log.md, "Where our spread comes from").
WARMUP_GRAPHS = 3
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
        self._cursor = 0  # the next input set of the timing rotation
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

    def take_sets(self, count: int) -> int:
        """The first of the next ``count`` input sets of the rotation: one cycle over all sets
        across the shape's configs, so every launch reads the set left untouched the longest
        (cold in L2). ``rotation_for`` decides the sets first."""
        first = self._cursor
        self._cursor = (first + count) % self.rotation.sets
        return first

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


class DeviceValues:
    """A small tensor to read later. On a GPU it is copied to pinned host memory right behind
    the work that computes it, and read once that copy is done: waiting for the copy's event
    does not wait for work queued after it, as ``.item()`` or ``.tolist()`` would (their copy
    queues behind all of it). On the CPU it is read as it is."""

    def __init__(self, values: Any) -> None:
        import torch

        self._copied = None
        if not values.is_cuda:
            self._host = values
            return
        self._host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
        self._host.copy_(values, non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record()

    def read(self) -> Any:
        if self._copied is not None:
            self._copied.synchronize()
        return self._host.tolist()


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
        self._values = DeviceValues(torch.stack([torch.isfinite(out).all().double(),
                                                 torch.linalg.vector_norm(out - ref), torch.linalg.vector_norm(ref)]))

    def verdict(self, tolerance: float) -> tuple[bool, float, str]:
        """(passed, relative error, why not); waits for the comparison if it has not run yet."""
        if self._values is None:
            return False, math.inf, self._shape_error
        finite, diff, norm = self._values.read()
        if not finite:
            return False, math.inf, "output has NaN or Inf"
        error = diff / max(norm, 1e-30)
        if error > tolerance:
            return False, error, f"relative error {error:.3g} exceeds {tolerance:g}"
        return True, error, ""


def check_result(output: Any, expected: Any, tolerance: float) -> tuple[bool, float, str]:
    """Relative error in float64, read at once; NaN or a wrong shape never passes."""
    return Comparison(output, expected).verdict(tolerance)


#: (configs with work on the device now, phase): said before each step that may crash or hang.
Announce = Callable[[tuple[str, ...], str], None]


def measure_configs(requests: Sequence[BenchRequest], workload: Workload, backend: str, l2_bytes: int = 0,
                    clocks: GpuClocks | None = None, announce: Announce | None = None) -> Iterator[ConfigMeasurement]:
    """Check and time configs of one (kernel, shape, dtype), yielding each result when it is
    complete (on a GPU, as one pipelined pass; see the module doc). Never raises for a kernel
    fault: it becomes the config's result."""
    announce = announce or (lambda config_ids, phase: None)
    if backend != "cuda":
        for request in requests:
            announce((request.config_id,), "check")
            yield measure_wall(request, workload)
        return
    yield from _Pass(workload, l2_bytes, clocks, announce).measure(list(requests))


def measure_wall(request: BenchRequest, workload: Workload) -> ConfigMeasurement:
    """Interpreter: the check, then a rough wall-clock time of a few runs on the CPU."""
    index = workload.next_check_set()
    began = time.perf_counter()
    try:
        run = workload.runner(request)
        ok, error, message = Comparison(run(index), workload.expected(index)).verdict(workload.tolerance)
        if not ok:
            return ConfigMeasurement(request.config_id, "wrong_result", message, error_norm=error)
        checked = time.perf_counter()
        times = time_wall(lambda: run(index), request.settings)
    except Exception as exc:  # a config that raises is a result; the worker decides if it can go on
        return _runtime_error(request, exc)
    return ConfigMeasurement(request.config_id, "ok", times_ms=times, error_norm=error, method="wall",
                             phase_seconds={"check": checked - began, "timed": time.perf_counter() - checked})


def time_wall(run: Callable[[], Any], settings: BenchSettings) -> list[float]:
    """Wall ms of up to ``INTERPRETER_MAX_RUNS`` runs, fewer once ``rep_ms`` is spent."""
    times: list[float] = []
    spent = 0.0
    while len(times) < INTERPRETER_MAX_RUNS and (not times or spent < settings.rep_ms):
        began = time.perf_counter()
        run()
        times.append((time.perf_counter() - began) * 1e3)
        spent += times[-1]
    return times


class _Pass:
    """One pipelined pass over a shape's configs on a GPU. In steady state the GPU queue holds
    timed(i-1), then check(i+1) with its probe, then timed(i); the host waits only for work
    that is already running, so the GPU does not idle between configs."""

    def __init__(self, workload: Workload, l2_bytes: int, clocks: GpuClocks | None, announce: Announce) -> None:
        self.workload, self.l2_bytes, self.clocks, self.announce = workload, l2_bytes, clocks, announce
        self.in_flight: list[str] = []  # configs with work queued on the GPU and no result yet
        #: how much longer the probe's one launch took than a launch inside a graph, so far (ms):
        #: the event pair and launch overhead a graph replay does not pay
        self.probe_overheads: list[float] = []

    def measure(self, requests: list[BenchRequest]) -> Iterator[ConfigMeasurement]:
        if not requests:
            return
        self.in_flight = [r.config_id for r in requests]
        self._say("load")
        _load_kernels(requests, self.workload)
        try:
            self.workload.rotation_for(requests[0].settings, self.l2_bytes)  # the input sets, once per shape
            for index in range(CHECK_SETS):
                self.workload.expected(index)  # reference outputs now: they synchronize (all-zero test)
        except Exception as exc:  # noqa: BLE001 - the shape's set-up failed: no config can be checked
            for request in requests:
                yield _runtime_error(request, exc)
            return
        self.in_flight = []
        running: ConfigTiming | None = None  # timed launches queued, samples not read
        ready: ConfigTiming | None = None  # checked and captured, nothing of its timing queued
        for request in requests:
            busy = running is not None and running.queued_for(SPACER_MS)
            check = _Check(request, self.workload, gpu_busy=busy)
            self.in_flight.append(request.config_id)
            if ready is not None:
                ready.start()
            if running is not None:
                yield self._finish(running)
            running, ready = ready, None
            self._say("check")
            prepared = check.read(self.clocks)
            if isinstance(prepared, ConfigMeasurement):
                self.in_flight.remove(request.config_id)
                yield prepared
                continue
            prepared.capture(statistics.median(self.probe_overheads) if self.probe_overheads else 0.0)
            ready = prepared
        if ready is not None:
            ready.start()
        for timing in (running, ready):
            if timing is not None:
                yield self._finish(timing)

    def _finish(self, timing: "ConfigTiming") -> ConfigMeasurement:
        self._say("time")
        result = timing.finish()
        self.in_flight.remove(timing.request.config_id)
        if timing.probe_overhead_ms is not None:
            self.probe_overheads.append(timing.probe_overhead_ms)
        return result

    def _say(self, phase: str) -> None:
        self.announce(tuple(self.in_flight), phase)


def _load_kernels(requests: Sequence[BenchRequest], workload: Workload) -> None:
    """Load every config's kernels before anything is queued: a load synchronizes the device, so
    one inside the pass would drain the queue. A config whose load fails is left to its check."""
    with load_instead_of_launch():
        for request in requests:
            if request.plain:
                continue
            try:
                launch_with_config(workload.launch, workload.inputs(0), dict(request.config),
                                   kernel=workload.kernel, hooks=False)
            except Exception:  # noqa: BLE001 - the check's launch raises it again, as the config's result
                pass


class _Check:
    """A config's check launch, its comparison with the reference and one probe launch, each
    launch between CUDA events, all queued without waiting; ``read`` waits for them."""

    def __init__(self, request: BenchRequest, workload: Workload, gpu_busy: bool) -> None:
        import torch

        self.request, self.workload = request, workload
        self.failure: ConfigMeasurement | None = None
        began = time.perf_counter()
        try:
            if not gpu_busy:
                _keep_busy(SPACER_MS)
            index = workload.next_check_set()
            self.run = run = workload.runner(request)
            self.events = events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            events[0].record()
            output = run(index)
            events[1].record()
            self.comparison = Comparison(output, workload.expected(index))
            del output
            self.probe_set = workload.take_sets(1)
            if self.probe_set == index and workload.rotation.sets > 1:  # the check just read it: warm in L2
                self.probe_set = workload.take_sets(1)
            events[2].record()
            issued = time.perf_counter()
            run(self.probe_set)
            self.host_ms = (time.perf_counter() - issued) * 1e3
            events[3].record()
        except Exception as exc:  # noqa: BLE001 - a config that raises is a result
            self.failure = _runtime_error(request, exc)
        self.enqueue_seconds = time.perf_counter() - began

    def read(self, clocks: GpuClocks | None) -> "ConfigTiming | ConfigMeasurement":
        """The config's timing plan, or its failure (wrong result, a fault)."""
        if self.failure is not None:
            return self.failure
        began = time.perf_counter()
        try:
            self.events[3].synchronize()
            ok, error, message = self.comparison.verdict(self.workload.tolerance)
            if not ok:
                return ConfigMeasurement(self.request.config_id, "wrong_result", message, error_norm=error)
            check_ms = self.events[0].elapsed_time(self.events[1])
            gpu_ms = self.events[2].elapsed_time(self.events[3])
        except Exception as exc:  # noqa: BLE001
            return _runtime_error(self.request, exc)
        phases = {"check": self.enqueue_seconds + time.perf_counter() - began}
        return ConfigTiming(self.request, clocks, error, phases, launch=self.run, workload=self.workload,
                            gpu_ms=gpu_ms, host_ms=self.host_ms, warmed_ms=check_ms + gpu_ms)


def _runtime_error(request: BenchRequest, exc: BaseException) -> ConfigMeasurement:
    return ConfigMeasurement(request.config_id, "runtime_error", f"{type(exc).__name__}: {exc}"[:500])


class ConfigTiming:
    """The timing of one checked config, in three steps the pass interleaves with other configs'
    work: ``capture`` (host only: the CUDA graph of a short kernel), ``start`` (queue the rest
    of the warm-up and the timed launches) and ``finish`` (wait for them, read the samples).

    Kernels that are short (under ``GRAPH_BELOW_MS``) or shorter than their own launch on the
    host are timed as replays of a graph of ``k`` launches over all rotating input sets (so
    host launch overhead cannot leak into the samples and the cold-L2 property holds inside the
    graph); the others get a pair of CUDA events around each launch. Sample counts fill
    ``rep_ms`` of GPU time.
    """

    def __init__(self, request: BenchRequest, clocks: GpuClocks | None, error: float, phases: dict[str, float], *,
                 launch: Callable[[int], Any], workload: Workload, gpu_ms: float, host_ms: float,
                 warmed_ms: float) -> None:
        self.request = request
        self.settings = request.settings
        self._clocks, self._error = clocks, error
        self._clocks_start = ClockReading()
        self.phases = phases
        self._launch = launch
        self._rotation, self._take_sets = workload.rotation, workload.take_sets  # the shape's, shared by its configs
        self._gpu_ms, self._warmed_ms = gpu_ms, warmed_ms
        self._graph: Any = None
        self._graph_output: Any = None
        self._unwritten: Any = None
        self._k = 1
        self._replay_estimate_ms = 0.0
        #: probe time less the time of one launch in the graph, once a graph-timed config has finished
        self.probe_overhead_ms: float | None = None
        self._events: list | None = None
        self._failure: ConfigMeasurement | None = None
        self.method = "graph" if _graph_timed(gpu_ms, host_ms) else "events"

    # -- capture: host only --------------------------------------------------------------------
    def capture(self, probe_overhead_ms: float = 0.0) -> None:
        """Capture the graph of a short kernel on a side stream without synchronizing the device,
        so the GPU goes on with work queued before. A launch in the graph is estimated as the
        probe's launch less ``probe_overhead_ms`` (what earlier graphs of the pass measured: the
        event pair and launch overhead around one launch, microseconds that dominate a short
        kernel's probe). A launch function that cannot be captured (it synchronizes, say) is
        timed with events."""
        if self.method != "graph":
            return
        began = time.perf_counter()
        sets = self._rotation.sets
        launch_ms = max(self._gpu_ms - probe_overhead_ms, self._gpu_ms / 4, 1e-4)
        self._k = _clamp(max(math.ceil(GRAPH_SAMPLE_MS / launch_ms), sets), 1, MAX_GRAPH_LAUNCHES)
        self._replay_estimate_ms = self._k * launch_ms
        try:
            self._graph, self._graph_output = _capture(self._launch, self._k, self._take_sets(0), sets)
        except Exception:  # noqa: BLE001 - capture is an optimization; a failed one falls back
            self.method, self._graph = "events", None
        self.phases["capture"] = time.perf_counter() - began

    # -- start: queue, asynchronously ----------------------------------------------------------
    def start(self) -> None:
        """Queue the rest of the warm-up (at least ``REWARM_MS``: another config ran since the
        probe) and the timed launches, without waiting."""
        try:
            began = time.perf_counter()
            rewarm_ms = max(REWARM_MS, self.settings.warmup_ms - self._warmed_ms)
            if self.method == "graph":
                graph, per_sample = self._graph, max(self._replay_estimate_ms, 1e-4)
                self._take_sets(self._k)  # every replay reads the sets the graph captured
                self._unwritten = _poison_and_replay(graph, self._graph_output)
                for _ in range(_clamp(math.ceil(rewarm_ms / per_sample) - 1, 0, MAX_SAMPLES)):
                    graph.replay()
                self.phases["warmup"] = time.perf_counter() - began
                began = time.perf_counter()
                runs = _clamp(math.ceil(self.settings.rep_ms / per_sample), MIN_SAMPLES, MAX_SAMPLES)
                self._events = _record_events(runs, lambda _: graph.replay())
            else:
                gpu_ms = max(self._gpu_ms, 1e-4)
                rewarm = _clamp(math.ceil(rewarm_ms / gpu_ms), 1, MAX_WARMUP_LAUNCHES)
                runs = _clamp(math.ceil(self.settings.rep_ms / gpu_ms), MIN_SAMPLES, MAX_SAMPLES)
                launch = self._rotating_launch(rewarm + runs)
                for i in range(rewarm):
                    launch(i)
                self.phases["warmup"] = time.perf_counter() - began
                began = time.perf_counter()
                self._events = _record_events(runs, lambda i: launch(rewarm + i))
            self.phases["timed"] = time.perf_counter() - began
            self._clocks_start = self._read_clocks()  # the GPU is running this config or the one before
        except Exception as exc:  # noqa: BLE001 - a fault while timing is this config's result
            self._failure = _runtime_error(self.request, exc)

    def _rotating_launch(self, count: int) -> Callable[[int], Any]:
        """Launch ``i`` of the next ``count`` reads the i-th of the next input sets of the rotation."""
        first, sets, launch = self._take_sets(count), self._rotation.sets, self._launch
        return lambda i: launch((first + i) % sets)

    def queued_for(self, ms: float) -> bool:
        """Whether at least about ``ms`` of this config's timed launches have yet to start (an
        event query, no wait): work queued now runs behind them, not on an idle GPU."""
        if not self._events:
            return False
        per_sample = self._replay_estimate_ms if self.method == "graph" else self._gpu_ms
        back = _clamp(math.ceil(ms / max(per_sample, 1e-4)), 1, len(self._events))
        return not self._events[-back][0].query()

    def _read_clocks(self) -> ClockReading:
        """SM and memory clocks now (NVML), read while timed launches run."""
        if self._clocks is None:
            return ClockReading()
        began = time.perf_counter()
        reading = self._clocks.read()
        self.phases["clocks"] = self.phases.get("clocks", 0.0) + time.perf_counter() - began
        return reading

    # -- finish: wait and read -----------------------------------------------------------------
    def finish(self) -> ConfigMeasurement:
        if self._failure is not None:
            return self._failure
        clocks_end = self._read_clocks()  # before the wait: the timed launches still run
        began = time.perf_counter()
        try:
            times = _read_events(self._events)
            if self.method == "graph" and self._unwritten is not None and self._unwritten.read():
                times = self._time_with_events()  # the replays did not write the output
            times += self._top_up(times)
            if self.method == "graph":
                times = [t / self._k for t in times]
                self.probe_overhead_ms = self._gpu_ms - statistics.median(times)
        except Exception as exc:  # noqa: BLE001
            return _runtime_error(self.request, exc)
        if self._failure is not None:
            return self._failure
        self.phases["timed"] = self.phases.get("timed", 0.0) + time.perf_counter() - began
        cold = self._rotation.cold_l2 and (self.method != "graph" or self._k >= self._rotation.sets)
        self._graph = self._graph_output = self._events = None
        return ConfigMeasurement(self.request.config_id, "ok", times_ms=times, error_norm=self._error,
                                 method=self.method, launches_per_sample=self._k if self.method == "graph" else 1,
                                 cold_l2=cold, clocks_start=self._clocks_start, clocks_end=clocks_end,
                                 phase_seconds=dict(self.phases))

    def _top_up(self, times: list[float]) -> list[float]:
        """More samples when the probe's estimate was high and the samples cover less than
        ``TOP_UP_BELOW`` of ``rep_ms`` (GPU ms of each, one untimed launch first: other work ran
        since). Rare: queued behind the next config's work, they make the host wait for it."""
        if self._failure is not None or not times:
            return []
        per_sample = statistics.median(times)
        missing = self.settings.rep_ms - sum(times)
        if missing <= (1 - TOP_UP_BELOW) * self.settings.rep_ms or len(times) >= MAX_SAMPLES:
            return []
        extra = _clamp(math.ceil(missing / max(per_sample, 1e-4)), 1, MAX_SAMPLES - len(times))
        if self.method == "graph":
            graph = self._graph
            graph.replay()
            return _read_events(_record_events(extra, lambda _: graph.replay()))
        launch = self._rotating_launch(extra + 1)
        launch(0)
        return _read_events(_record_events(extra, lambda i: launch(i + 1)))

    def _time_with_events(self) -> list[float]:
        """Time again with an event pair per launch: a graph whose replays leave the output
        unwritten recorded nothing of the launch (it ran outside the capture)."""
        self.method, self._graph, self._k = "events", None, 1
        self.start()
        return _read_events(self._events) if self._failure is None else []


def _graph_timed(gpu_ms: float, host_ms: float) -> bool:
    return gpu_ms < GRAPH_BELOW_MS or gpu_ms < HOST_BOUND_RATIO * host_ms


def _keep_busy(ms: float) -> None:
    """Queue about ``ms`` of GPU spinning (at 2 GHz; longer at lower clocks)."""
    import torch

    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(int(ms * 2e6))


def _record_events(runs: int, body: Callable[[int], Any]) -> list:
    """Queue ``body(i)`` for i in range(runs) with a pair of CUDA events around each call."""
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
    first, so work already queued keeps the GPU busy meanwhile (measured: capturing waits for
    none of it)."""
    import torch

    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # inputs were written on the current stream
    last = None
    with warnings.catch_warnings(), torch.cuda.stream(stream):
        warnings.filterwarnings("ignore", message="The CUDA Graph is empty")  # caught by the write check
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            for i in range(k):
                last = launch((first_set + i) % sets)
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    return graph, last


def warm_up_graphs(device: str) -> None:
    """Capture and replay ``WARMUP_GRAPHS`` throwaway graphs (64 small additions, 50 replays
    each), so that no config's graph is among a process's first: those replay faster than
    later ones, and the pass's first graph-timed configs would look faster than they are."""
    import torch

    x, y = torch.ones(65536, device=device), torch.ones(65536, device=device)
    for _ in range(WARMUP_GRAPHS):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(64):
                x + y
        for _ in range(50):
            graph.replay()
    torch.cuda.synchronize()


def _poison_and_replay(graph: Any, output: Any) -> Any:
    """Queue: NaN into the last captured launch's output, one replay, then whether the output is
    still all NaN (read after the timed replays; None when the output cannot be poisoned: not a
    floating-point tensor). The replay also pays the graph's upload."""
    import torch

    poisoned = isinstance(output, torch.Tensor) and output.is_floating_point() and output.numel() > 0
    if poisoned:
        output.fill_(float("nan"))
    graph.replay()
    return DeviceValues(torch.isnan(output).all()) if poisoned else None


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
