"""How one checked config is timed on a GPU (CUDA events or CUDA-graph replays).

1. A probe launch right after the check launch, each between a pair of CUDA events, queued
   behind other work (``SPACER_MS`` of GPU spinning when too little is queued, and always
   ``PROBE_SPACER_MS`` right before the probe; see aot_tune.bench.engine.pipeline) so the
   events time the kernel and not the host issuing it.
   It gives the per-launch GPU time and the host time of one events-timed sample. Right before
   the timed launches the GPU runs the rest of ``warmup_ms``: other configs' work queued back to
   back ahead of them counts (it keeps the clocks up as the config's own launches would), and
   one launch (one graph replay) of the config's own always runs first.
2. Kernels that are short (under ``GRAPH_BELOW_MS``) or under ``HOST_BOUND_RATIO`` times what an
   events-timed sample costs the host are timed as CUDA-graph replays of many launches, so host
   launch overhead cannot leak into the samples; the others get a pair of CUDA events around
   each launch. The run count is sized from the probe to fill ``rep_ms`` of GPU time; samples
   that fall short of ``TOP_UP_BELOW`` of it get more. An events-timed config whose samples
   say it is short enough for graph replays (something, a host stall say, inflated both its
   check and its probe) is timed again as graph replays.
3. Cold L2 without a flush kernel: timed launches cycle through the shape's rotating input sets
   (aot_tune.bench.engine.workload).
"""
from __future__ import annotations

import math
import statistics
import time
import warnings
from typing import Any, Callable

from aot_tune.bench.engine.check import DeviceValues
from aot_tune.bench.engine.workload import Workload
from aot_tune.bench.nvml import ClockReading, GpuClocks
from aot_tune.bench.runner import BenchRequest, ConfigMeasurement

#: Kernels faster than this are timed with CUDA graphs. Events around each launch cost the GPU a
#: few microseconds of their own and let a host of 20-45 us a launch fall behind: on the H200
#: host a 0.035 ms GEMM read 0.042 with events and 0.035 as graph replays.
GRAPH_BELOW_MS = 0.1
#: ... and so are kernels whose GPU time is under this multiple of what one events-timed sample
#: costs the host (its launch and two event records, as the probe measured it). Below it the host
#: falls behind the GPU within the timed launches, and from then on every sample also holds the
#: wait for its launch: on the H100 host, GEMMs of 22-30 us read 0.045 ms in their later samples
#: (a median up to 1.9x their true time) at a ratio of 1.5 over the launch alone.
HOST_BOUND_RATIO = 2.0
#: GPU time one graph replay (one sample) spans at least.
GRAPH_SAMPLE_MS = 0.25
MAX_GRAPH_LAUNCHES = 1024
MIN_SAMPLES = 10
#: ... and of a screening timing (a search's share of ``rep_ms``, aot_tune.search), which needs a
#: rough time to rank by: ``MIN_SAMPLES`` scaled with the share, but never fewer than this. At 10,
#: the whole GEMM benchmark's 2.2 ms screenings of µs GEMMs were 10 replays of 75-launch graphs,
#: 6.5 ms of timed launches each.
MIN_SCREENING_SAMPLES = 3
#: The share of the rotation's input sets a screening timing's graph cycles through: between two
#: reads of one set, half the rotation's margin (one L2's bytes) of other inputs still passes
#: through L2. Capturing is one Python launch per launch in the graph: on the whole GEMM benchmark
#: (H200) a screened µs GEMM's 74-launch capture took 4.8 ms of host time against 2.6 ms timed, so
#: the device waited for the host.
SCREENING_SETS_SHARE = 0.5
MAX_SAMPLES = 10_000
MAX_WARMUP_LAUNCHES = 4096
#: Memory torch may hold reserved for no tensor (the pools of finished graphs, mostly) before a
#: capture hands it back (``_make_room``).
UNUSED_RESERVED_BYTES = 2 << 30
#: Samples that cover less than this share of ``rep_ms`` (the probe overestimated the kernel)
#: get more.
TOP_UP_BELOW = 0.8


def min_samples(share: float) -> int:
    """The fewest samples of a timing of ``share`` of ``rep_ms`` (1: a full timing)."""
    return MIN_SAMPLES if share >= 1 else max(MIN_SCREENING_SAMPLES, math.ceil(MIN_SAMPLES * share))


def runtime_error(request: BenchRequest, exc: BaseException) -> ConfigMeasurement:
    """A config that raised: its result (the worker decides whether it can go on)."""
    return ConfigMeasurement(request.config_id, "runtime_error", f"{type(exc).__name__}: {exc}"[:500])


class ConfigTiming:
    """The timing of one checked config, in three steps the pass interleaves with other configs'
    work: ``capture`` (host only: the CUDA graph of a short kernel), ``start`` (queue the rest
    of the warm-up and the timed launches; ``resume`` queues what it held back) and ``finish``
    (wait for them, read the samples).

    Kernels that are short (under ``GRAPH_BELOW_MS``) or under ``HOST_BOUND_RATIO`` times what an
    events-timed sample costs the host are timed as replays of a graph of ``k`` launches over all
    rotating input sets (so host launch overhead cannot leak into the samples and the cold-L2
    property holds inside the graph); the others get a pair of CUDA events around each launch.
    Sample counts fill ``rep_ms`` of GPU time.
    """

    def __init__(self, request: BenchRequest, clocks: GpuClocks | None, error: float, phases: dict[str, float], *,
                 launch: Callable[[int], Any], workload: Workload, gpu_ms: float, host_ms: float,
                 check_ms: float) -> None:
        self.request = request
        self.settings = request.settings
        #: GPU ms the next ``start`` fills with samples, and its fewest samples: the whole timing,
        #: or one slice of it in interleaved finals (``_Pass.measure_interleaved``, aot_tune.bench.engine.pipeline)
        self.rep_ms, self.min_samples = request.settings.rep_ms, min_samples(request.share)
        self._clocks, self._error = clocks, error
        self._clocks_start = ClockReading()
        self.phases = phases
        self._launch = launch
        self._rotation, self._take_sets = workload.rotation, workload.take_sets  # the shape's, shared by its configs
        self._gpu_ms, self._host_ms = gpu_ms, host_ms
        self._warmed_ms = check_ms + gpu_ms  # the check and probe launches warmed the kernel up
        self._graph: Any = None
        self._graph_output: Any = None
        self._unwritten: Any = None
        self._k = 1
        self._replay_estimate_ms = 0.0
        #: probe time less the time of one launch in the graph, once a graph-timed config has finished
        self.probe_overhead_ms: float | None = None
        self._events: list | None = None
        self._parts: list[int] = []  # where each queued part of ``_events`` ends (``resume``)
        self._held = 0  # timed launches ``start`` held back for ``resume``
        #: GPU ms from the first timed launch's start to the last one's end (the samples and the
        #: gaps between them), once finished
        self.span_ms = 0.0
        self._failure: ConfigMeasurement | None = None
        #: timed with events, then again as graph replays (``_time_with_graph``)
        self.retimed = False
        # The check launch is a second reading of the kernel's time: a probe inflated by a host
        # stall (the GPU drained before it) must not alone send a short kernel to events.
        kernel_ms = min(gpu_ms, check_ms) if check_ms > 0 else gpu_ms
        self.method = "graph" if _graph_timed(kernel_ms, host_ms) else "events"

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
        self._k = _clamp(max(math.ceil(GRAPH_SAMPLE_MS / launch_ms), self._cold_sets()), 1, MAX_GRAPH_LAUNCHES)
        self._replay_estimate_ms = self._k * launch_ms
        try:
            self._graph, self._graph_output = _capture(self._launch, self._k, self._take_sets(0), sets)
        except Exception:  # noqa: BLE001 - capture is an optimization; a failed one falls back
            self.method, self._graph = "events", None
        self._spent("capture", began)

    # -- start: queue, asynchronously ----------------------------------------------------------
    def start(self, ahead_ms: float = 0.0, hold_back_ms: float = 0.0) -> None:
        """Queue the rest of the warm-up and the timed launches, without waiting. ``ahead_ms``:
        GPU time of other work queued back to back ahead of this start (another config's timed
        launches), which counts toward ``warmup_ms``. One launch of its own (one graph replay)
        always comes first: other kernels ran since its probe. ``hold_back_ms``: about this much
        of the timed launches (never all) waits for ``resume``, which queues it behind work the
        pass queues meanwhile (see aot_tune.bench.engine.pipeline)."""
        try:
            began = time.perf_counter()
            rewarm_ms = max(0.0, self.settings.warmup_ms - self._warmed_ms - ahead_ms)
            if self.method == "graph":
                graph, per_sample = self._graph, max(self._replay_estimate_ms, 1e-4)
                self._take_sets(self._k)  # every replay reads the sets the graph captured
                self._unwritten = _poison_and_replay(graph, self._graph_output)
                for _ in range(_clamp(math.ceil(rewarm_ms / per_sample) - 1, 0, MAX_SAMPLES)):
                    graph.replay()
                self._spent("warmup", began)
                began = time.perf_counter()
                runs = _clamp(math.ceil(self.rep_ms / per_sample), self.min_samples, MAX_SAMPLES)
                self._held = _clamp(int(hold_back_ms / per_sample), 0, runs - 1)
                self._events = _record_events(runs - self._held, lambda _: graph.replay())
            else:
                gpu_ms = max(self._gpu_ms, 1e-4)
                rewarm = _clamp(math.ceil(rewarm_ms / gpu_ms), 1, MAX_WARMUP_LAUNCHES)
                runs = _clamp(math.ceil(self.rep_ms / gpu_ms), self.min_samples, MAX_SAMPLES)
                self._held = _clamp(int(hold_back_ms / gpu_ms), 0, runs - 1)
                launch = self._rotating_launch(rewarm + runs - self._held)
                for i in range(rewarm):
                    launch(i)
                self._spent("warmup", began)
                began = time.perf_counter()
                self._events = _record_events(runs - self._held, lambda i: launch(rewarm + i))
            self._parts = [len(self._events)]
            self._spent("timed", began)
            self._clocks_start = self._read_clocks()  # the GPU is running this config or the one before
        except Exception as exc:  # noqa: BLE001 - a fault while timing is this config's result
            self._failure, self._held = runtime_error(self.request, exc), 0

    @property
    def held_back(self) -> bool:
        """Whether ``start`` held back timed launches that ``resume`` has yet to queue."""
        return self._held > 0 and self._failure is None

    def resume(self) -> None:
        """Queue the timed launches ``start`` held back, after one launch of its own (the GPU
        drained since: a kernel load waits for it), without waiting; ``finish`` reads them all."""
        if not self.held_back:
            return
        held, self._held = self._held, 0
        try:
            began = time.perf_counter()
            if self.method == "graph":
                self._take_sets(self._k)
            body = self._after_own_launch(held)
            self._spent("warmup", began)
            began = time.perf_counter()
            self._events += _record_events(held, body)
            self._parts.append(len(self._events))
            self._spent("timed", began)
        except Exception as exc:  # noqa: BLE001 - a fault while timing is this config's result
            self._failure = runtime_error(self.request, exc)

    def _spent(self, phase: str, began: float) -> None:
        """Add the host seconds since ``began`` to ``phase``: a config's phases add up over all its
        steps (every round of interleaved finals, a timing done again), so each finish reports
        them all so far."""
        self.phases[phase] = self.phases.get(phase, 0.0) + time.perf_counter() - began

    def _cold_sets(self) -> int:
        """The input sets a graph cycles through so that every launch in its replays reads a cold
        set: the whole rotation, or for a screening timing ``SCREENING_SETS_SHARE`` of it."""
        sets = self._rotation.sets
        return sets if self.request.share >= 1 else max(1, math.ceil(sets * SCREENING_SETS_SHARE))

    def _rotating_launch(self, count: int) -> Callable[[int], Any]:
        """Launch ``i`` of the next ``count`` reads the i-th of the next input sets of the rotation."""
        first, sets, launch = self._take_sets(count), self._rotation.sets, self._launch
        return lambda i: launch((first + i) % sets)

    def _after_own_launch(self, count: int) -> Callable[[int], Any]:
        """Queue one launch of its own now (other work ran since its samples: a kernel load's
        drain, the next config's), and return the body of ``count`` more samples behind it."""
        if self.method == "graph":
            graph = self._graph
            graph.replay()
            return lambda _: graph.replay()
        launch = self._rotating_launch(count + 1)
        launch(0)
        return lambda i: launch(i + 1)

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
        self._spent("clocks", began)
        return reading

    # -- finish: wait and read -----------------------------------------------------------------
    def finish(self, keep: bool = False) -> ConfigMeasurement:
        """Wait for the timed launches and read their samples; ``keep``: the graph stays for
        another ``start`` (the next round of interleaved finals)."""
        if self._failure is not None:
            return self._failure
        clocks_end = self._read_clocks()  # before the wait: the timed launches still run
        began = time.perf_counter()
        try:
            times = _read_events(self._events)
            self.span_ms = sum(_span_ms(self._events[begin:end])
                               for begin, end in zip([0] + self._parts, self._parts))
            if self.method == "events" and times and _graph_timed(statistics.median(times), self._host_ms):
                times = self._time_with_graph(statistics.median(times)) or times
            if self.method == "graph" and self._unwritten is not None and self._unwritten.read():
                times = self._time_with_events()  # the replays did not write the output
            times += self._top_up(times)
            if self.method == "graph":
                times = [t / self._k for t in times]
                if not self.retimed:  # a retimed config's estimate came from its events samples
                    self.probe_overhead_ms = self._gpu_ms - statistics.median(times)
        except Exception as exc:  # noqa: BLE001
            return runtime_error(self.request, exc)
        if self._failure is not None:
            return self._failure
        self._spent("timed", began)
        cold = self._rotation.cold_l2 and (self.method != "graph" or self._k >= self._cold_sets())
        self._events = None
        if keep:
            self._warmed_ms = self.settings.warmup_ms  # its samples just ran: a next start runs one launch
        else:
            self._graph = self._graph_output = None
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
        missing = self.rep_ms - sum(times)
        if missing <= (1 - TOP_UP_BELOW) * self.rep_ms or len(times) >= MAX_SAMPLES:
            return []
        extra = _clamp(math.ceil(missing / max(per_sample, 1e-4)), 1, MAX_SAMPLES - len(times))
        pairs = _record_events(extra, self._after_own_launch(extra))
        times = _read_events(pairs)
        self.span_ms += _span_ms(pairs)
        return times

    def _time_with_graph(self, events_ms: float) -> list[float]:
        """Time again as graph replays, sized from the events-timed median (an upper bound of the
        kernel's time): the check and probe both read the kernel long enough for events, its
        samples did not. Timed with events, such a kernel reads the host's pace (a 0.035 ms GEMM
        read 0.090 ms on the H200 host). Returns [] (the events samples stand) if the graph
        cannot be captured or the timing fails."""
        self._gpu_ms, self._warmed_ms = events_ms, self.settings.warmup_ms  # warm: its samples just ran
        self.method = "graph"
        self.capture()
        if self.method != "graph":
            return []
        self.start()
        if self._failure is not None:
            self._failure = None
            self.method, self._graph, self._k = "events", None, 1
            return []
        times = _read_events(self._events)
        self.span_ms += _span_ms(self._events)
        self.retimed = True
        return times

    def _time_with_events(self) -> list[float]:
        """Time again with an event pair per launch: a graph whose replays leave the output
        unwritten recorded nothing of the launch (it ran outside the capture)."""
        self.method, self._graph, self._k = "events", None, 1
        self.start()
        if self._failure is not None:
            return []
        times = _read_events(self._events)
        self.span_ms = _span_ms(self._events)
        return times


def _graph_timed(gpu_ms: float, host_ms: float) -> bool:
    return gpu_ms < GRAPH_BELOW_MS or gpu_ms < HOST_BOUND_RATIO * host_ms


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


def _span_ms(pairs: list) -> float:
    """GPU ms from the first pair's start to the last one's end (read pairs only)."""
    return pairs[0][0].elapsed_time(pairs[-1][1]) if pairs else 0.0


def _capture(launch: Callable[[int], Any], k: int, first_set: int, sets: int) -> tuple[Any, Any]:
    """A graph of ``k`` launches cycling through the input sets, captured on a side stream.
    Unlike ``torch.cuda.graph``, this neither synchronizes the device nor collects garbage
    first, so work already queued keeps the GPU busy meanwhile (measured: capturing waits for
    none of it)."""
    import torch

    _make_room()
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


def _make_room() -> None:
    """Hand back the memory torch holds reserved for no tensor once it passes
    ``UNUSED_RESERVED_BYTES``. Each graph gets a memory pool of its own, which stays reserved
    after the graph is gone until an allocation fails; an allocation that fails during a capture
    cannot free it (freeing device memory is not allowed while a stream captures). On the H100
    host a worker's freed pools filled the device, every later capture failed, and 244 configs of
    one shape of the whole benchmark were timed with events, host-bound (a 0.007 ms GEMM read
    0.038 ms). Freeing waits for the device: rare, gigabytes of freed pools apart."""
    import torch

    stats = torch.cuda.memory_stats_as_nested_dict()  # read once: memory_reserved() and _allocated() flatten it
    if _current(stats, "reserved_bytes") - _current(stats, "allocated_bytes") > UNUSED_RESERVED_BYTES:
        torch.cuda.empty_cache()


def _current(stats: dict, name: str) -> int:
    """Bytes of ``name`` over all pools now; a process that has allocated nothing has no entry."""
    return stats.get(name, {}).get("all", {}).get("current", 0)


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
