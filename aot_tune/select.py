"""Choosing the config for a shape from its measurements, without chasing noise.

Two configs whose medians differ by less than the measurement can resolve are a tie: their 95%
confidence intervals of the median overlap, after widening each by ``TIE_FLOOR`` (run-to-run
drift that one run's samples cannot show). Among the configs tied with the fastest:

1. the previous pick for this key, if it is one of them, stays (a retune on the same GPU does not
   churn the checked-in table over noise);
2. otherwise the lowest median wins, and equal medians go to the smaller config id.

On a GPU the fastest configs are then timed again side by side, interleaved (``finalists``):
configs timed minutes apart meet different clocks and heat, and the pick is among those finalists.

Failed configs are never chosen, and only like is compared with like: a short screening
measurement (successive halving's early rungs, ``short_rep_ms`` set) never competes with a full
one. The pick is among the full measurements, else among the longest short ones (a search whose
seconds budget ran out before any config was timed in full, or a ranked search's screening on a
GPU); on a GPU the finals then time the fastest of them in full.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

from aot_tune.tuning_schema import Measurement

if TYPE_CHECKING:
    from aot_tune.tuning_schema import Config, TuningCache, TuningRecord

#: Relative widening of each interval; keeps a pick at most about this much slower than the fastest.
TIE_FLOOR = 0.005
#: The most configs a shape's finals time side by side ...
FINALS_MAX = 6
#: ... among those whose median is within this share of the fastest's: the same fp8 or fp16 GEMM read
#: 10-33% apart from one pass to the next in one process on the H100 host (a GPU at its power cap,
#: warming up), so a config timed in a hot batch can trail one timed in a cool batch by that much.
FINALS_BAND = 0.2
#: Rounds of the finals: each finalist's timing is split into this many slices, in turn with the others ...
FINALS_ROUNDS = 5
#: ... and spans this share of ``rep_ms``. Interleaving cancels the drift; length still averages the
#: GPU's faster swings (about 4% between windows): on H100 hosts, two exhaustive tunes' fp8 picks
#: agreed to 1.004 with whole-``rep_ms`` finals and 1.011-1.019 with half, which saved a ranked retune
#: only 1-2 points of its share of the exhaustive bench seconds.
FINALS_SHARE = 1.0


def finals_on(backend: str) -> bool:
    """Whether a bench on ``backend`` times its finalists again: on a GPU only (the interpreter's
    times say nothing of a GPU's clocks or heat)."""
    return backend == "cuda"


def _interval(m: Measurement) -> tuple[float, float]:
    low = m.median_ci_low_ms or m.median_ms
    high = m.median_ci_high_ms or m.median_ms
    return low * (1 - TIE_FLOOR), high * (1 + TIE_FLOOR)


def comparable(measurements: Iterable[Measurement]) -> list[Measurement]:
    """The passing measurements a pick compares: the full ones, else the longest short ones."""
    passing = [m for m in measurements if m.status == "ok" and m.runs > 0]
    full = [m for m in passing if not m.short_rep_ms]
    if full or not passing:
        return full
    longest = max(m.short_rep_ms for m in passing)
    return [m for m in passing if m.short_rep_ms == longest]


def finalists(measurements: Iterable[Measurement]) -> list[Measurement]:
    """The configs a shape's finals time side by side: the fastest comparable measurements (the
    full ones, else the longest short ones), up to ``FINALS_MAX`` within ``FINALS_BAND`` of the
    fastest, fastest first (fewer than two: no finals)."""
    compared = sorted(comparable(measurements), key=lambda m: (m.median_ms, m.config.id))
    if not compared:
        return []
    return [m for m in compared if m.median_ms <= compared[0].median_ms * (1 + FINALS_BAND)][:FINALS_MAX]


def contenders(measurements: Iterable[Measurement]) -> list[Measurement]:
    """The measurements a pick chooses among: the finalists where the shape had finals, else the
    comparable ones."""
    passing = comparable(measurements)
    final = [m for m in passing if m.finalist]
    return final or passing


def tied_with_fastest(measurements: Iterable[Measurement]) -> list[Measurement]:
    """The contenders indistinguishable from the fastest one, fastest first."""
    passing = sorted(contenders(measurements), key=lambda m: (m.median_ms, m.config.id))
    if not passing:
        return []
    fastest_high = _interval(passing[0])[1]
    return [m for m in passing if _interval(m)[0] <= fastest_high]


def choose(measurements: Iterable[Measurement], previous_pick: str = "") -> Measurement | None:
    """The pick by the rule above; None if nothing passed."""
    ties = tied_with_fastest(measurements)
    if not ties:
        return None
    for m in ties:
        if m.config.id == previous_pick:
            return m
    return ties[0]


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class TableEntry:
    """One key's pick on one device: what a generated module's table and every export hold."""

    key: tuple  # the key dims' values, in the manifest's key order
    dtype: str
    config: dict  # the config's params and launch options
    time_s: float  # the pick's median seconds (the geometric mean over the key's bench shapes)


@dataclass(frozen=True)
class DeviceTable:
    """A device's picks, with what they were measured on (generated modules' headers, exports' info)."""

    key: str
    name: str
    compute_capability: str
    backend: str
    triton: str
    torch: str
    entries: tuple[TableEntry, ...]  # sorted by (dtype, key)


def key_pick(records: Sequence["TuningRecord"]) -> tuple["Config", float] | None:
    """The config (a ``Config`` message) a key's table holds and its seconds, from the records of its bench shapes (one
    record per shape; several where shapes differ only in bench dims, e.g. rows or tokens).

    One record: its own pick (noise-aware, see above). Several: the config with the lowest
    geometric mean of its medians over them, among the configs that passed on the most of them
    (a config that fails on one of the shapes a key serves is no pick for that key); equal means go
    to the smaller config id. None when no config passed anywhere."""
    if len(records) == 1:
        record = records[0]
        if not record.HasField("best"):
            return None
        best = next((m for m in record.measurements if m.config.id == record.best.id), None)
        return record.best, (best.median_ms / 1000 if best is not None else 0.0)
    times: dict[str, list[float]] = {}
    first: dict[str, Measurement] = {}
    for record in records:
        for m in comparable(record.measurements):
            times.setdefault(m.config.id, []).append(m.median_ms)
            first.setdefault(m.config.id, m)
    if not times:
        return None
    most = max(len(t) for t in times.values())
    means = {cid: statistics.geometric_mean(t) for cid, t in times.items() if len(t) == most}
    pick = min(means, key=lambda cid: (means[cid], cid))
    return first[pick].config, means[pick] / 1000


def selected_tables(cache: "TuningCache", kernel: str, key: tuple[str, ...]) -> dict[str, DeviceTable]:
    """Device key -> its table of picks, from the records of ``kernel`` keyed by ``key`` (records
    keyed by other dims are not this manifest's: the caller's staleness check says so)."""
    from aot_tune.cache import config_from_proto, record_shape

    groups: dict[str, dict[tuple, list]] = {}
    for record in cache.records:
        if record.kernel != kernel or tuple(record.key_names) != tuple(key):
            continue
        by_key = groups.setdefault(record.device.key, {})
        by_key.setdefault((record.dtype, record_shape(record)), []).append(record)
    tables = {}
    for device_key in sorted(groups):
        entries = []
        for (dtype, values), records in groups[device_key].items():
            picked = key_pick(records) if any(r.HasField("best") for r in records) else None
            if picked is not None:
                entries.append(TableEntry(values, dtype, config_from_proto(picked[0]), picked[1]))
        if not entries:
            continue
        first = next(iter(groups[device_key].values()))[0]
        tables[device_key] = DeviceTable(device_key, first.device.name, first.device.compute_capability,
                                         first.device.backend, first.toolchain.triton, first.toolchain.torch,
                                         tuple(sorted(entries, key=lambda e: (e.dtype, e.key))))
    return tables
