"""The compile stage: each compile of a run runs once on the compile workers, queued by its
compile task or claimed by the first bench or search that needs it (aot_tune.pipeline.streaming),
and writes its record; and what the benches read of the compiles that landed."""
from __future__ import annotations

import threading
import time
from functools import cached_property
from typing import Iterable

from aot_tune.build.compile import (CompileRecord, CompileRequest, compile_time_estimate, compile_weight,
                                   read_compile_result)
from aot_tune.build.specialize import launch_key
from aot_tune.bench.runner import DeviceModel
from aot_tune.fileio import write_atomic
from aot_tune.pipeline.compile_queue import CompileQueue
from aot_tune.pipeline.plan import BenchUnit, CompileUnit, KernelPlan, Plan
from aot_tune.pipeline.staleness import Staleness
from aot_tune.pipeline.streaming import CompileClaims
from aot_tune.pipeline.stragglers import Stragglers
from aot_tune.runs.stats import RunStats
from aot_tune.space import Config
from aot_tune.workers.pools import Executors


class Compiles:
    """The run's compiles: who claimed each, the driver that runs the queued ones, the stragglers,
    and each landed result (read from disk once per run)."""

    def __init__(self, plan: Plan, executors: Executors, staleness: Staleness, stats: RunStats) -> None:
        self.plan, self.executors, self.staleness, self.stats = plan, executors, staleness, stats
        self.claims = CompileClaims()
        self.stragglers = Stragglers()  # compiles in flight, and the benches' verdicts on the slow ones
        self._results: dict[str, object] = {}  # compile unit -> its landed result (see result)
        self._driver: CompileQueue | None = None  # runs the queued compiles (see queue)
        self._driver_lock = threading.Lock()

    @cached_property
    def references(self) -> frozenset[str]:
        """The compile units of the configs the bench units' references launch, for their devices'
        targets: every check of a shape compares with its reference, and a reference whose compile
        has not landed is compiled by the device worker itself, on the bench's critical path (about
        1 s a kernel with fla-core's)."""
        plan = self.plan
        return frozenset(cu.name for kp in plan.kernels for unit in kp.bench_units if unit.reference_config is not None
                         for cu in kp.compiles_for(unit, unit.reference_config, kp.bench_targets(plan.device_of(unit))))

    def queue(self, kp: KernelPlan, unit: CompileUnit, predicted_s: float | None = None) -> None:
        """The compile task: queues the compile (unless a bench already ran it) and returns, so doit
        reaches the bench tasks, which stream behind the compiles (aot_tune.pipeline.streaming).
        The queue picks the order (aot_tune.pipeline.compile_queue); ``predicted_s``: the run's
        prediction of this compile."""
        with self._driver_lock:
            if self._driver is None:
                self._driver = CompileQueue(self.executors.compile_jobs)
        driver = self._driver
        weight = compile_weight(compile_time_estimate(unit.config.as_dict(), kp.spec.compile_cost)[0])
        self.claims.schedule(unit.name, lambda: self.run(kp, unit, weight=weight),
                             lambda job: driver.put(unit.name, kp.spec.name, weight, job, predicted_s or 0.0,
                                                    unit.name in self.references))

    def run_once(self, kp: KernelPlan, unit: CompileUnit) -> None:
        """Compile now, unless it was queued or run before: then wait until it ended."""
        self.claims.run_once(unit.name, lambda: self.run(kp, unit))

    def run_now(self, kp: KernelPlan, units: Iterable[CompileUnit]) -> None:
        """Compile ``units`` side by side now (a search reached their configs); wait for those
        another task claimed."""
        self.claims.run_all([(cu.name, lambda cu=cu: self.run(kp, cu, on_demand=True)) for cu in units],
                            self.executors.compile_jobs)

    def finish(self) -> str:
        """Wait for the queued compiles no bench waited for (other GPU targets than the bench
        device's, dtypes only GPUs measure, ``-a``): a run that ends has done every compile it
        planned. Returns what any of them raised (one line), or ""."""
        if self._driver is None:
            return ""
        self._driver.shutdown()
        return self.claims.failures(self.claims.errors)

    def stop(self) -> None:
        """Drop the queued compiles no bench waited for (a run cut short); the running ones end with the pool."""
        if self._driver is not None:
            self._driver.shutdown(wait=False, cancel=True)

    def run(self, kp: KernelPlan, unit: CompileUnit, on_demand: bool = False, weight: float | None = None) -> None:
        """Compile ``unit`` and write its record; ``on_demand``: for a search that reached its config;
        ``weight``: queued with it (the queue learns the kernel's pace from its valid compiles)."""
        stats = self.stats
        if "bench" in stats.progress and stats.progress["bench"].total:
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
        stats.progress["compile"].start(unit.name)
        result = self.executors.compile(request, unit.config.id, may_win=lambda: self._may_win(kp, unit),
                                        lost=lambda: self._lost(kp, unit))
        self.stragglers.compile_ended(unit.name, spec.name, unit.target, result.seconds if result.valid else None)
        stats.seconds["compile"] += time.perf_counter() - start
        stats.seconds["compiling"] += result.seconds  # the compiles themselves, without the workers' start-up
        if result.status == "ok":
            if weight is not None and self._driver is not None:
                self._driver.finished(spec.name, weight, result.seconds)
            stats.seconds["slowest valid compile"] = max(stats.seconds["slowest valid compile"], result.seconds)
        stats.span("compile", began, time.time())
        stats.compile_status[result.status] += 1
        stats.compiled_on_demand += on_demand
        record = CompileRecord(unit.fingerprint, unit.config.as_dict(), unit.specialization,
                               [launch_key(s, d) for s, d in unit.launches], result)
        write_atomic(unit.output, record.to_json())
        stats.progress["compile"].advance(f"{unit.kernel} {unit.target} {unit.specialization} {result.status}"
                                          + (" (on demand)" if on_demand else ""), unit.name, result.seconds)

    def _may_win(self, kp: KernelPlan, unit: CompileUnit) -> bool | None:
        """Whether an exhaustive bench of this run may still pick this compile's config; None when
        none uses the compile (another GPU target, a dtype only GPUs measure; a budgeted search
        judges no straggler: it waits for the compiles of the configs it asks to measure)."""
        benches = [b for b in self._exhaustive_benches(kp, unit) if self.staleness.measures(kp, b, unit.config)]
        return any(self.stragglers.may_still_pick(b.name, unit.config.id) for b in benches) if benches else None

    def _lost(self, kp: KernelPlan, unit: CompileUnit) -> bool:
        """Whether the benches of this run that needed this compile's config all gave it up as a
        straggler that cannot win: nothing will read the compile, so it is abandoned now. A bench
        that still has the config to measure (waiting for it, or failed before it judged it:
        its next run needs it) keeps it; one that measured it in an earlier run has no say."""
        gave_up = False
        for bench in self._exhaustive_benches(kp, unit):
            if self.stragglers.gave_up(bench.name, unit.config.id):
                gave_up = True
            elif self.staleness.measures(kp, bench, unit.config):
                return False
        return gave_up

    def _exhaustive_benches(self, kp: KernelPlan, unit: CompileUnit) -> list:
        """The exhaustive benches of this run's plan on this compile's target that use its launches
        (a bench's record, once written, holds a given-up config: ``staleness.measures`` is then
        False for it)."""
        return [b for launch in unit.launches for b in kp.benches_for(launch)
                if b.search.exhaustive and unit.target in kp.bench_targets(self.plan.device_of(b))]

    def landed(self, unit: CompileUnit) -> bool:
        """A compile claimed in this run has landed when its claimant finished; only an unclaimed
        one is read from disk (done by an earlier run), so a waiting bench's polls parse no output
        that a running compile is about to replace."""
        if self.claims.claimed(unit.name):
            return self.claims.finished(unit.name)
        return self.result(unit) is not None

    def all_landed(self, kp: KernelPlan, unit: BenchUnit, config: Config, device: DeviceModel) -> bool:
        return all(self.landed(cu) for cu in kp.compiles_for(unit, config, kp.bench_targets(device)))

    def result(self, unit: CompileUnit):
        """The compile's result once it landed, read from disk once per run: a bench reads each
        of its configs' results twice (their verdicts, their kernel hashes) while it holds its
        device. A result is written once per run, by the compile's claimant."""
        result = self._results.get(unit.name)
        if result is None:
            result = read_compile_result(unit.output, unit.fingerprint)
            if result is not None and (not self.claims.claimed(unit.name) or self.claims.finished(unit.name)):
                self._results[unit.name] = result
        return result

    def invalid_configs(self, kp: KernelPlan, unit: BenchUnit, configs: list[Config]) -> dict[str, str]:
        """Configs whose compile failed for the targets this device needs (any target, on the interpreter)."""
        targets = kp.bench_targets(self.plan.device_of(unit))
        invalid = {}
        for config in configs:
            results = [self.result(c) for c in kp.compiles_for(unit, config, targets)]
            known = [r for r in results if r is not None]
            if known and not any(r.valid for r in known):
                first = known[0]
                invalid[config.id] = f"{first.status}: {first.message}".strip(": ")
        return invalid

    def kernel_hashes(self, kp: KernelPlan, unit: BenchUnit, config: Config, device: DeviceModel) -> tuple[str, ...]:
        """The Triton cache entries a GPU launch of this config uses (a remote worker gets them shipped)."""
        if device.target is None:
            return ()
        results = (self.result(c) for c in kp.compiles_for(unit, config, (device.target,)))
        return tuple(sorted({h for r in results if r is not None for h in r.specializations}))
