"""The work of each stage, one method per doit task: specialize, compile, bench, merge, generate.

A ``TuneSession`` is the run's shared state: its plan, worker pools and statistics, and the
stages (``specializing``, ``compiling``, ``benching``, ``publishing``) it hands each task to.
Each stage reads the durable outputs of the stage before it and writes its own atomically, so
the files, not doit's database, are the record of what is done; what the run measures goes to
its ``RunStats`` (aot_tune.runs.stats), which the summary and the run log read.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from aot_tune.build import loading
from aot_tune.errors import StageFailure
from aot_tune.pipeline import specializing
from aot_tune.pipeline.benching import Benches
from aot_tune.pipeline.compiling import Compiles
from aot_tune.pipeline.plan import BenchUnit, CompileUnit, KernelPlan, Plan
from aot_tune.pipeline.publishing import Tables
from aot_tune.pipeline.staleness import Staleness
from aot_tune.runs.progress import Progress, RunClock
from aot_tune.runs.stats import RunStats
from aot_tune import forking
from aot_tune.workers.pools import Executors

if TYPE_CHECKING:
    from aot_tune.pipeline.forecast import Forecast


class TuneSession:
    def __init__(self, plan: Plan, executors: Executors, staleness: Staleness | None = None) -> None:
        self.plan = plan
        self.executors = executors
        self.staleness = staleness or Staleness(plan)
        self.stats = RunStats(device=plan.device.key, backend=plan.device.backend,
                              kernels=[kp.spec.name for kp in plan.kernels], devices=plan.device.count,
                              cuda=any(d.backend == "cuda" for d in plan.devices),
                              compile_jobs=executors.compile_jobs)
        self.compiles = Compiles(plan, executors, self.staleness, self.stats)
        self.benches = Benches(plan, executors, self.staleness, self.compiles, self.stats)
        self.tables = Tables(plan, self.staleness)
        self.forecast: Forecast | None = None  # the run's prediction, made before its first compile (None: a no-op)
        executors.kernel_imports = tuple((str(plan.manifest.root), ref) for kp in plan.kernels
                                         for ref in plan.worker_refs(kp))
        executors.compiles_need_torch = plan.compiles_need_torch()
        self._imported_before = loading.IMPORTED["seconds"]  # this process's imports of project modules
        self._clock: RunClock | None = None  # the run's estimate of what is left, from the forecast

    @property
    def progress(self) -> dict[str, Progress]:
        return self.stats.progress

    def start_stage(self, stage: str, total: int, units: Iterable[CompileUnit | BenchUnit] = ()) -> None:
        """Set the number of tasks the loader found stale (the count grows if more turn up); with
        those ``units``, the progress lines estimate what is left from the run's prediction."""
        expected, measurements = {}, {}
        if self.forecast is not None:
            units = list(units)
            expected = {u.name: s for u in units if (s := self.forecast.task_seconds(u)) is not None}
            measurements = {u.name: n for u in units if isinstance(u, BenchUnit)
                            and (n := self.forecast.task_measurements(u))}
        lanes = self.executors.compile_jobs if stage == "compile" else sum(d.count for d in self.plan.devices)
        if self.forecast is not None and self._clock is None:
            forecast = self.forecast
            self._clock = RunClock(forecast.bench_s, forecast.rest_after_s, forecast.device_wait_s,
                                   forecast.bench_tail_s)
        self.progress[stage] = Progress(stage, total, expected=expected, lanes=lanes, run=self._clock,
                                        measurements=measurements)

    def specialize(self) -> None:
        """Part of planning (aot_tune.pipeline.specializing), before doit gets the tasks. Where a
        bench is stale, the device workers start first: their start-up (CUDA, the kernels' imports)
        then overlaps the captures and the compiles rather than the first bench."""
        if any(self.staleness.benches_stale(kp) for kp in self.plan.kernels):
            self.executors.devices.start()
            self.executors.precompile_checks()
        specializing.capture(self.plan, self.staleness, self.executors, self.stats)

    def start_workers(self) -> None:
        """Start the workers the stale tasks will need now, before doit runs the first of them:
        compile workers if any compile is stale, device workers if any bench is (they start while
        the compiles run)."""
        if self.progress.get("compile") and self.progress["compile"].total or \
                any(self.staleness.compiles_on_demand(kp) for kp in self.plan.kernels):
            self.executors.start_compiles()
        if self.progress.get("bench") and self.progress["bench"].total:
            self.executors.devices.start()

    def queue_compile(self, kp: KernelPlan, unit: CompileUnit) -> None:
        self.compiles.queue(kp, unit, self.forecast.task_seconds(unit) if self.forecast is not None else None)

    def compile(self, kp: KernelPlan, unit: CompileUnit) -> None:
        self.compiles.run_once(kp, unit)

    def finish_compiles(self) -> str:
        return self.compiles.finish()

    def stop_compiles(self) -> None:
        self.compiles.stop()

    def bench(self, kp: KernelPlan, unit: BenchUnit) -> StageFailure | None:
        return self.benches.bench(kp, unit)

    def merge(self, kp: KernelPlan) -> None:
        self.tables.merge(kp)

    def generate(self, kp: KernelPlan) -> StageFailure | None:
        refused = self.tables.generate(kp)
        return StageFailure(refused) if refused else None

    def generate_needed(self, kp: KernelPlan) -> bool:
        return self.tables.generate_needed(kp)

    def ended(self) -> RunStats:
        """The run's statistics, with what is known only once its tasks ended: the compiles its
        searches never needed, the stragglers given up, the workers' start-up and the prediction."""
        stats = self.stats
        candidates = self.benches.on_demand_candidates.values()
        stats.on_demand_candidates = len(candidates)
        stats.on_demand_never = sum(1 for unit in candidates if not self.compiles.landed(unit))
        stats.given_up = self.compiles.stragglers.given_up
        pool = self.executors.devices
        stats.devices_started_at, stats.devices_ready_at = pool.started_at, pool.ready_at
        stats.fork_server_ready_at = forking.ready_at
        if self.forecast is not None:
            stats.predicted_s, stats.predicted = self.forecast.predicted_s, self.forecast.parts()
            stats.estimates = dict(self.forecast.estimates)
        stats.toolchain = f"triton {self.plan.toolchain.triton}, torch {self.plan.toolchain.torch}"
        main_imports = loading.IMPORTED["seconds"] - self._imported_before
        if main_imports > 0:
            stats.seconds["main imports"] += main_imports
        return stats
