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

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from aot_tune.bench.runner import ConfigMeasurement, DeviceModel
from aot_tune.pipeline.plan import BenchUnit, KernelPlan
from aot_tune.pipeline.recording import measurement_proto, search_proto
from aot_tune.pipeline.streaming import DeviceHold
from aot_tune.search import strategies as search
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement, TuningRecord

if TYPE_CHECKING:
    from aot_tune.pipeline.session import TuneSession


def compile_on_demand(session: TuneSession, kp: KernelPlan, unit: BenchUnit, configs: list[Config],
                      device: DeviceModel, hold: DeviceHold) -> None:
    """Have the compiles of ``configs`` for this bench's targets landed: run the unclaimed ones
    now, side by side, and wait for the rest, without the device."""
    needed = {cu.name: cu for config in configs for cu in kp.compiles_for(unit, config, kp.bench_targets(device))
              if not session._compile_landed(cu)}
    if not needed:
        return
    hold.release()  # another bench measures meanwhile
    waiting = time.perf_counter()
    session.claims.run_all([(name, lambda cu=cu: session._compile(kp, cu, on_demand=True))
                            for name, cu in needed.items()], session.executors.compile_jobs)
    session.seconds["waited for compiles"] += time.perf_counter() - waiting


def search_shape(session: TuneSession, kp: KernelPlan, unit: BenchUnit, hold: DeviceHold,
                 previous: TuningRecord | None, device: DeviceModel):
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
            compile_on_demand(session, kp, unit, configs, device, hold)
        return session._invalid_configs(kp, unit, configs)

    def measure_batch(probes) -> list[Measurement]:
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
            settings = replace(bench, rep_ms=short_rep_ms) if short_rep_ms else bench
            requests.append(session._request(kp, unit, config, settings, device))
            lengths[config.id] = (config, short_rep_ms)
        if requests:
            from aot_tune.pipeline.session import _measure_batch, bench_timeout

            timeout_s = bench_timeout(kp.spec.bench, device.backend, previous)
            measured, seconds = _measure_batch(hold, requests, timeout_s)
            for m in measured:
                config, short_rep_ms = lengths[m.config_id]
                fresh.append(m)
                answers[m.config_id] = measurement_proto(m, config, seconds[m.config_id], short_rep_ms)
        return [answers[config.id] for config, _ in probes]

    def measure(config: Config, share: float) -> Measurement:
        return measure_batch([(config, share)])[0]

    sources = [search.source_from_record(r, unit.shape) for r in session._source_records(kp, unit)]
    result = search.run_search(unit.search, unit.configs, verdicts, measure, sources, measure_batch=measure_batch)
    return result.measurements, fresh, search_proto(unit, result, reused)


def source_records(session: TuneSession, kp: KernelPlan, unit: BenchUnit) -> list[TuningRecord]:
    """The finished records of the shapes seeding this one (their bench tasks ran first); for
    ``ranked``, the cache's records of other devices and fingerprints (aot_tune.search.ranked)."""
    if unit.search.strategy == "ranked":
        return session.staleness.ranked_sources(kp, unit)
    records = []
    for shape in unit.sources:
        source = kp.bench_of((shape, unit.dtype), unit.device)
        record = session.staleness.previous_record(kp, source) if source is not None else None
        if record is not None:
            records.append(record)
    return records


def candidate_compiles(kp: KernelPlan, unit: BenchUnit, device: DeviceModel) -> dict:
    """The compiles (by name) an on-demand search of ``unit`` could have asked for: its every
    candidate's, for the bench's targets."""
    targets = kp.bench_targets(device)
    return {cu.name: cu for config in unit.configs for cu in kp.compiles_for(unit, config, targets)}
