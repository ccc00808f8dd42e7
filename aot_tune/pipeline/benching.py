"""The bench stage: a bench task measures its shape's configs on a device of its model, streaming
behind their compiles (aot_tune.pipeline.streaming) or searching under a budget
(aot_tune.pipeline.searching), with the baselines; on a GPU, times its finalists again side by
side (aot_tune.select.finalists); and writes its tuning record."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Iterable

from aot_tune.bench.runner import BenchRequest, ConfigMeasurement, DeviceModel
from aot_tune.cache import record_full_shape
from aot_tune.errors import BenchUnavailable, StageFailure
from aot_tune.fileio import write_atomic
from aot_tune.manifest import BenchSettings, KernelSpec
from aot_tune.pipeline import searching
from aot_tune.pipeline.baselines import Baselines, baselines_to_proto
from aot_tune.pipeline.compiling import Compiles
from aot_tune.pipeline.plan import BenchUnit, CompileUnit, KernelPlan, Plan
from aot_tune.pipeline.recording import assemble_record, measurement_proto, no_config_passed, ranked_from
from aot_tune.pipeline.staleness import Staleness
from aot_tune.pipeline.streaming import DeviceHold, bench_timeout, landed_waves, measure_batch
from aot_tune.pipeline.stragglers import StragglerJudge
from aot_tune.runs.stats import RunStats
from aot_tune.select import FINALS_ROUNDS, FINALS_SHARE, finalists, finals_on
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement, TuningRecord
from aot_tune.workers.pools import Executors


class Benches:
    """The run's bench tasks, on the devices of ``executors``, behind the run's ``compiles``."""

    def __init__(self, plan: Plan, executors: Executors, staleness: Staleness, compiles: Compiles,
                 stats: RunStats) -> None:
        self.plan, self.executors, self.staleness = plan, executors, staleness
        self.compiles, self.stats = compiles, stats
        self.on_demand_candidates: dict[str, CompileUnit] = {}  # the compiles the budgeted searches could have asked for

    def bench(self, kp: KernelPlan, unit: BenchUnit) -> StageFailure | None:
        """Exhaustive: measure the configs this shape has no measurement of yet and keep the
        others. Budgeted: run the shape's search (aot_tune.search.strategies). Then the baselines, if the
        record lacks them (alone, for records made before them); re-pick and write. A bench with
        nothing left to measure (run by ``-a``) leaves its record as it is."""
        stats = self.stats
        if self.staleness.bench_done(kp, unit):
            stats.progress["bench"].advance(f"{unit.kernel} {unit.dtype} {unit.shape} up to date")
            return None
        device = self.plan.device_of(unit)
        previous = self.staleness.previous_record(kp, unit)
        search_info = None
        start, began = time.perf_counter(), time.time()
        # a local GPU, or a cluster's GPU of this model; the progress estimate hears its device time
        hold = DeviceHold(self.executors.devices, device, partial(stats.progress["bench"].spent, unit.name))
        planned = {c.id for c in unit.configs}
        wanted = self.staleness.baselines_to_measure(kp, unit)
        make_request = lambda config: self.request(kp, unit, config, kp.spec.bench, device)  # noqa: E731
        try:
            try:
                self._await_reference(kp, unit, device, hold)
                if unit.search.exhaustive:  # the baselines ride along with the last batch of configs
                    baselines = Baselines(unit, wanted, make_request, planned.__contains__)
                    entries, fresh = self._measure_all(kp, unit, hold, previous, device, baselines)
                else:  # adaptive: compiles on demand (aot_tune.pipeline.searching); a random draw: all first
                    if not unit.compiles_on_demand:
                        for _ in self._landed(kp, unit, list(unit.probes), device):
                            pass
                    else:
                        self.on_demand_candidates.update(searching.candidate_compiles(kp, unit, device))
                    entries, fresh, search_info = searching.search_shape(
                        self.compiles, kp, unit, hold, previous, device, self.request,
                        searching.source_records(self.staleness, kp, unit))
                    baselines = Baselines(unit, wanted, make_request,
                                          lambda cid: cid in entries and not entries[cid].short_rep_ms)
                    if baselines.requests:
                        baselines.take(hold.measure_all(baselines.requests,
                                                        bench_timeout(kp.spec.bench, device.backend)))
                finals = self._finals(kp, unit, hold, entries, fresh, device, previous)
                hits, misses = hold.counts()
                stats.cache_hits, stats.cache_misses = stats.cache_hits + hits, stats.cache_misses + misses
                info = hold.lease().info  # a task that measured nothing still takes a device for it
            finally:
                self.compiles.stragglers.finished(unit.name)
                hold.release()
                stats.batches += hold.batches
                stats.seconds["device held"] += hold.held_s
                for step, spent in hold.seconds.items():
                    stats.seconds[f"device {step}"] += spent
        except BenchUnavailable as exc:  # no device of this model is left to run it: nothing is written
            stats.progress["bench"].advance(f"{unit.kernel} {unit.dtype} {unit.shape} FAILED", unit.name, hold.held_s)
            return StageFailure(f"{unit.name}: {exc}")
        targets = kp.bench_targets(device)
        failed = self.compiles.claims.failures(cu.name for c in unit.probes for cu in kp.compiles_for(unit, c, targets))
        if failed:
            stats.progress["bench"].advance(f"{unit.kernel} {unit.dtype} {unit.shape} FAILED", unit.name, hold.held_s)
            return StageFailure(f"{unit.name}: {failed}")
        elapsed = time.perf_counter() - start
        stats.seconds["bench"] += elapsed
        stats.span("bench", began, time.time())
        if hold.first_asked is not None:  # from its first batch on: the stage's wall on its devices
            stats.span("bench batches", hold.first_asked, time.time())
        stats.bench_status.update(m.status for m in fresh)
        stats.seconds["measured"] += timed_seconds(fresh) + timed_seconds(finals)
        if finals:
            stats.finals.update(shapes=1, configs=len(finals))
        stats.seconds["measured baselines"] += timed_seconds(baselines.measured.values())
        measured_baselines = baselines.protos(entries)
        stats.baseline_status.update(f"{role} {m.status}" for role, m in measured_baselines.items())
        # the record's seconds are the device's: not the wait for a free one or for compiles
        record = assemble_record(kp, unit, self.plan.device_of(unit), self.plan.toolchain, info, previous,
                                 entries, fresh, hold.held_s, self._previous_pick(kp, unit, previous))
        baselines_to_proto(record, unit, previous, measured_baselines)
        if search_info is not None:
            record.search.CopyFrom(search_info)
        if not record.HasField("best"):
            # Nothing to choose: fail the task, so merge and generate keep the tables as they were.
            stats.progress["bench"].advance(f"{unit.kernel} {unit.dtype} {unit.shape} FAILED", unit.name, hold.held_s)
            return StageFailure(no_config_passed(unit, record))
        write_atomic(unit.output, record.SerializeToString(deterministic=True))
        note = f"{unit.kernel} {unit.dtype} {unit.shape} best {record.best.id}"
        if search_info is not None:
            origin = ranked_from(search_info, unit.shape)
            note += (f" ({search_info.strategy}{origin}: {search_info.configs_measured} of "
                     f"{search_info.candidate_count} configs, {search_info.seconds:.1f}s)")
            tally = stats.searched.setdefault(unit.search.describe(origin), Counter())
            tally.update(shapes=1, measured=search_info.configs_measured, candidates=search_info.candidate_count)
            tally["seconds"] += search_info.seconds
        stats.progress["bench"].advance(note, unit.name, hold.held_s)

    def _await_reference(self, kp: KernelPlan, unit: BenchUnit, device: DeviceModel, hold: DeviceHold) -> None:
        """Wait, without a device, for the compiles of the config the shape's reference launches
        (running it here if nobody queued it): every check compares with the reference, and a
        device worker that finds it uncompiled compiles it itself, with the device idle."""
        if unit.reference_config is None:
            return
        next(self._landed(kp, unit, [unit.reference_config], device, hold.release), None)

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
                               self.compiles.landed, self.compiles.stragglers, kp.spec.name)
        waves = self._landed(kp, unit, to_measure, device, hold.release, judge.give_up)

        def take(wave: set[str]) -> list[BenchRequest]:
            """The requests of the configs of ``wave`` and of every other one whose compiles have
            landed by now, taken out of ``left``; the baselines with them once none is left. An
            invalid config is a result at once."""
            nonlocal tail
            left.difference_update(judge.given_up)  # stragglers that cannot win: not waited for
            landed = [c for c in to_measure
                      if c.id in left and (c.id in wave or self.compiles.all_landed(kp, unit, c, device))]
            left.difference_update(c.id for c in landed)
            invalid = self.compiles.invalid_configs(kp, unit, landed)
            fresh.extend(ConfigMeasurement(c.id, "invalid", invalid[c.id]) for c in landed if c.id in invalid)
            requests = [self.request(kp, unit, c, kp.spec.bench, device) for c in landed if c.id not in invalid]
            if not left:
                requests, tail = requests + tail, []
            return requests

        looked = -1  # the run's compile landings when ``more`` last looked

        def more() -> list[BenchRequest]:
            """What landed since the last look, asked after each result of a running batch: the
            scan of the pending configs only where a compile finished meanwhile."""
            nonlocal looked
            landings = self.compiles.claims.landings
            if not left or landings == looked:
                return []
            looked = landings
            return take(set())

        while True:
            wave = next(waves, None)  # waits without the device
            if wave is None:
                break
            wave = [c for c in wave if c.id in left and c.id not in judge.given_up]  # not taken into an earlier batch
            if not wave:
                continue
            # may wait for the device (the configs that land meanwhile join this batch), which
            # builds this shape's inputs meanwhile if it is busy with another one
            hold.lease(upcoming=self.request(kp, unit, wave[0], kp.spec.bench, device))
            looked = self.compiles.claims.landings  # read before take() looks: none is missed
            requests = take({c.id for c in wave})
            if not requests:
                continue
            # the configs that land while it runs join the batch: a batch of their own would
            # start on an idle device (aot_tune.bench.engine.pipeline)
            measured, seconds = measure_batch(hold, requests, timeout_s, more=more)
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

    def _finals(self, kp: KernelPlan, unit: BenchUnit, hold: DeviceHold, entries: dict[str, Measurement],
                fresh: list[ConfigMeasurement], device: DeviceModel, previous: TuningRecord | None
                ) -> list[ConfigMeasurement]:
        """On a GPU, the shape's finalists (aot_tune.select.finalists) timed again side by side,
        interleaved, in one batch; each one's entry takes that timing, its seconds added. A
        finalist that fails now keeps the failure. Returns what the batch measured: nothing where
        the task measured no config (``fresh``: baselines alone, a search whose probes the
        earlier record answered): its entries and their finals are that record's."""
        planned = {c.id: c for c in unit.configs}
        chosen = [m.config.id for m in finalists(entries.values()) if m.config.id in planned]
        if not finals_on(device.backend) or len(chosen) < 2 or not any(m.ok for m in fresh):
            return []
        settings = replace(kp.spec.bench, rep_ms=kp.spec.bench.rep_ms * FINALS_SHARE)
        requests = [replace(self.request(kp, unit, planned[cid], settings, device), final_rounds=FINALS_ROUNDS)
                    for cid in chosen]
        measured, seconds = measure_batch(hold, requests, bench_timeout(kp.spec.bench, device.backend, previous))
        for m in measured:
            entry = measurement_proto(m, planned[m.config_id], entries[m.config_id].seconds + seconds[m.config_id])
            entry.finalist = m.ok
            entries[m.config_id] = entry
        return measured

    def _landed(self, kp: KernelPlan, unit: BenchUnit, configs: list[Config], device: DeviceModel,
                on_wait=lambda: None, give_up=lambda pending: ()):
        """``configs`` in waves as their compiles for ``device`` land (aot_tune.pipeline.streaming)."""
        return landed_waves(configs, lambda config: kp.compiles_for(unit, config, kp.bench_targets(device)),
                            self.compiles.landed,
                            lambda cu: self.compiles.claims.claimed(cu.name),
                            lambda cu: self.compiles.run_once(kp, cu), on_wait, give_up,
                            lambda units, timeout_s: self.compiles.claims.wait_for_any([cu.name for cu in units],
                                                                                       timeout_s))

    def request(self, kp: KernelPlan, unit: BenchUnit, config: Config, settings: BenchSettings,
                device: DeviceModel) -> BenchRequest:
        return bench_request(kp.spec, self.plan.manifest.root, unit.shape, unit.dtype, config, settings,
                             self.compiles.kernel_hashes(kp, unit, config, device))

    def _previous_pick(self, kp: KernelPlan, unit: BenchUnit, previous: TuningRecord | None) -> str:
        """The config id this key's table holds now (from any earlier fingerprint): ties keep it."""
        if previous is not None and previous.HasField("best"):
            return previous.best.id
        for record in self.staleness.cache(kp).records:
            if (record.device.key, record.dtype, record_full_shape(record)) == (unit.device, unit.dtype, unit.shape):
                return record.best.id
        return ""


def bench_request(spec: KernelSpec, root: Path, shape: tuple, dtype: str, config: Config, settings: BenchSettings,
                  kernel_hashes: tuple[str, ...] = ()) -> BenchRequest:
    """The request that measures ``config`` of the manifest kernel ``spec`` (its project at ``root``)
    on one (shape, dtype); ``kernel_hashes``: its compiles, for a worker on another machine."""
    return BenchRequest(
        kernel=spec.name, root=str(root), launch_ref=spec.launch, inputs_ref=spec.inputs,
        reference_ref=spec.reference, shape=tuple(spec.shape_dict(shape).items()), dtype=dtype,
        config_id=config.id, config=config.params, settings=settings, kernel_hashes=kernel_hashes,
        check_config=None if spec.reference else spec.check_config(shape).params,
        combos=spec.combo_pairs, tolerance=spec.tolerance_for(dtype),
    )


def timed_seconds(measured: Iterable[ConfigMeasurement]) -> float:
    """The GPU seconds of the timed launches of measurements taken on a GPU."""
    return sum(sum(m.times_ms) * m.launches_per_sample for m in measured if m.method in ("events", "graph")) / 1e3
