"""Replaying searches other than exhaustive over an exhaustive run's recorded samples.

One exhaustive run keeps every sample of every config (the bench outputs under
``.aot_tune/bench/``). Any strategy and budget can then be replayed over those records without
a GPU: the same search code (aot_tune.search.strategies) runs, and each probe is answered from the record
of its config; a config invalid in the record is reported invalid when the search reaches it, as
a real run compiles it on demand then. A full probe gets the recorded measurement; a short probe (a share ``f`` of
rep_ms) gets the first ``max(min_samples(f), ceil(f * n))`` of its ``n`` samples, which is what a
short run of the same engine takes, priced at the recorded seconds less the timed phase it skips
(its warm-up, also a share of the full one, is not taken off: a host phase of a few replays'
queuing, where the device's part of it is not recorded). A shape's first probe also pays what building the
shape's inputs cost the exhaustive run (its largest round trip beyond the measured phases), as
the first config of a shape does in a real run. The strategy's own compute is timed for real. Shapes are
searched in the bench stage's order (anchors, then the shapes they seed), and each pick is
judged by the exhaustive record: its full median over that of the exhaustive pick. On a GPU's
records the bench's finals are replayed too (``replay_finals``): the search's finalists get their
recorded full timing, at its recorded seconds, and the pick is among them. A ``ranked``
search ranks from the records of another device or toolchain, given beside the replayed ones
(``foreign``), as the bench stage ranks from the cache's.

Records without seconds or samples still replay, priced in timings: each timing costs 1 whatever
its length (without recorded phases the saving of a short one is unknown), the strategy's compute
nothing; a short probe then sees the full median. A merged cache keeps seconds but no samples:
its short probes see the full median at the full price (``keeps_samples`` says which it is).
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from aot_tune.bench.engine.timing import min_samples
from aot_tune.cache import (config_from_proto, record_bench_dims, record_full_shape, record_shape,
                            set_record_bench_dims, set_record_shape, set_samples)
from aot_tune.manifest import SearchSettings
from aot_tune.search import ranked
from aot_tune.search.budget import known_verdicts
from aot_tune.search.strategies import run_search, source_from_record, transfer_plan
from aot_tune.select import FINALS_SHARE, choose, finalists, finals_on
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement, TuningRecord


@dataclass(frozen=True)
class ShapeResult:
    shape: tuple[int, ...]
    dtype: str
    pick: str
    ratio: float          # exhaustive median of the pick / exhaustive median of the exhaustive pick
    seconds: float        # spent by the search (replayed measurements + its own compute) and finals, or timings
    compute_seconds: float
    configs_measured: int
    finals_seconds: float = 0.0  # of ``seconds``, the replayed finals'


@dataclass(frozen=True)
class SuiteResult:
    settings: SearchSettings
    shapes: tuple[ShapeResult, ...]
    exhaustive_seconds: float

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.shapes)

    @property
    def finals_seconds(self) -> float:
        return sum(s.finals_seconds for s in self.shapes)

    @property
    def time_share(self) -> float:
        """Tuning time as a share of the exhaustive run's."""
        return self.seconds / self.exhaustive_seconds if self.exhaustive_seconds else math.nan

    @property
    def quality(self) -> float:
        """Geometric mean over shapes of the pick's ratio to the exhaustive pick (1.0: as good)."""
        return geomean(s.ratio for s in self.shapes)

    @property
    def worst(self) -> float:
        return max(s.ratio for s in self.shapes)


def geomean(values) -> float:
    values = list(values)
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else math.nan


def exhaustive_seconds(records: Sequence[TuningRecord]) -> float:
    """Bench time of the exhaustive run: every measurement's seconds."""
    return sum(m.seconds for r in records for m in r.measurements)


def keeps_samples(records: Sequence[TuningRecord]) -> bool:
    """Whether the records keep raw samples (bench outputs do, merged caches do not): without
    them a short probe is answered by the full timing, at its full price."""
    return any(m.times_ms for r in records for m in r.measurements)


def spent_seconds(record: TuningRecord) -> float:
    """What a real run's record of a shape cost, as a replay prices it: its measurements' seconds
    (on a GPU a finalist's entry holds its finals' too) and its search's own compute."""
    return sum(m.seconds for m in record.measurements) + record.search.compute_seconds


def priced_in_seconds(records: Sequence[TuningRecord]) -> bool:
    """Whether the records carry measurement seconds (bench outputs do; merged caches from
    before per-measurement seconds do not, and are priced in timings)."""
    return exhaustive_seconds(records) > 0


def shape_setup_seconds(record: TuningRecord) -> float:
    """What building a shape's inputs added to the exhaustive run's first round trip of it: the
    largest excess of a passing measurement's seconds over its phases, less the typical excess."""
    excess = sorted(m.seconds - (m.phases.check + m.phases.warmup + m.phases.capture + m.phases.timed)
                    for m in record.measurements if m.status == "ok" and m.HasField("phases"))
    return max(0.0, excess[-1] - excess[len(excess) // 2]) if excess else 0.0


def _plus_seconds(m: Measurement, seconds: float) -> Measurement:
    charged = Measurement()
    charged.CopyFrom(m)
    charged.seconds += seconds
    return charged


def _in_timings(m: Measurement) -> Measurement:
    priced = Measurement()
    priced.CopyFrom(m)
    priced.seconds = 0.0 if m.status == "invalid" else 1.0
    return priced


def short_measurement(recorded: Measurement, share: float, rep_ms: float) -> Measurement:
    """What a timing of ``share`` of rep_ms would have given: a prefix of the samples, priced
    at the recorded seconds less the timed phase it skips."""
    entry = Measurement()
    entry.CopyFrom(recorded)
    entry.short_rep_ms = rep_ms * share
    samples = list(recorded.times_ms)
    if recorded.status != "ok" or not samples:
        return entry
    kept = min(len(samples), max(min_samples(share), math.ceil(share * len(samples))))
    set_samples(entry, samples[:kept])
    entry.seconds = max(0.0, recorded.seconds - recorded.phases.timed * (1 - kept / len(samples)))
    return entry


def replay_shape(record: TuningRecord, settings: SearchSettings, sources: Sequence[TuningRecord] = (),
                 clock=time.perf_counter, in_timings: bool = False) -> tuple[ShapeResult, TuningRecord]:
    """Search one exhaustive record's configs as ``settings`` would have; returns the outcome
    and the record the search would have written (a source for the shapes it seeds)."""
    by_id = {m.config.id: m for m in record.measurements}
    candidates = [Config.from_dict(config_from_proto(m.config)) for m in record.measurements]
    invalid = {m.config.id: m.reason for m in record.measurements if m.status == "invalid"}
    rep_ms = record.bench.rep_ms

    setup = [shape_setup_seconds(record)]

    def measure(config: Config, share: float) -> Measurement:
        recorded = by_id[config.id]
        answer = recorded if share >= 1 else short_measurement(recorded, share, rep_ms)
        if in_timings:
            return _in_timings(answer)
        if setup[0]:
            answer = _plus_seconds(answer, setup[0])
            setup[0] = 0.0
        return answer

    shape = record_full_shape(record)
    finals = finals_on(record.device.backend)
    result = run_search(settings, candidates, known_verdicts(invalid), measure,
                        [source_from_record(s, shape) for s in sources], clock, finals=finals)
    measured = dict(result.measurements)
    finals_seconds = replay_finals(measured, by_id, in_timings) if finals else 0.0
    searched = TuningRecord(kernel=record.kernel, dtype=record.dtype)
    set_record_shape(searched, record_shape(record))
    set_record_bench_dims(searched, record_bench_dims(record))
    searched.measurements.extend(measured[k] for k in sorted(measured))
    pick = choose(searched.measurements)
    if pick is not None:
        searched.best.CopyFrom(pick.config)
    best = by_id[record.best.id].median_ms
    ratio = by_id[pick.config.id].median_ms / best if pick is not None else math.inf
    return ShapeResult(shape, record.dtype, pick.config.id if pick else "", ratio, result.seconds + finals_seconds,
                       result.compute_seconds, result.configs_measured, finals_seconds), searched


def replay_finals(measured: dict[str, Measurement], recorded: dict[str, Measurement], in_timings: bool) -> float:
    """The bench's finals on a GPU, replayed: the search's finalists (aot_tune.select.finalists) get
    their recorded full timing, as finalists, in ``measured``. Returns what that cost: their
    recorded seconds times ``FINALS_SHARE`` (in timings, one each)."""
    chosen = finalists(measured.values())
    if len(chosen) < 2:
        return 0.0
    spent = 0.0
    for m in chosen:
        entry = Measurement()
        entry.CopyFrom(recorded[m.config.id])
        price = 1.0 if in_timings else entry.seconds * FINALS_SHARE
        entry.seconds = m.seconds + price
        entry.finalist = True
        measured[m.config.id] = entry
        spent += price
    return spent


def replay_suite(records: Sequence[TuningRecord], settings: SearchSettings, clock=time.perf_counter,
                 foreign: Sequence[TuningRecord] = ()) -> SuiteResult:
    """Replay a strategy other than exhaustive over exhaustive records of one kernel and device,
    shapes of each dtype in the bench stage's transfer order. ``ranked`` takes its sources from
    ``foreign``, as the bench stage takes them from the cache: the records of another device or
    toolchain (aot_tune.search.ranked.source_records)."""
    in_timings = not priced_in_seconds(records)
    if in_timings:
        clock = _still
    outcomes: list[ShapeResult] = []
    for dtype in sorted({r.dtype for r in records}):
        group = {record_full_shape(r): r for r in records if r.dtype == dtype}
        plan = transfer_plan(list(group)) if settings.strategy in ("successive_halving", "surrogate") \
            and settings.transfer else {s: () for s in group}
        searched: dict[tuple[int, ...], TuningRecord] = {}
        for shape in sorted(group, key=lambda s: (bool(plan[s]), s)):
            record = group[shape]
            sources = ranked.source_records(
                ((r, None) for r in foreign), kernel=record.kernel, dtype=dtype, shape=shape, device=record.device.key,
                fingerprint=record.fingerprint, backend=record.device.backend,
            ) if settings.strategy == "ranked" else [searched[s] for s in plan[shape]]
            outcome, searched[shape] = replay_shape(record, settings, sources, clock, in_timings)
            outcomes.append(outcome)
    total = sum(m.status != "invalid" for r in records for m in r.measurements) if in_timings \
        else exhaustive_seconds(records)
    return SuiteResult(settings, tuple(outcomes), total)


def _still() -> float:
    return 0.0
