"""The cost model: how long a ``doit tune`` will take, from the command's start to its end, read
off its plan, what earlier runs left in this tree and what this machine's runs of other projects
showed, before anything runs (``doit tune --dry-run`` prints it; a real run records it beside its
wall time, and its progress lines start their estimate of what is left from it).

A run is four parts, added up: **start-up** (the workers' imports, the kernel modules' import
estimated from their source by aot_tune.build.imports, the captures), **compile** (each stale
compile's expected seconds, list-scheduled longest first over ``-n`` workers), **bench** (per
measurement its timed launches and the engine's overhead, per batch its own; what the benches add
after the compiles they stream behind, and the compiles adaptive searches run on demand) and
**rest** (the command's start, measured in the forecasting process, planning, merge, generate and
the exporters' imports). The guide's "Before a run: the cost" (docs/guide.md) says what each part
takes in and why, which is that section's to say. Overheads and rates are calibrated part by part
in aot_tune.pipeline.calibration; a run's progress lines then correct the prediction as its tasks
finish (aot_tune.runs.progress).
"""
from __future__ import annotations

import heapq
import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from aot_tune.build.compile import (CompileHistory, compile_time_estimate, expected_compile_seconds,
                                    read_compile_result, recorded_compile_seconds)
from aot_tune.build.deadline import CompileDeadline
from aot_tune.build.imports import ImportWalk, kernel_bytes
from aot_tune.build.specialize import launch_key
from aot_tune.cache import record_full_shape
from aot_tune.pipeline.calibration import (  # noqa: F401 - the model's defaults, here too
    CALIBRATED, DEFAULT_BATCH_S, DEFAULT_COMPILE_S, DEFAULT_COMPILE_S_PER_KB, DEFAULT_DEVICE_STARTUP_S,
    DEFAULT_ENGINE_S, DEFAULT_REST_AFTER_S, DEFAULT_STARTUP_S, DEFAULT_UNSTAGED_S, Calibration, calibrate, known,
    median_of, observed)
from aot_tune.pipeline.plan import BenchUnit, CompileUnit, KernelPlan, Plan
from aot_tune.runs.history import HistoryEntry, MachineKey
from aot_tune.runs.log import RunRecord
from aot_tune.pipeline.staleness import Staleness
from aot_tune.record import replay
from aot_tune.select import FINALS_MAX, FINALS_SHARE, finals_on
from aot_tune.search import ranked
from aot_tune.search import strategies as search

#: Timed launches fill a bit over ``rep_ms`` (22.1 ms at 20 on the H100 host).
TIMED_STRETCH = 1.1
CAPTURE_S = 0.0005
#: The tuning process's import of torch and triton, where its exporters reach them, as a share of
#: the fork server's start-up (which also imports torch's dynamo, hashes Triton's library and warms
#: meta tensors up): 1.55 s of 4.4-4.9 s on a 2-core CPU; and of torch's dynamo, which a
#: ``torch.compile`` at import needs and the workers hold already: 1.3 s more.
MAIN_TOOLCHAIN_SHARE = 0.35
MAIN_DYNAMO_SHARE = 0.3
#: A process that imported torch, triton and a kernel library takes a quarter as long again to
#: exit (on a 2-core CPU: 0.5 s after torch's 1.6 s, 0.9 s after torch, dynamo and triton's 3.4 s,
#: 1.2 s after fla-core's 6.4 s): the tuning process does, after its exporters' imports.
MAIN_EXIT_SHARE = 0.25


@dataclass
class DeviceWork:
    """The bench tasks of one kernel on one device model."""

    device: str
    stale: int = 0
    total: int = 0
    measurements: int = 0
    configs: list[int] = field(default_factory=list)  # configs measured (or probed) per stale task
    device_s: float = 0.0
    search: str = ""  # a budgeted search's strategy and budget; "" when exhaustive


@dataclass
class KernelWork:
    """What a run does for one kernel: its compiles, captures and bench tasks."""

    kernel: str
    targets: tuple[str, ...]
    compiles_stale: int = 0
    compiles_total: int = 0
    estimated: int = 0  # compiles of launches whose specialization is not captured yet, guessed
    on_demand: int = 0  # compiles the adaptive searches are expected to run as they reach configs
    on_demand_candidates: int = 0  # compiles of those searches' candidates not compiled yet
    to_capture: int = 0
    devices: dict[str, DeviceWork] = field(default_factory=dict)
    code_kb: float = 0.0  # the kernel's code (aot_tune.build.imports.kernel_bytes); 0: not found


@dataclass
class Forecast:
    """The predicted wall time of a run in parts, and the seconds of each stale task."""

    calibration: Calibration
    kernels: list[KernelWork]
    compile_jobs: int
    device_counts: dict[str, int]
    startup_s: float = 0.0
    compile_s: float = 0.0
    bench_s: float = 0.0
    rest_s: float = 0.0
    launch_s: float = 0.0  # of the rest, the command's own start before the run (measured)
    rest_after_s: float = 0.0  # of the rest, what follows the last stage (the progress lines' remainder)
    compiles: list[float] = field(default_factory=list)  # each stale compile's predicted seconds
    on_demand: list[float] = field(default_factory=list)  # each expected on-demand compile's seconds
    #: (kernel, target, config id) -> a stale compile's predicted seconds (any specialization)
    compile_seconds: dict[tuple[str, str, str], float] = field(default_factory=dict)
    #: bench task name -> its predicted device seconds, and its predicted measurements
    bench_seconds: dict[str, float] = field(default_factory=dict)
    bench_measurements: dict[str, int] = field(default_factory=dict)
    #: the kernel modules' import in each worker (calibrated), and the tuning process's own for
    #: the project's exporters (with torch and triton where they reach them)
    import_s: float = 0.0
    main_import_s: float = 0.0
    #: when the device workers are ready for a first bench, from the compiles' start (their
    #: start-up and import), and what the benches add after the last compile however early they
    #: were: the progress lines' estimate of the run's end (aot_tune.runs.progress.RunClock)
    device_wait_s: float = 0.0
    bench_tail_s: float = 0.0
    #: the per-unit values the parts took (a run logs them: aot_tune.pipeline.calibration.remember)
    estimates: dict[str, float] = field(default_factory=dict)

    @property
    def predicted_s(self) -> float:
        return self.startup_s + self.compile_s + self.bench_s + self.rest_s

    def parts(self) -> dict[str, float]:
        return {"start-up": round(self.startup_s, 3), "compile": round(self.compile_s, 3),
                "bench": round(self.bench_s, 3), "rest": round(self.rest_s, 3)}

    @property
    def idle(self) -> bool:
        """Nothing to compile, capture or measure: the run has nothing to do."""
        return not (self.compiles or self.on_demand or self.bench_seconds or any(k.to_capture for k in self.kernels))

    def task_seconds(self, unit: CompileUnit | BenchUnit) -> float | None:
        """A stale task's predicted seconds (a compile's, or a bench's device seconds)."""
        if isinstance(unit, CompileUnit):
            return self.compile_seconds.get((unit.kernel, unit.target, unit.config.id))
        return self.bench_seconds.get(unit.name)

    def task_measurements(self, unit: BenchUnit) -> int | None:
        """A stale bench task's predicted measurements."""
        return self.bench_measurements.get(unit.name)


def forecast(plan: Plan, staleness: Staleness, compile_jobs: int, runs: Sequence[RunRecord] = (),
             deadline: CompileDeadline = CompileDeadline(), history: Sequence[HistoryEntry] = (),
             walk: ImportWalk | None = None, launch_s: float = 0.0) -> Forecast:
    """Predict the run of ``plan`` on ``compile_jobs`` compile workers, calibrated by ``runs``
    (this project's) and ``history`` (the machine's: aot_tune.runs.history) (reads the caches,
    earlier outputs and the kernels' sources; runs and writes nothing). ``walk``: the kernels'
    import walk, started earlier (``import_walk``); else it is made here. ``launch_s``: this
    command's own start before it began the run (aot_tune.runs.stats.process_age_s)."""
    key = MachineKey(plan.device.backend, plan.device.key,
                     f"triton {plan.toolchain.triton}, torch {plan.toolchain.torch}", os.cpu_count() or 1,
                     max(1, compile_jobs))
    calibration = calibrate(runs, plan.device.backend, history, key, light=not plan.compiles_need_torch())
    result = Forecast(calibration, [], max(1, compile_jobs), {d.key: max(1, d.count) for d in plan.devices},
                      launch_s=launch_s)
    exhaustive: dict[str, list[tuple[float, int]]] = {}  # device -> (seconds, measurements) per stale bench
    warmups: list[tuple[float, int]] = []  # (warm-up seconds, measurements) per stale bench
    budgeted: dict[str, list[float]] = {}
    for kp in plan.kernels:
        history = CompileHistory(plan.work_dir / "compile" / kp.spec.name)
        work = KernelWork(kp.spec.name, kp.targets, code_kb=kernel_bytes(plan.manifest.root, kp.spec.kernel) / 1e3)
        result.kernels.append(work)
        earlier = _earlier_seconds(staleness, kp) if calibration.backend != "cuda" else {}
        candidates: dict[str, list[float]] = {}  # target -> the on-demand candidates' predicted seconds
        expected: dict[str, list[int]] = {}  # target -> configs each adaptive search needing it is expected to measure
        at_record = replay.compile_seconds(str(plan.manifest.root), kp.spec.shape_dict(kp.bench_units[0].shape)) \
            if kp.spec.launch.startswith(replay.__name__ + ":") and kp.bench_units else {}
        for (target, config_id), seconds, later in _compile_seconds(kp, staleness, history, work, calibration,
                                                                    deadline, at_record):
            if later:
                candidates.setdefault(target, []).append(seconds)
                continue
            result.compiles.append(seconds)
            key = (kp.spec.name, target, config_id)
            result.compile_seconds[key] = max(seconds, result.compile_seconds.get(key, 0.0))
        for unit in kp.bench_units:
            device_work = work.devices.setdefault(unit.device, DeviceWork(unit.device))
            device_work.total += 1
            if staleness.bench_done(kp, unit):
                continue
            targets = kp.bench_targets(plan.device_of(unit))
            device_s, measured, configs, warmup_s = _bench_cost(kp, unit, staleness, history, calibration, targets,
                                                      earlier.get((unit.device, unit.dtype, tuple(unit.shape)), {}))
            device_work.stale += 1
            device_work.measurements += measured
            device_work.configs.append(configs)
            device_work.device_s += device_s
            device_work.search = "" if unit.search.exhaustive else unit.search.describe()
            warmups.append((warmup_s, measured))
            result.bench_seconds[unit.name], result.bench_measurements[unit.name] = device_s, measured
            if unit.search.exhaustive:
                exhaustive.setdefault(unit.device, []).append((device_s, measured))
            else:
                budgeted.setdefault(unit.device, []).append(device_s)
            if unit.compiles_on_demand:
                for target in targets:
                    expected.setdefault(target, []).append(configs)
        for target, seconds in _on_demand(candidates, expected).items():
            result.on_demand += seconds
            work.on_demand += len(seconds)
        work.on_demand_candidates = sum(len(s) for t, s in candidates.items() if expected.get(t))
    if not result.idle:
        _imports(result, walk or import_walk(plan, staleness))
        if sum(n for _, n in warmups):
            result.estimates["warmup_s"] = sum(w * n for w, n in warmups) / sum(n for _, n in warmups)
    _assemble(result, exhaustive, budgeted)
    return result


def import_walk(plan: Plan, staleness: Staleness) -> ImportWalk:
    """Start reading what the kernels with work import (aot_tune.build.imports): the workers'
    modules, and the tuning process's own exporters (which a merge runs)."""
    busy = kernels_with_work(plan, staleness)
    refs = {ref for kp in busy for ref in (*plan.worker_refs(kp), kp.spec.vendor) if ref}
    exporters = sorted({e.to.partition(":")[0] for kp in busy for e in kp.spec.exports if ":" in e.to})
    return ImportWalk(plan.manifest.root, sorted({ref.partition(":")[0] for ref in refs}), exporters)


def _imports(result: Forecast, walk: ImportWalk) -> None:
    """The imports' seconds, with torch and triton first where those reach them."""
    calibration = result.calibration
    workers, main = walk.result()
    result.import_s = calibration.imports(workers.seconds())
    if main is not None:
        toolchain = MAIN_TOOLCHAIN_SHARE * main.toolchain + MAIN_DYNAMO_SHARE * (main.toolchain and main.torch_compile)
        result.main_import_s = (calibration.imports(main.seconds()) + calibration.startup() * toolchain) * \
            (1 + MAIN_EXIT_SHARE)
    compiling = [(k.code_kb, k.compiles_stale + k.on_demand) for k in result.kernels if k.compiles_stale + k.on_demand]
    kb = {"compile_kb": sum(c * n for c, n in compiling) / sum(n for _, n in compiling)} \
        if compiling and all(c > 0 for c, _ in compiling) else {}  # the compiles' mean, where every kernel's is known
    result.estimates = {"startup_s": calibration.startup(), "device_startup_s": calibration.device_startup(),
                        "compile_s": calibration.compile(), **kb, "batch_s": calibration.batch(),
                        "unstaged_s": calibration.unstaged(), "rest_after_s": calibration.rest_after(),
                        "import_s": workers.seconds(),
                        "import_calibrated_s": result.import_s, "main_import_s": result.main_import_s}


def may_have_work(plan: Plan, staleness: Staleness) -> bool:
    """Whether a run may do anything, asked before ``forecast`` so that a no-op run predicts
    nothing at the cost of nothing: only a bench that is not done, or a launch compiled but not
    measured, needs a compile or a capture (the staleness the bench stage asks anyway)."""
    return bool(kernels_with_work(plan, staleness))


def kernels_with_work(plan: Plan, staleness: Staleness) -> list[KernelPlan]:
    """The kernels a run compiles, captures or measures anything of: those with a bench that is
    not done, and those with a compile-only launch not compiled yet."""
    return [kp for kp in plan.kernels if staleness.benches_stale(kp) or staleness.compile_only_pending(kp)]


def _assemble(result: Forecast, exhaustive: dict[str, list[tuple[float, int]]],
              budgeted: dict[str, list[float]]) -> None:
    """The four parts from the tasks' seconds (see the module doc)."""
    calibration = result.calibration
    capture = sum(k.to_capture for k in result.kernels)
    compile_wall, first_landing = list_schedule(result.compiles, result.compile_jobs)
    if result.compiles or result.on_demand or capture:
        # the captures are split over the compile workers (aot_tune.pipeline.specializing), each
        # importing the kernel modules before its first capture or compile
        result.startup_s = calibration.startup() + result.import_s + capture * CAPTURE_S / result.compile_jobs
        # device workers start with the captures and import the kernel modules as the compile workers
        # do (aot_tune.pipeline.session): from the compiles' start, they wait only for the rest
        device_wait = max(0.0, calibration.device_startup() - calibration.startup())
    elif result.bench_seconds:
        # GPU workers fork from a server of Triton alone once it is up; beside a server importing
        # torch they are spawned and import on their own, as the interpreter's always are
        forked = calibration.backend == "cuda" and calibration.light
        result.startup_s = (calibration.startup() if forked else 0.0) + calibration.device_startup() + result.import_s
        device_wait = 0.0
    else:
        return
    bench_end = 0.0
    for device, count in result.device_counts.items():
        tasks, searches = exhaustive.get(device, []), budgeted.get(device, [])
        if not tasks and not searches:
            continue
        wall, _ = list_schedule([s for s, _ in tasks] + searches, count)
        measurements = sum(m for _, m in tasks)
        per_measurement = sum(s for s, _ in tasks) / measurements if measurements else 0.0
        tail = min(math.ceil(len(tasks) / count) * per_measurement, wall) if result.compiles else 0.0
        bench_end = max(bench_end, max(first_landing, device_wait) + wall,
                        compile_wall + sum(searches) / count + tail)
        result.bench_tail_s = max(result.bench_tail_s, sum(searches) / count + tail)
    result.compile_s = compile_wall
    # the benches wait for their on-demand compiles (side by side, on every compile worker)
    on_demand = list_schedule(result.on_demand, result.compile_jobs)[0]
    result.bench_s = max(0.0, bench_end - compile_wall) + on_demand
    result.bench_tail_s += on_demand
    result.device_wait_s = device_wait
    result.rest_s = result.launch_s + calibration.unstaged() + result.main_import_s
    result.rest_after_s = calibration.rest_after() + result.main_import_s  # the exporters load at the merge


def list_schedule(seconds: Sequence[float], lanes: int) -> tuple[float, float]:
    """Tasks run longest first, each on the lane free first: when the last ends, and the first."""
    if not seconds:
        return 0.0, 0.0
    free = [0.0] * max(1, lanes)
    first = math.inf
    for task in sorted(seconds, reverse=True):
        end = heapq.heappop(free) + task
        first = min(first, end)
        heapq.heappush(free, end)
    return max(free), first


def specialization_class(key: str) -> str:
    """A launch key (``float16:256x4096x100``) as what Triton specializes its ints on:
    ``float16:16x16x_`` (1 stays 1, a multiple of 16 is 16, another int ``_``)."""
    dtype, _, shape = key.partition(":")
    parts = []
    for value in shape.split("x"):
        try:
            number = int(value)
        except ValueError:
            parts.append(value)
            continue
        parts.append("1" if number == 1 else "16" if number % 16 == 0 else "_")
    return f"{dtype}:{'x'.join(parts)}"


def _compile_seconds(kp: KernelPlan, staleness: Staleness, history: CompileHistory, work: KernelWork,
                     calibration: Calibration, deadline: CompileDeadline,
                     at_record: dict[str, float]) -> list[tuple[tuple[str, str], float, bool]]:
    """Each stale compile's (target, config id), predicted seconds and whether it is left to an
    adaptive search's demand (``Staleness.compile_when``); counts the compile stage's in ``work``.
    ``at_record``: per target, a compile's seconds when the kernel was recorded (else none).
    The compile units the plan knows are stale as the compile stage decides it; a launch not
    captured yet joins the unit of a captured launch of its class (``specialization_class``),
    else a guessed unit per (target, class, config), stale when a bench needs the launch."""
    known = {(u.target, u.specialization, u.config.id): u for u in kp.compile_units}
    stale: dict = {}
    on_demand: dict = {}
    for key, u in known.items():
        when = staleness.compile_when(kp, u)
        if when:
            (stale if when == "up front" else on_demand)[key] = (u.config, recorded_compile_seconds(u.output))
    needed = set(staleness.launches_to_specialize(kp))
    classes: dict[tuple[str, str], dict[str, str]] = {}  # (target, class) -> config id -> specialization
    for target, launches in (kp.specializations.by_target.items() if kp.specializations else ()):
        for key, specs in launches.items():
            classes.setdefault((target, specialization_class(key)), {}).update(specs)
    guessed = set()
    for launch in kp.unspecialized:
        target, shape, dtype, config = launch
        kind = specialization_class(launch_key(shape, dtype))
        key = (target, classes.get((target, kind), {}).get(config.id, ""), config.id)
        if key not in known:
            key = (target, f"~{kind}", config.id)
            guessed.add(key)
        if launch in needed and key not in stale and (
                key in guessed or read_compile_result(known[key].output, known[key].fingerprint) is None):
            recorded = history.seconds(target, config.id) if key in guessed else \
                recorded_compile_seconds(known[key].output)
            when = staleness.launch_compile(kp, (shape, dtype), config)
            (stale if when == "up front" else on_demand)[key] = (config, recorded)
            if when == "up front":
                on_demand.pop(key, None)
    work.compiles_total, work.estimated, work.to_capture = len(known) + len(guessed), len(guessed), len(needed)
    work.compiles_stale = len(stale)
    keys = [*stale, *on_demand]
    found = {**on_demand, **stale}
    estimates = [compile_time_estimate(found[k][0].as_dict(), kp.spec.compile_cost) for k in keys]
    earlier, seconds = [found[k][1] for k in keys], [0.0] * len(keys)
    # per target where the kernel was recorded compiling: those seconds are that target's
    groups = {t: [i for i, k in enumerate(keys) if k[0] == t] for t in {k[0] for k in keys}} if at_record \
        else {None: list(range(len(keys)))}
    for target, group in groups.items():
        typical = at_record.get(target) or calibration.compile(work.code_kb)
        for i, s in zip(group, expected_compile_seconds([estimates[i] for i in group], [earlier[i] for i in group],
                                                        typical)):
            seconds[i] = s
    caps = {target: deadline.seconds([s for k, s in zip(keys, seconds) if k[0] == target])
            for target in {k[0] for k in keys}}
    return [((k[0], k[2]), min(s, caps[k[0]]), k not in stale) for k, s in zip(keys, seconds)]


def _on_demand(candidates: dict[str, list[float]], expected: dict[str, list[int]]) -> dict[str, list[float]]:
    """The compiles adaptive searches are expected to run on demand, per target: of the N
    candidates not compiled yet, the distinct ones the searches reach if each of them drew its
    expected n configs at random, N (1 - prod(1 - n/N)); each at the candidates' mean predicted
    seconds. Searches favour the same good configs, so this leans high (the whole benchmark's 64
    surrogate searches of 50 configs reached 236-250 of its 319 candidates, not all of them)."""
    on_demand = {}
    for target, seconds in candidates.items():
        counts = expected.get(target, [])
        if not seconds or not counts:
            continue
        missed = math.prod(1 - min(n, len(seconds)) / len(seconds) for n in counts)
        on_demand[target] = [statistics.fmean(seconds)] * round(len(seconds) * (1 - missed))
    return on_demand


def _bench_cost(kp: KernelPlan, unit: BenchUnit, staleness: Staleness, history: CompileHistory,
                calibration: Calibration, targets: tuple[str, ...], earlier: dict[str, float]
                ) -> tuple[float, int, int, float]:
    """A stale bench task's device seconds, measurements, configs measured and the warm-up per
    measurement, the finals' included (s). ``earlier``: each config's seconds in the shape's
    earlier record."""
    settings = kp.spec.bench
    candidates = [c for c in staleness.configs_to_measure(kp, unit) if not history.invalid(targets, c.id)]
    typical = known(median_of(list(earlier.values())), calibration.engine())

    def cost(share: float) -> float:
        if calibration.backend == "cuda":
            return settings.rep_ms * share * TIMED_STRETCH / 1e3 + calibration.engine()
        return typical

    if unit.search.strategy == "ranked":  # what its sources in the cache let it leave out
        count, batches = ranked.expected_measurements(candidates,
                                                      staleness.ranked_sources(kp, unit), unit.shape)
        groups = [(count, ranked.SCREEN_SHARE if finals_on(calibration.backend) else 1.0)] if count else []
    else:
        groups, batches = search.search_plan(unit.search, len(candidates))
    if unit.search.exhaustive and calibration.backend != "cuda":
        seconds = sum(earlier.get(c.id, typical) for c in candidates)
    else:
        seconds = sum(n * cost(share) for n, share in groups)
    measurements, configs = sum(n for n, _ in groups), (groups[0][0] if groups else 0)
    budget = unit.search.budget_seconds
    if budget is not None and seconds > budget:  # the search stops once its seconds are spent
        measurements = max(1, round(measurements * budget / seconds))
        configs = min(configs, measurements)
        batches = max(1, round(batches * budget / seconds))
        seconds = budget + cost(1.0)
    warmup_ms = max((settings.screening(share).warmup_ms for _, share in groups), default=0.0) * batches
    # the finals (select.finalists): a batch, among the full timings, else the longest short ones
    compared = sum(n for n, share in groups if share >= 1.0) or max(groups, key=lambda g: g[1], default=(0, 0))[0]
    finals = min(FINALS_MAX, compared, measurements) if finals_on(calibration.backend) else 0
    if finals >= 2:
        seconds += finals * cost(FINALS_SHARE)
        batches, warmup_ms = batches + 1, warmup_ms + settings.warmup_ms
    if staleness.baselines_to_measure(kp, unit):
        extra = bool(unit.vendor) + (unit.default_config is not None and unit.default_config not in unit.configs)
        seconds += extra * cost(1.0)
        measurements += extra
        # with the configs' last batch when exhaustive (alone where no config is left), else a batch of their own
        batches += int(extra > 0 and (not unit.search.exhaustive or batches == 0))
    warmup_s = warmup_ms / 1e3 if calibration.backend == "cuda" else 0.0
    per_measurement = warmup_s / max(1, measurements + finals * (finals >= 2))
    return seconds + batches * calibration.batch() + warmup_s, measurements, configs, per_measurement


def _earlier_seconds(staleness: Staleness, kp: KernelPlan) -> dict[tuple[str, str, tuple], dict[str, float]]:
    """Per (device, dtype, shape) of the kernel's cache, each config's measurement seconds."""
    return {(r.device.key, r.dtype, tuple(record_full_shape(r))): {m.config.id: m.seconds for m in r.measurements
                                                                    if m.seconds > 0}
            for r in staleness.cache(kp).records}

