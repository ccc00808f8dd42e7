"""The pipelined pass over a shape's configs on a GPU, and the interpreter's wall-clock path.

The configs of one shape are measured as a pipeline in which the host never waits for an idle
GPU: the GPU runs check(i+1) and probe(i+1) queued between timed(i-1) and timed(i). Kernels
are found in Triton's caches (host work, about 2 ms each) while the first config's timed
launches run, and then loaded together, since a load synchronizes the device (``_Kernels``);
the config timed then holds back the tail of its timed launches to keep the GPU busy after the
load (``LOAD_TAIL_MS``).
The host reads config i+1's check while timed(i) runs, and captures its CUDA graph then.
Device values (the comparison, the graph's write check) are read through pinned copies with
their own events: ``.item()`` would wait for all the work queued after them. A pass also
builds the next shape's input sets and references (``prepare``: the pool tells the worker
which shape comes next) while a config's timed launches keep the GPU busy, so the next pass
starts without that set-up. Since several configs have work queued at once, the worker is
told which ones before every wait (``announce``): a fault that kills the context is pinned on
one config by the pool measuring those again one at a time. Configs of the same shape whose
compiles land while a pass runs join it (``more``) instead of waiting for a pass of their own,
which would start on an idle GPU: its first kernel found and loaded, its first config warmed up
on its own launches.

Interpreter: wall clock on the CPU, a functional check with a rough time; its table is only
ever used under the interpreter.
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections import Counter
from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence

from aot_tune.runtime.forcing import launch_with_config
from aot_tune.triton_compat import CacheHitCounter, find_instead_of_launch, load_found
from aot_tune.bench.engine.check import CHECK_SETS, Comparison
from aot_tune.bench.engine.timing import MIN_SAMPLES, ConfigTiming, runtime_error
from aot_tune.bench.engine.workload import Workload
from aot_tune.bench.nvml import GpuClocks
from aot_tune.bench.runner import BenchRequest, BenchSettings, ConfigMeasurement, MoreRequests

#: Idle GPU work queued before a check when less than this is queued (``torch.cuda._sleep``),
#: so the check's event pair times the kernel rather than the host issuing it (about 0.1 ms of
#: host work from the spacer to the check's launch). A host-bound pass always queues it, and
#: the host then waits for it before it reads the check: 1 ms here cost a screened µs GEMM
#: 0.3-1.7 ms (median 0.6) of its 3.8-11 ms on the H200 (docs/bench-log.md, 2026-11-29 evening).
SPACER_MS = 0.2
#: GPU spinning queued right before every probe, whatever the pass believes is queued: a probe
#: that finds the GPU idle times the host's launch (0.04 ms for a 0.007 ms GEMM on the H100
#: host), so the kernel is timed with events, host-bound, and reads 5x slow; and the next
#: config's check, sized from that probe, finds the GPU idle too.
PROBE_SPACER_MS = 0.2
#: A pass finds the next configs' kernels (about 2 ms of host work each on an H100 host) while
#: at least this much of the running config's timed launches is still queued.
FIND_MARGIN_MS = 3.0
#: The config whose timed launches are queued when a pass loads its next kernels (a load waits
#: for the GPU to finish its queued work) holds back about this much of them (at most half) and
#: queues it after the load, behind the next config's check: the GPU runs it while the host reads
#: that check and captures its graph, and it counts toward that config's warm-up. Without it the
#: GPU idled through both, and the next config warmed up on its own launches.
LOAD_TAIL_MS = 5.0
#: A pass builds the next shape's input sets and references (host work plus queued device work)
#: only while at least this much of a config's timed launches is still queued.
PREPARE_MARGIN_MS = 5.0
#: Throwaway CUDA graphs a worker captures and replays when it opens its GPU. On the H200, the
#: first three graphs a process replayed ran a 1.8 us kernel at 1.4 us per launch, all later
#: ones at 1.8 us; three throwaway graphs first made the first real ones read like the rest
#: (docs/bench-log.md, "Where our spread comes from").
WARMUP_GRAPHS = 3
INTERPRETER_MAX_RUNS = 3


#: (configs with work on the device now, phase): said before each step that may crash or hang.
Announce = Callable[[tuple[str, ...], str], None]


def _no_more() -> Sequence[BenchRequest]:
    return ()


def measure_configs(requests: Sequence[BenchRequest], workload: Workload, backend: str, l2_bytes: int = 0,
                    clocks: GpuClocks | None = None, announce: Announce | None = None,
                    seconds: Counter[str] | None = None,
                    prepare: Callable[[], None] | None = None, more: MoreRequests = _no_more) -> Iterator[ConfigMeasurement]:
    """Check and time configs of one (kernel, shape, dtype), yielding each result when it is
    complete (on a GPU, as one pipelined pass; see the module doc). Never raises for a kernel
    fault: it becomes the config's result. ``seconds`` gets the host seconds of the pass's
    set-up steps ("loads"; "inputs": input sets and reference outputs), where the GPU idles, and
    the GPU seconds from each config's first timed launch to its last ("timed span").
    ``prepare`` (the next shape's set-up, which must not raise) is called once: on a GPU while
    at least ``PREPARE_MARGIN_MS`` of timed launches are queued, so its host work leaves no gap
    between them; on the interpreter after the first config. ``more`` is asked before each config
    and once more before the pass ends: the requests it returns (the same shape) join the pass.
    A shape's finalists (requests with ``final_rounds``) are timed interleaved instead
    (``_Pass.measure_interleaved``), and take no more."""
    announce = announce or (lambda config_ids, phase: None)
    seconds = Counter() if seconds is None else seconds
    if backend != "cuda":
        for position, request in enumerate(_growing(list(requests), more)):
            announce((request.config_id,), "check")
            yield measure_wall(request, workload)
            if position == 0 and prepare is not None:
                _timed_step(seconds, "prepared", prepare)
        return
    run = _Pass(workload, l2_bytes, clocks, announce, seconds, prepare)
    if requests and requests[0].final_rounds:
        yield from run.measure_interleaved(list(requests), requests[0].final_rounds)
    else:
        yield from run.measure(list(requests), more)


def _growing(queue: list[BenchRequest], more: MoreRequests) -> Iterator[BenchRequest]:
    """``queue``'s requests in order, with what ``more`` adds appended to it (asked before each
    one and at the end): a pass's load finds the kernels of the configs after the current one."""
    position = 0
    while True:
        queue.extend(more())
        if position == len(queue):
            return
        yield queue[position]
        position += 1


def _timed_step(seconds: Counter[str], name: str, step: Callable[[], None]) -> None:
    began = time.perf_counter()
    step()
    seconds[name] += time.perf_counter() - began


def _joined(rounds: list[ConfigMeasurement]) -> ConfigMeasurement:
    """One config's interleaved slices as one measurement: every sample, the first slice's
    clocks at its start and the last one's at its end (with its phases, which add up all the
    slices': ConfigTiming); the first failure if a slice failed."""
    failed = next((m for m in rounds if not m.ok), None)
    if failed is not None:
        return failed
    return replace(rounds[-1], times_ms=[t for m in rounds for t in m.times_ms], clocks_start=rounds[0].clocks_start)


def measure_wall(request: BenchRequest, workload: Workload) -> ConfigMeasurement:
    """Interpreter: the check, then a rough wall-clock time of a few runs on the CPU."""
    index = workload.next_check_set()
    began = time.perf_counter()
    try:
        run = workload.runner(request)
        expected = workload.expected(index)
        workload.confirm_inputs()
        ok, error, message = Comparison(run(index), expected).verdict(workload.tolerance)
        if not ok:
            return ConfigMeasurement(request.config_id, "wrong_result", message, error_norm=error)
        checked = time.perf_counter()
        times = time_wall(lambda: run(index), request.settings)
    except Exception as exc:  # a config that raises is a result; the worker decides if it can go on
        return runtime_error(request, exc)
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

    def __init__(self, workload: Workload, l2_bytes: int, clocks: GpuClocks | None, announce: Announce,
                 seconds: Counter[str], prepare: Callable[[], None] | None = None) -> None:
        self.workload, self.l2_bytes, self.clocks, self.announce = workload, l2_bytes, clocks, announce
        self.seconds = seconds
        self.prepare = prepare  # the next shape's set-up, called once behind queued timed launches
        self.in_flight: list[str] = []  # configs with work queued on the GPU and no result yet
        #: how much longer the probe's one launch took than a launch inside a graph, so far (ms):
        #: the event pair and launch overhead a graph replay does not pay
        self.probe_overheads: list[float] = []

    def _open(self, requests: list[BenchRequest], load_now: list[BenchRequest]
              ) -> tuple["_Kernels | None", list[ConfigMeasurement]]:
        """The kernels of ``load_now`` loaded and the shape set up for ``requests``: (the loaded
        kernels, []), or (None, every request's failure) when the shape's set-up failed."""
        kernels = _Kernels(self.workload, self.seconds)
        kernels.load(load_now, self._announce_load, gpu_busy=lambda: False)
        failure = self._set_up(requests)
        if failure is not None:
            return None, [runtime_error(request, failure) for request in requests]
        return kernels, []

    def measure(self, requests: list[BenchRequest], more: MoreRequests = _no_more) -> Iterator[ConfigMeasurement]:
        """``requests`` and those ``more`` adds as the pass goes (appended to ``requests``)."""
        requests.extend(more())
        if not requests:
            return
        kernels, failed = self._open(requests, requests[:1])
        if kernels is None:
            yield from failed
            for request in _growing([], more):  # the shape's set-up failed: so do the configs that join
                yield replace(failed[0], config_id=request.config_id)
            return
        running: ConfigTiming | None = None  # timed launches queued, samples not read
        ready: ConfigTiming | None = None  # checked and captured, nothing of its timing queued
        for position, request in enumerate(_growing(requests, more)):
            if not kernels.loaded(request):
                # Find the next configs' kernels while the GPU runs timed launches, then load them
                # (which waits for the device): one break in the pipeline for many kernels. The
                # config started here holds back the tail of its timed launches for after the load.
                if ready is not None:
                    ready.start(_ahead_ms(ready, running), hold_back_ms=min(LOAD_TAIL_MS, ready.rep_ms / 2))
                    if running is not None:
                        yield self._finish(running)
                    running, ready = ready, None
                timing = running
                kernels.load(requests[position:], self._announce_load,
                             gpu_busy=lambda: timing is not None and timing.queued_for(FIND_MARGIN_MS))
            busy = running is not None and running.queued_for(SPACER_MS)
            check = _Check(request, self.workload, gpu_busy=busy)
            self.in_flight.append(request.config_id)
            if running is not None and running.held_back:
                running.resume()  # behind this check: the GPU runs it while the host reads the check and captures
            else:
                if ready is not None:
                    ready.start(_ahead_ms(ready, running))
                    self._prepare_behind(ready)
                if running is not None:
                    yield self._finish(running)
                running, ready = ready, None
            self._say("check")
            prepared = self._ready(check)
            if isinstance(prepared, ConfigMeasurement):
                yield prepared
                continue
            ready = prepared
        if ready is not None:
            ready.start(_ahead_ms(ready, running))
            self._prepare_behind(ready)
        for timing in (running, ready):
            if timing is not None:
                yield self._finish(timing)

    def measure_interleaved(self, requests: list[BenchRequest], rounds: int) -> Iterator[ConfigMeasurement]:
        """A shape's finalists timed side by side: each checked and captured, then timed in
        ``rounds`` rounds of a slice of ``rep_ms`` each, every config in turn. A GPU under a power
        cap or warming up runs the same kernel 10-33% apart from one pass to the next (fp8 and
        fp16 GEMMs on the H100 host); interleaved, that drift falls on every finalist alike."""
        kernels, failed = self._open(requests, requests)
        if kernels is None:
            yield from failed
            return
        # every check queued at once (the GPU runs them back to back); then each one read, its graph
        # captured and its first slice queued, so that the next capture overlaps that slice
        checks = []
        for request in requests:
            self.in_flight.append(request.config_id)
            checks.append(_Check(request, self.workload, gpu_busy=bool(checks)))
        self._say("check")
        timings: list[ConfigTiming] = []
        for check in checks:
            prepared = self._ready(check)
            if isinstance(prepared, ConfigMeasurement):
                yield prepared
                continue
            prepared.rep_ms = prepared.request.settings.rep_ms / rounds
            prepared.min_samples = max(1, math.ceil(MIN_SAMPLES / rounds))
            prepared.start(_ahead_ms(prepared, timings[-1] if timings else None))
            timings.append(prepared)
        # each slice read is followed at once by that config's next one, queued behind the other
        # configs' slices of this round: the GPU never waits for the host between rounds
        slices: dict[str, list[ConfigMeasurement]] = {t.request.config_id: [] for t in timings}
        self._say("time")
        for round_ in range(rounds):
            for timing in timings:
                taken = slices[timing.request.config_id]
                if taken and not taken[-1].ok:
                    continue
                last = round_ == rounds - 1
                taken.append(timing.finish(keep=not last))
                self.seconds["timed span"] += timing.span_ms / 1e3
                if not last and taken[-1].ok:
                    timing.start()
        for timing in timings:
            self.in_flight.remove(timing.request.config_id)
            yield _joined(slices[timing.request.config_id])

    def _ready(self, check: "_Check") -> "ConfigTiming | ConfigMeasurement":
        """A config's check read: its failure (the config leaves the pass), or its timing with
        the graph captured."""
        prepared = check.read(self.clocks)
        if isinstance(prepared, ConfigMeasurement):
            self.in_flight.remove(prepared.config_id)
            return prepared
        prepared.capture(statistics.median(self.probe_overheads) if self.probe_overheads else 0.0)
        return prepared

    def _set_up(self, requests: Sequence[BenchRequest]) -> Exception | None:
        """The shape's input sets and reference outputs, once per pass; the failure, if any."""
        self.announce(tuple(r.config_id for r in requests), "inputs")  # a fault here is no one config's
        began = time.perf_counter()
        try:
            self.workload.rotation_for(requests[0].settings, self.l2_bytes)  # the input sets, once per shape
            for index in range(CHECK_SETS):
                self.workload.expected(index)  # reference outputs now, before any check reads them
            self.workload.confirm_inputs()
            return None
        except Exception as exc:  # noqa: BLE001 - the shape's set-up failed: no config can be checked
            return exc
        finally:
            self.seconds["inputs"] += time.perf_counter() - began

    def _prepare_behind(self, timing: ConfigTiming) -> None:
        """The next shape's set-up, once, while ``timing``'s timed launches keep the GPU busy."""
        if self.prepare is not None and timing.queued_for(PREPARE_MARGIN_MS):
            prepare, self.prepare = self.prepare, None
            self._say("prepare")  # a fault now is not the next shape's alone: the configs on the device are named
            _timed_step(self.seconds, "prepared", prepare)

    def _finish(self, timing: "ConfigTiming") -> ConfigMeasurement:
        self._say("time")
        result = timing.finish()
        self.seconds["timed span"] += timing.span_ms / 1e3
        self.in_flight.remove(timing.request.config_id)
        if timing.probe_overhead_ms is not None:
            self.probe_overheads.append(timing.probe_overhead_ms)
        return result

    def _say(self, phase: str) -> None:
        self.announce(tuple(self.in_flight), phase)

    def _announce_load(self, config_ids: tuple[str, ...]) -> None:
        """Before loading kernels: the configs with work on the device and the ones loaded."""
        self.announce(tuple(self.in_flight) + config_ids, "load")


class _Kernels:
    """The kernels of a pass's configs: found (host work: Triton's caches) and loaded onto the
    device (which waits for the device to finish its queued work). A pass loads the first
    config's at its start and the others in one step, found while the first configs' timed
    launches run. A config whose kernel cannot be found or loaded is left to its check, whose
    launch raises the error again as the config's result."""

    def __init__(self, workload: Workload, seconds: Counter[str]) -> None:
        self.workload, self.seconds = workload, seconds
        self._loaded: set[str] = set()

    def loaded(self, request: BenchRequest) -> bool:
        return request.plain or request.config_id in self._loaded

    def load(self, requests: Sequence[BenchRequest], announce: Callable[[tuple[str, ...]], None],
             gpu_busy: Callable[[], bool]) -> None:
        """Find the kernels of ``requests`` in order, the first always, the next ones while
        ``gpu_busy()`` (the GPU has timed launches queued), then load them all. Seconds spent
        with the GPU idle count as "loads"."""
        chosen = []
        idle = 0.0
        # finding may compile (a default outside the space): until it is known which configs are
        # found now, any of them may be the one that crashes or hangs the worker
        announce(tuple(r.config_id for r in requests if not r.plain))
        with find_instead_of_launch() as found:
            for request in requests:
                if chosen and not gpu_busy():
                    break
                busy, began = gpu_busy(), time.perf_counter()
                self._find(request)
                idle += 0.0 if busy else time.perf_counter() - began
                chosen.append(request)
        announce(tuple(r.config_id for r in chosen if not r.plain))
        draining = gpu_busy()  # then the first load waits for the queued launches: the GPU is not idle
        began = time.perf_counter()
        for kernel in found:
            try:
                load_found(kernel)
            except Exception:  # noqa: BLE001 - the check's launch raises it again, as the config's result
                pass
            if draining:
                draining, began = False, time.perf_counter()
        self.seconds["loads"] += idle + time.perf_counter() - began
        self._loaded.update(r.config_id for r in chosen)

    def _find(self, request: BenchRequest) -> None:
        if request.plain:
            return
        try:
            with CacheHitCounter.suspended() if request.baseline else contextlib.nullcontext():
                launch_with_config(self.workload.launch, self.workload.inputs(0), dict(request.config),
                                   kernel=self.workload.kernel, hooks=False)
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
            _keep_busy(PROBE_SPACER_MS)
            issued = time.perf_counter()
            events[2].record()
            run(self.probe_set)
            events[3].record()
            # what one events-timed sample costs the host: its launch and both event records
            self.host_ms = (time.perf_counter() - issued) * 1e3
        except Exception as exc:  # noqa: BLE001 - a config that raises is a result
            self.failure = runtime_error(request, exc)
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
            return runtime_error(self.request, exc)
        phases = {"check": self.enqueue_seconds + time.perf_counter() - began}
        return ConfigTiming(self.request, clocks, error, phases, launch=self.run, workload=self.workload,
                            gpu_ms=gpu_ms, host_ms=self.host_ms, check_ms=check_ms)


def _ahead_ms(timing: ConfigTiming, before: ConfigTiming | None) -> float:
    """The GPU time queued ahead of ``timing``'s start that counts toward its ``warmup_ms``: all
    of it while ``before`` still has that much of its timed launches to start (they run back to
    back ahead of it), else none (a pass's first config warms up on its own launches)."""
    warmup_ms = timing.settings.warmup_ms
    return warmup_ms if before is not None and before.queued_for(warmup_ms) else 0.0


def _keep_busy(ms: float) -> None:
    """Queue about ``ms`` of GPU spinning (at 2 GHz; longer at lower clocks)."""
    import torch

    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(int(ms * 2e6))


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


def context_usable() -> bool:
    """False after a sticky CUDA error (illegal address, launch failure): the process must go."""
    import torch

    try:
        torch.cuda.synchronize()
        probe = torch.ones(1, device="cuda")
        return bool((probe + 1).item() == 2.0)
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return False
