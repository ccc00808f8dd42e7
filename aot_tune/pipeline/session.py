"""The work of each stage, one function per doit task: compile, bench, merge, generate.

A ``TuneSession`` is the run's shared state (plan, worker pools, progress, counters). Each
stage reads the durable outputs of the stage before it and writes its own atomically, so the
files, not doit's database, are the record of what is done.
"""
from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from aot_tune.bench.runner import BenchRequest, ConfigMeasurement
from aot_tune.cache import record_full_shape
from aot_tune.build.compile import CompileRequest
from aot_tune.errors import BenchUnavailable
from aot_tune.workers.pools import Executors
from aot_tune.fileio import write_atomic
from aot_tune.bench.runner import DeviceModel
from aot_tune.manifest import BenchSettings
from aot_tune.build.compile import CompileRecord, read_compile_result
from aot_tune.pipeline.plan import BenchUnit, CompileUnit, KernelPlan, Plan
from aot_tune.pipeline.baselines import Baselines, baselines_to_proto
from aot_tune.pipeline.recording import assemble_record, measurement_proto, no_config_passed, ranked_from, share_out
from aot_tune.pipeline.staleness import Staleness
from aot_tune.pipeline.streaming import CompileClaims, DeviceHold, landed_waves
from aot_tune.pipeline.stragglers import StragglerJudge, Stragglers
from aot_tune.pipeline import searching, specializing
from aot_tune.pipeline.publishing import Tables
from aot_tune.pipeline.progress import Progress
from aot_tune.space import Config
from aot_tune.build.specialize import launch_key
from aot_tune.tuning_schema import TuningRecord

if TYPE_CHECKING:
    from aot_tune.pipeline.forecast import Forecast

#: The least a device worker may go without progress before its config is a timeout: a GPU
#: step includes loading a kernel (and compiling a default config outside the space); the
#: interpreter runs a whole launch on the CPU.
BENCH_TIMEOUT_FLOOR_S = {"cuda": 120.0, "interpreter": 600.0}


def bench_timeout(settings: BenchSettings, backend: str, previous: TuningRecord | None = None) -> float:
    """The manifest's ``timeout_s``, else the floor of the backend, raised to ten times the slowest
    measurement this shape took before and fifty times the GPU time a config is given."""
    if settings.timeout_s:
        return settings.timeout_s
    slowest = max((m.seconds for m in previous.measurements), default=0.0) if previous is not None else 0.0
    return max(BENCH_TIMEOUT_FLOOR_S[backend], 10 * slowest, 50 * (settings.warmup_ms + settings.rep_ms) / 1e3)


@dataclass(frozen=True)
class StageFailure:
    """A stage task that failed for a reason the user can act on (one line); the run's other
    tasks go on, and the tables stay as they were. The doit loader turns it into a failed task."""

    message: str

class TuneSession:
    def __init__(self, plan: Plan, executors: Executors, staleness: Staleness | None = None) -> None:
        self.plan = plan
        self.executors = executors
        self.staleness = staleness or Staleness(plan)
        self.tables = Tables(plan, self.staleness)
        self.progress: dict[str, Progress] = {}
        self.compile_status: Counter[str] = Counter()
        self.bench_status: Counter[str] = Counter()
        self.cache_hits = 0
        self.cache_misses = 0
        self.seconds: Counter[str] = Counter()
        self.specialized: Counter[str] = Counter()
        self.baseline_status: Counter[str] = Counter()
        self.spans: dict[str, list[float]] = {}  # stage -> [first start, last end], time.time()
        self._spans_lock = threading.Lock()
        self.searched: dict[str, Counter[str]] = {}  # strategy and budget -> shapes, configs, seconds
        self.claims = CompileClaims()
        self.compiled_on_demand = 0  # compiles the budgeted searches ran as they reached their configs
        self.on_demand_candidates: dict[str, CompileUnit] = {}  # the compiles those searches could have asked for
        self.stragglers = Stragglers()  # compiles in flight, and the benches' verdicts on the slow ones
        self._compile_results: dict[str, object] = {}  # compile unit -> its landed result (_compile_result)
        self.batches = 0  # the batches benches sent to device workers
        self._driver: ThreadPoolExecutor | None = None  # runs the queued compiles (see compile)
        self._driver_lock = threading.Lock()
        self.forecast: Forecast | None = None  # the run's prediction, made before it started (None: a no-op)

    def record_span(self, stage: str, start: float, end: float) -> None:
        with self._spans_lock:
            span = self.spans.setdefault(stage, [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)

    def start_stage(self, stage: str, total: int, units: Iterable[CompileUnit | BenchUnit] = ()) -> None:
        """Set the number of tasks the loader found stale (the count grows if more turn up); with
        those ``units``, the progress lines estimate what is left from the run's prediction."""
        expected = {}
        if self.forecast is not None:
            expected = {u.name: s for u in units if (s := self.forecast.task_seconds(u)) is not None}
        lanes = self.executors.compile_jobs if stage == "compile" else sum(d.count for d in self.plan.devices)
        self.progress[stage] = Progress(stage, total, expected=expected, lanes=lanes)

    # -- specialize (part of planning: aot_tune.pipeline.specializing) ------------------------
    def specialize(self) -> None:
        specializing.capture(self)

    def start_workers(self) -> None:
        """Start the workers the stale tasks will need now, before doit runs the first of them:
        compile workers if any compile is stale, device workers if any bench is (they start while
        the compiles run)."""
        if self.progress.get("compile") and self.progress["compile"].total or \
                any(self.staleness.compiles_on_demand(kp) for kp in self.plan.kernels):
            self.executors.start_compiles()
        if self.progress.get("bench") and self.progress["bench"].total:
            self.executors.devices.start()

    # -- compile ---------------------------------------------------------------------------
    def queue_compile(self, kp: KernelPlan, unit: CompileUnit) -> None:
        """The compile task: queues the compile (unless a bench already ran it) and returns, so doit
        reaches the bench tasks, which stream behind the compiles (aot_tune.pipeline.streaming)."""
        with self._driver_lock:
            if self._driver is None:
                self._driver = ThreadPoolExecutor(self.executors.compile_jobs, thread_name_prefix="aot_tune-compile")
        self.claims.schedule(unit.name, lambda: self._compile(kp, unit), self._driver)

    def compile(self, kp: KernelPlan, unit: CompileUnit) -> None:
        """Compile now, unless it was queued or run before: then wait until it ended."""
        self.claims.run_once(unit.name, lambda: self._compile(kp, unit))

    def finish_compiles(self) -> str:
        """Wait for the queued compiles no bench waited for (other GPU targets than the bench
        device's, dtypes only GPUs measure, ``-a``): a run that ends has done every compile it
        planned. Returns what any of them raised (one line), or ""."""
        if self._driver is None:
            return ""
        self._driver.shutdown(wait=True)
        return self.claims.failures(self.claims.errors)

    def stop_compiles(self) -> None:
        """Drop the queued compiles no bench waited for (a run cut short); the running ones end with the pool."""
        if self._driver is not None:
            self._driver.shutdown(wait=False, cancel_futures=True)

    def _compile(self, kp: KernelPlan, unit: CompileUnit, on_demand: bool = False) -> None:
        """Compile ``unit`` and write its record; ``on_demand``: for a search that reached its config."""
        if "bench" in self.progress and self.progress["bench"].total:
            self.executors.devices.start()  # device workers start while the compiles run
        spec = kp.spec
        shape, dtype = unit.representative
        request = CompileRequest(
            kernel=spec.name, root=str(self.plan.manifest.root), kernel_ref=spec.kernel,
            launch_ref=spec.launch, inputs_ref=spec.inputs, config=unit.config.as_dict(), target=unit.target,
            shapes=(spec.shape_dict(shape),), dtypes=(dtype,), combos=spec.combo_pairs,
        )
        start, began = time.perf_counter(), time.time()
        self.stragglers.compile_started(unit.name)
        result = self.executors.compile(request, unit.config.id, may_win=lambda: self._may_win(kp, unit))
        self.stragglers.compile_ended(unit.name, spec.name, unit.target, result.seconds if result.valid else None)
        self.seconds["compile"] += time.perf_counter() - start
        self.seconds["compiling"] += result.seconds  # the compiles themselves, without the workers' start-up
        if result.status == "ok":
            self.seconds["slowest valid compile"] = max(self.seconds["slowest valid compile"], result.seconds)
        self.record_span("compile", began, time.time())
        self.compile_status[result.status] += 1
        self.compiled_on_demand += on_demand
        record = CompileRecord(unit.fingerprint, unit.config.as_dict(), unit.specialization,
                               [launch_key(s, d) for s, d in unit.launches], result)
        write_atomic(unit.output, record.to_json())
        self.progress["compile"].advance(f"{unit.kernel} {unit.target} {unit.specialization} {result.status}"
                                         + (" (on demand)" if on_demand else ""), unit.name, result.seconds)

    # -- bench -----------------------------------------------------------------------------
    def bench(self, kp: KernelPlan, unit: BenchUnit) -> StageFailure | None:
        """Exhaustive: measure the configs this shape has no measurement of yet and keep the
        others. Budgeted: run the shape's search (aot_tune.search.strategies). Then the baselines, if the
        record lacks them (alone, for records made before them); re-pick and write. A bench with
        nothing left to measure (run by ``-a``) leaves its record as it is."""
        if self.staleness.bench_done(kp, unit):
            self.progress["bench"].advance(f"{unit.kernel} {unit.dtype} {unit.shape} up to date")
            return None
        device = self.plan.device_of(unit)
        previous = self.staleness.previous_record(kp, unit)
        search_info = None
        start, began = time.perf_counter(), time.time()
        hold = DeviceHold(self.executors.devices, device)  # a local GPU, or a cluster's GPU of this model
        planned = {c.id for c in unit.configs}
        wanted = self.staleness.baselines_to_measure(kp, unit)
        make_request = lambda config: self._request(kp, unit, config, kp.spec.bench, device)  # noqa: E731
        try:
            try:
                if unit.search.exhaustive:  # the baselines ride along with the last batch of configs
                    baselines = Baselines(unit, wanted, make_request, planned.__contains__)
                    entries, fresh = self._measure_all(kp, unit, hold, previous, device, baselines)
                else:  # adaptive: compiles on demand (aot_tune.pipeline.searching); a random draw: all first
                    if not unit.compiles_on_demand:
                        waiting, _ = time.perf_counter(), list(self._landed(kp, unit, list(unit.probes), device))
                        self.seconds["waited for compiles"] += time.perf_counter() - waiting
                    else:
                        self.on_demand_candidates.update(searching.candidate_compiles(kp, unit, device))
                    entries, fresh, search_info = self._search(kp, unit, hold, previous, device)
                    baselines = Baselines(unit, wanted, make_request,
                                          lambda cid: cid in entries and not entries[cid].short_rep_ms)
                    if baselines.requests:
                        baselines.take(hold.measure_all(baselines.requests,
                                                        bench_timeout(kp.spec.bench, device.backend)))
                hits, misses = hold.counts()
                self.cache_hits, self.cache_misses = self.cache_hits + hits, self.cache_misses + misses
                info = hold.lease().info  # a task that measured nothing still takes a device for it
            finally:
                self.stragglers.finished(unit.name)
                hold.release()
                self.batches += hold.batches
                self.seconds["device held"] += hold.held_s
                for step, spent in hold.seconds.items():
                    self.seconds[f"device {step}"] += spent
        except BenchUnavailable as exc:  # no device of this model is left to run it: nothing is written
            self.progress["bench"].advance(f"{unit.kernel} {unit.dtype} {unit.shape} FAILED", unit.name, hold.held_s)
            return StageFailure(f"{unit.name}: {exc}")
        targets = kp.bench_targets(device)
        failed = self.claims.failures(cu.name for c in unit.probes for cu in kp.compiles_for(unit, c, targets))
        if failed:
            self.progress["bench"].advance(f"{unit.kernel} {unit.dtype} {unit.shape} FAILED", unit.name, hold.held_s)
            return StageFailure(f"{unit.name}: {failed}")
        elapsed = time.perf_counter() - start
        self.seconds["bench"] += elapsed
        self.record_span("bench", began, time.time())
        self.bench_status.update(m.status for m in fresh)
        self.seconds["measured"] += timed_seconds(fresh)
        self.seconds["measured baselines"] += timed_seconds(baselines.measured.values())
        measured_baselines = baselines.protos(entries)
        self.baseline_status.update(f"{role} {m.status}" for role, m in measured_baselines.items())
        # the record's seconds are the device's: not the wait for a free one or for compiles
        record = assemble_record(kp, unit, self.plan.device_of(unit), self.plan.toolchain, info, previous,
                                 entries, fresh, hold.held_s, self._previous_pick(kp, unit, previous))
        baselines_to_proto(record, unit, previous, measured_baselines)
        if search_info is not None:
            record.search.CopyFrom(search_info)
        if not record.HasField("best"):
            # Nothing to choose: fail the task, so merge and generate keep the tables as they were.
            self.progress["bench"].advance(f"{unit.kernel} {unit.dtype} {unit.shape} FAILED", unit.name, hold.held_s)
            return StageFailure(no_config_passed(unit, record))
        write_atomic(unit.output, record.SerializeToString(deterministic=True))
        note = f"{unit.kernel} {unit.dtype} {unit.shape} best {record.best.id}"
        if search_info is not None:
            origin = ranked_from(search_info, unit.shape)
            note += (f" ({search_info.strategy}{origin}: {search_info.configs_measured} of "
                     f"{search_info.candidate_count} configs, {search_info.seconds:.1f}s)")
            tally = self.searched.setdefault(unit.search.describe(origin), Counter())
            tally.update(shapes=1, measured=search_info.configs_measured, candidates=search_info.candidate_count)
            tally["seconds"] += search_info.seconds
        self.progress["bench"].advance(note, unit.name, hold.held_s)

    def _measure_all(self, kp: KernelPlan, unit: BenchUnit, hold: DeviceHold, previous: TuningRecord | None,
                     device: DeviceModel, baselines: Baselines):
        """Every planned config the previous record lacks, in pipelined batches of the configs
        whose compiles have landed (aot_tune.pipeline.streaming), the baselines with the last
        batch; the rest is kept from the previous record."""
        planned = {c.id: c for c in unit.configs}
        entries = {m.config.id: m for m in previous.measurements if m.config.id in planned} if previous else {}
        timeout_s = bench_timeout(kp.spec.bench, device.backend, previous)
        fresh: list[ConfigMeasurement] = []
        to_measure = self.staleness.configs_to_measure(kp, unit)
        left = {c.id for c in to_measure}
        tail = list(baselines.requests)
        judge = StragglerJudge(unit, entries, lambda config: kp.compiles_for(unit, config, kp.bench_targets(device)),
                               self._compile_landed, self.stragglers, kp.spec.name)
        waves = self._landed(kp, unit, to_measure, device, hold.release, judge.give_up)
        while True:
            waiting = time.perf_counter()
            wave = next(waves, None)
            self.seconds["waited for compiles"] += time.perf_counter() - waiting  # without the device
            if wave is None:
                break
            left -= judge.given_up.keys()  # stragglers that cannot win: not waited for
            wave = [c for c in wave if c.id in left]  # not taken into an earlier batch
            if not wave:
                continue
            # may wait for the device (the configs that land meanwhile join this batch), which
            # builds this shape's inputs meanwhile if it is busy with another one
            hold.lease(upcoming=self._request(kp, unit, wave[0], kp.spec.bench, device))
            taken = {c.id for c in wave}
            wave = [c for c in to_measure if c.id in taken or (c.id in left and self._all_landed(kp, unit, c, device))]
            left -= {c.id for c in wave}
            invalid = self._invalid_configs(kp, unit, wave)
            fresh += [ConfigMeasurement(c.id, "invalid", invalid[c.id]) for c in wave if c.id in invalid]
            requests = [self._request(kp, unit, c, kp.spec.bench, device) for c in wave if c.id not in invalid]
            if not left:
                requests, tail = requests + tail, []
            if not requests:
                continue
            measured, seconds = _measure_batch(hold, requests, timeout_s)
            measured = baselines.take(measured)
            for m in measured:
                entries[m.config_id] = measurement_proto(m, planned[m.config_id], seconds[m.config_id])
            fresh += measured
        fresh += [ConfigMeasurement(config_id, "invalid", why) for config_id, why in judge.given_up.items()]
        if tail:  # no config left to measure: the baselines alone
            baselines.take(hold.measure_all(tail, bench_timeout(kp.spec.bench, device.backend)))
        for m in fresh:
            if m.status == "invalid":
                entries[m.config_id] = measurement_proto(m, planned[m.config_id])
        return entries, fresh

    def _landed(self, kp: KernelPlan, unit: BenchUnit, configs: list[Config], device: DeviceModel,
                on_wait=lambda: None, give_up=lambda pending: ()):
        """``configs`` in waves as their compiles for ``device`` land (aot_tune.pipeline.streaming)."""
        return landed_waves(configs, lambda config: kp.compiles_for(unit, config, kp.bench_targets(device)),
                            self._compile_landed,
                            lambda cu: self.claims.claimed(cu.name),
                            lambda cu: self.compile(kp, cu), on_wait, give_up)

    def _may_win(self, kp: KernelPlan, unit: CompileUnit) -> bool | None:
        """Whether an exhaustive bench of this run may still pick this compile's config; None when
        none uses the compile (another GPU target, a dtype only GPUs measure; a budgeted search
        judges no straggler: it waits for the compiles of the configs it asks to measure)."""
        benches = [b for launch in unit.launches for b in kp.benches_for(launch)
                   if b.search.exhaustive and unit.target in kp.bench_targets(self.plan.device_of(b))
                   and self.staleness.measures(kp, b, unit.config)]
        return any(self.stragglers.may_still_pick(b.name, unit.config.id) for b in benches) if benches else None

    def _all_landed(self, kp: KernelPlan, unit: BenchUnit, config: Config, device: DeviceModel) -> bool:
        return all(self._compile_landed(cu) for cu in kp.compiles_for(unit, config, kp.bench_targets(device)))

    def _compile_landed(self, unit: CompileUnit) -> bool:
        """A compile claimed in this run has landed when its claimant finished; only an unclaimed
        one is read from disk (done by an earlier run), so a waiting bench's polls parse no output
        that a running compile is about to replace."""
        if self.claims.claimed(unit.name):
            return self.claims.finished(unit.name)
        return self._compile_result(unit) is not None

    def _compile_result(self, unit: CompileUnit):
        """The compile's result once it landed, read from disk once per run: a bench reads each
        of its configs' results twice (their verdicts, their kernel hashes) while it holds its
        device. A result is written once per run, by the compile's claimant."""
        result = self._compile_results.get(unit.name)
        if result is None:
            result = read_compile_result(unit.output, unit.fingerprint)
            if result is not None and (not self.claims.claimed(unit.name) or self.claims.finished(unit.name)):
                self._compile_results[unit.name] = result
        return result

    def _search(self, kp: KernelPlan, unit: BenchUnit, hold: DeviceHold, previous: TuningRecord | None,
                device: DeviceModel):
        return searching.search_shape(self, kp, unit, hold, previous, device)

    def _source_records(self, kp: KernelPlan, unit: BenchUnit) -> list[TuningRecord]:
        return searching.source_records(self, kp, unit)

    def _request(self, kp: KernelPlan, unit: BenchUnit, config: Config, settings: BenchSettings,
                 device: DeviceModel) -> BenchRequest:
        spec = kp.spec
        return BenchRequest(
            kernel=spec.name, root=str(self.plan.manifest.root), launch_ref=spec.launch,
            inputs_ref=spec.inputs, reference_ref=spec.reference,
            shape=tuple(spec.shape_dict(unit.shape).items()), dtype=unit.dtype,
            config_id=config.id, config=config.params, settings=settings,
            kernel_hashes=self._kernel_hashes(kp, unit, config, device),
            check_config=None if spec.reference else spec.check_config(unit.shape).params,
            combos=spec.combo_pairs, tolerance=spec.tolerance_for(unit.dtype),
        )

    def _invalid_configs(self, kp: KernelPlan, unit: BenchUnit, configs: list[Config]) -> dict[str, str]:
        """Configs whose compile failed for the targets this device needs (any target, on the interpreter)."""
        targets = kp.bench_targets(self.plan.device_of(unit))
        invalid = {}
        for config in configs:
            results = [self._compile_result(c) for c in kp.compiles_for(unit, config, targets)]
            known = [r for r in results if r is not None]
            if known and not any(r.valid for r in known):
                first = known[0]
                invalid[config.id] = f"{first.status}: {first.message}".strip(": ")
        return invalid

    def _kernel_hashes(self, kp: KernelPlan, unit: BenchUnit, config: Config, device: DeviceModel) -> tuple[str, ...]:
        """The Triton cache entries a GPU launch of this config uses (a remote worker gets them shipped)."""
        if device.target is None:
            return ()
        results = (self._compile_result(c) for c in kp.compiles_for(unit, config, (device.target,)))
        return tuple(sorted({h for r in results if r is not None for h in r.specializations}))

    def _previous_pick(self, kp: KernelPlan, unit: BenchUnit, previous: TuningRecord | None) -> str:
        """The config id this key's table holds now (from any earlier fingerprint): ties keep it."""
        if previous is not None and previous.HasField("best"):
            return previous.best.id
        for record in self.staleness.cache(kp).records:
            if (record.device.key, record.dtype, record_full_shape(record)) == (unit.device, unit.dtype, unit.shape):
                return record.best.id
        return ""

    # -- merge and generate: the tables (aot_tune.pipeline.publishing) -----------------------
    def merge(self, kp: KernelPlan) -> None:
        self.tables.merge(kp)

    def generate(self, kp: KernelPlan) -> StageFailure | None:
        refused = self.tables.generate(kp)
        return StageFailure(refused) if refused else None

    def generate_needed(self, kp: KernelPlan) -> bool:
        return self.tables.generate_needed(kp)


def _measure_batch(hold: DeviceHold, requests: list[BenchRequest], timeout_s: float
                   ) -> tuple[list[ConfigMeasurement], dict[str, float]]:
    """Measure ``requests`` on the held device as one pipelined batch: the measurements, and
    each one's share of the batch's wall seconds (from when the device is held: not the wait for it)."""
    hold.lease()
    began = time.perf_counter()
    measured = hold.measure_all(requests, timeout_s)
    return measured, share_out(time.perf_counter() - began, measured)


def timed_seconds(measured: Iterable[ConfigMeasurement]) -> float:
    """The GPU seconds of the timed launches of measurements taken on a GPU."""
    return sum(sum(m.times_ms) * m.launches_per_sample for m in measured if m.method in ("events", "graph")) / 1e3


def eprint(message: str) -> None:
    print(message, file=sys.__stderr__, flush=True)
