"""Turning a bench task's measurements into its tuning record: the protobuf messages of each
measurement, its baselines and its search, and the record itself with the pick."""
from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timezone

from aot_tune import cache as cache_io
from aot_tune.cache import record_shape, set_record_bench_dims, set_record_shape
from aot_tune.bench.nvml import ClockReading
from aot_tune.bench.runner import ConfigMeasurement, DeviceInfo, DeviceModel
from aot_tune.fingerprint import Toolchain
from aot_tune.pipeline.plan import BenchUnit, KernelPlan
from aot_tune.runs import shape_label
from aot_tune.search import strategies as search
from aot_tune.search.budget import SearchResult
from aot_tune.select import choose
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement, Search, TuningRecord


def assemble_record(kp: KernelPlan, unit: BenchUnit, device: DeviceModel, toolchain: Toolchain,
                    info: DeviceInfo, previous: TuningRecord | None, entries: dict[str, Measurement],
                    measurements: list[ConfigMeasurement], elapsed: float, previous_pick: str) -> TuningRecord:
    """The record of one bench task: every planned measurement, provenance, and the pick (ties
    keep ``previous_pick``, the config the table holds now)."""
    spec = kp.spec
    record = TuningRecord(kernel=spec.name, key_names=list(spec.key),
                          dtype=unit.dtype, fingerprint=unit.fingerprint,
                          bench_seconds=round(elapsed + (previous.bench_seconds if previous else 0.0), 3),
                          measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    set_record_shape(record, spec.key_of(unit.shape))
    set_record_bench_dims(record, spec.bench_of(unit.shape))
    # Device and versions exactly as the fingerprint saw them (doit check recomputes it from
    # these); the worker adds what only it can read. The plan reads versions from package
    # metadata, which may drop a local tag that torch.__version__ has (2.11.0 vs 2.11.0+cu130).
    record.device.key, record.device.name = device.key, device.name
    record.device.compute_capability, record.device.backend = device.compute_capability, device.backend
    record.toolchain.triton, record.toolchain.torch = toolchain.triton, toolchain.torch
    record.toolchain.cuda, record.toolchain.driver = info.cuda, info.driver
    bench = spec.bench
    record.bench.warmup_ms, record.bench.rep_ms = bench.warmup_ms, bench.rep_ms
    record.bench.l2_flush, record.bench.l2_flush_bytes = bench.l2_flush, bench.l2_flush_bytes or 0
    record.measurements.extend(entries[config_id] for config_id in sorted(entries))
    for name, part in kp.dependencies.items():
        record.dependencies.add(name=name, digest=part)
    fresh = [m for m in measurements if m.method]
    if fresh:
        clocks_to_proto(fresh[0].clocks_start, fresh[-1].clocks_end, record.clocks)
    best = choose(record.measurements, previous_pick)
    if best is not None:
        record.best.CopyFrom(best.config)
    return record


def measurement_proto(m: ConfigMeasurement, config: Config, seconds: float = 0.0,
                       short_rep_ms: float = 0.0) -> Measurement:
    entry = Measurement(status=m.status, reason=m.message, error_norm=m.error_norm, method=m.method,
                        launches_per_sample=m.launches_per_sample if m.method else 0, cold_l2=m.cold_l2,
                        seconds=seconds, short_rep_ms=short_rep_ms)
    cache_io.config_to_proto(m.config_id, config.as_dict(), entry.config)
    for phase in ("check", "warmup", "capture", "timed"):
        if phase in m.phase_seconds:
            setattr(entry.phases, phase, m.phase_seconds[phase])
    if m.times_ms:
        cache_io.set_samples(entry, m.times_ms)
    if m.method:
        clocks_to_proto(m.clocks_start, m.clocks_end, entry.clocks)
    return entry


def search_proto(unit: BenchUnit, result: SearchResult, reused: int) -> Search:
    """What a record says about the search that produced it (see aot_tune.tuning.proto)."""
    settings = unit.search
    info = Search(strategy=settings.strategy, budget_configs=settings.budget_configs or 0,
                  budget_seconds=settings.budget_seconds or 0.0, seed=settings.seed,
                  settings=json.dumps(settings.canonical(), sort_keys=True),
                  candidates=search.candidate_digest(unit.configs), candidate_count=len(unit.configs),
                  configs_measured=result.configs_measured, seconds=round(result.seconds, 3),
                  compute_seconds=round(result.compute_seconds, 3), reused=reused)
    for seed in result.seeded_by:
        set_record_shape(info.sources.add(config_ids=list(seed.config_ids), device=seed.device, triton=seed.triton),
                         seed.shape)
    return info


def ranked_from(info: Search, shape: tuple) -> str:
    """What a ranked search's progress note and summary add to the strategy's name: the devices
    and Triton versions whose records of ``shape`` ranked its configs, or that it had none and
    measured every config; '' for the other strategies."""
    if info.strategy != "ranked":
        return ""
    origins = sorted({f"{s.device} (triton {s.triton})" for s in info.sources
                      if s.device and record_shape(s) == tuple(shape)})
    return f" from {', '.join(origins)}" if origins else " without a source, as exhaustive"


def clocks_to_proto(start: ClockReading, end: ClockReading, clocks) -> None:
    clocks.sm_mhz_start, clocks.sm_mhz_end = start.sm_mhz, end.sm_mhz
    clocks.memory_mhz_start, clocks.memory_mhz_end = start.memory_mhz, end.memory_mhz


def no_config_passed(unit: BenchUnit, record: TuningRecord) -> str:
    reasons = Counter(m.status for m in record.measurements)
    ran = [m for m in record.measurements if m.reason and m.status != "invalid"]  # the telling failures first
    first = next(iter(ran or [m for m in record.measurements if m.reason]), None)
    summary = ", ".join(f"{status} {count}" for status, count in sorted(reasons.items())) or "no configs"
    example = f"; e.g. config {first.config.id}: {first.reason}" if first else ""
    return (f"{unit.kernel} {unit.dtype} {shape_label(unit.shape)}: no config passed ({summary}){example}; "
            f"fix: the kernel, its reference or input builder, or the config space; "
            f"the generated table is left as it was")
