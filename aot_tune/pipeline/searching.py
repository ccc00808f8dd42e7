"""A bench task's budgeted search (aot_tune.search.strategies) on its device, and the compiles it
runs on demand.

An adaptive search (``BenchUnit.compiles_on_demand``) starts without waiting for any compile:
the compile stage does not build its candidates. When it asks to measure a batch of configs, the
bench first gets their compiles for its targets (``compile_on_demand``): those no task of the run
claimed yet it claims and runs at once, side by side on the compile workers; those another bench
(or the compile stage) claimed it waits for; those an earlier run compiled are read from disk.
Each writes its compile record as a compile task does, so the next run reads it. Then the batch's
verdicts are known: a config that failed to compile is an invalid measurement, free (the search
carries on past it, aot_tune.search.strategies). While it waits for compiles the bench lets its
device go, so that another bench measures meanwhile. A ``random`` draw under a configs budget is
known up front: the compile stage builds it, and the bench waits for it before it starts.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from aot_tune.bench.runner import BenchRequest, ConfigMeasurement, DeviceModel
from aot_tune.manifest import BenchSettings
from aot_tune.pipeline.compiling import Compiles
from aot_tune.pipeline.plan import BenchUnit, KernelPlan
from aot_tune.pipeline.recording import measurement_proto, search_proto
from aot_tune.pipeline.staleness import Staleness
from aot_tune.pipeline.streaming import DeviceHold, bench_timeout, measure_batch
from aot_tune.search import strategies as search
from aot_tune.select import finals_on
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement, TuningRecord

#: (kp, unit, config, settings, device) -> the bench request of that config (aot_tune.pipeline.benching).
MakeRequest = Callable[[KernelPlan, BenchUnit, Config, BenchSettings, DeviceModel], BenchRequest]


def compile_on_demand(compiles: Compiles, kp: KernelPlan, unit: BenchUnit, configs: list[Config],
                      device: DeviceModel, hold: DeviceHold) -> None:
    """Have the compiles of ``configs`` for this bench's targets landed: run the unclaimed ones
    now, side by side, and wait for the rest, without the device."""
    needed = {cu.name: cu for config in configs for cu in kp.compiles_for(unit, config, kp.bench_targets(device))
              if not compiles.landed(cu)}
    if not needed:
        return
    hold.release()  # another bench measures meanwhile
    compiles.run_now(kp, needed.values())


def search_shape(compiles: Compiles, kp: KernelPlan, unit: BenchUnit, hold: DeviceHold,
                 previous: TuningRecord | None, device: DeviceModel, request: MakeRequest,
                 sources: list[TuningRecord]):
    """Run the unit's budgeted search: (entries by config id, fresh measurements, the record's
    search message). The configs it chooses together (the surrogate's batches) are measured as
    one pipelined batch, like the exhaustive path's. A probe the previous record under this
    fingerprint already answers (same config, same timing length) is taken from it: after a
    change of the candidates the search replays, and only its new probes reach the GPU."""
    bench = kp.spec.bench
    earlier = {(m.config.id, m.short_rep_ms): m for m in previous.measurements
               if m.status != "invalid"} if previous else {}
    fresh: list[ConfigMeasurement] = []
    reused = 0

    def verdicts(configs) -> dict[str, str]:
        """The configs whose compile failed, compiling them first where need be."""
        configs = list(configs)
        if unit.compiles_on_demand:
            compile_on_demand(compiles, kp, unit, configs, device, hold)
        return compiles.invalid_configs(kp, unit, configs)

    def measure_probes(probes) -> list[Measurement]:
        """The probes the previous record lacks as one pipelined batch on the device, its wall
        time shared out as the exhaustive path shares it; the others taken from that record."""
        nonlocal reused
        answers: dict[str, Measurement] = {}
        requests, lengths = [], {}
        for config, share in probes:
            short_rep_ms = bench.rep_ms * share if share < 1 else 0.0
            known = earlier.get((config.id, short_rep_ms))
            if known is not None:
                reused += 1
                answers[config.id] = known
                continue
            settings = bench.screening(share)
            requests.append(replace(request(kp, unit, config, settings, device), share=min(share, 1.0)))
            lengths[config.id] = (config, short_rep_ms)
        if requests:
            timeout_s = bench_timeout(kp.spec.bench, device.backend, previous)
            measured, seconds = measure_batch(hold, requests, timeout_s)
            for m in measured:
                config, short_rep_ms = lengths[m.config_id]
                fresh.append(m)
                answers[m.config_id] = measurement_proto(m, config, seconds[m.config_id], short_rep_ms)
        return [answers[config.id] for config, _ in probes]

    def measure(config: Config, share: float) -> Measurement:
        return measure_probes([(config, share)])[0]

    seeds = [search.source_from_record(r, unit.shape) for r in sources]
    result = search.run_search(unit.search, unit.configs, verdicts, measure, seeds, measure_batch=measure_probes,
                               finals=finals_on(device.backend))
    return result.measurements, fresh, search_proto(unit, result, reused)


def source_records(staleness: Staleness, kp: KernelPlan, unit: BenchUnit) -> list[TuningRecord]:
    """The finished records of the shapes seeding this one (their bench tasks ran first); for
    ``ranked``, the cache's records of other devices and fingerprints (aot_tune.search.ranked)."""
    if unit.search.strategy == "ranked":
        return staleness.ranked_sources(kp, unit)
    records = []
    for shape in unit.sources:
        source = kp.bench_of((shape, unit.dtype), unit.device)
        record = staleness.previous_record(kp, source) if source is not None else None
        if record is not None:
            records.append(record)
    return records


def candidate_compiles(kp: KernelPlan, unit: BenchUnit, device: DeviceModel) -> dict:
    """The compiles (by name) an on-demand search of ``unit`` could have asked for: its every
    candidate's, for the bench's targets."""
    targets = kp.bench_targets(device)
    return {cu.name: cu for config in unit.configs for cu in kp.compiles_for(unit, config, targets)}
