"""The sources a search starts from: other searches' results, and which shape seeds which.

A source is a record whose measurements inform the search of one (shape, dtype): a
neighbouring shape's finished search in the same run (the budgeted strategies' transfer across
shapes, ``transfer_plan``), or, for ``ranked`` (aot_tune.search.ranked), a record of this shape
or a neighbouring one that the cache holds from another device or another fingerprint.
Distances are the runtime's log2 key distance, so transfer and the runtime's fallback to the
nearest key agree.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from aot_tune.cache import config_from_proto, record_full_shape
from aot_tune.runtime.lookup import is_size, key_distance  # the runtime's nearest-key metric: transfer and fallback agree
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement, TuningRecord

#: A neighbour's winners are tried first only this close (log2 distance: 2 is one dim 4x away);
#: a farther one's winners rarely win here and would take the place of a spread-out probe.
TRANSFER_REACH = 2.0
#: Neighbouring anchors a shape's search starts from.
NEIGHBOURS = 2


def passed(m: Measurement) -> bool:
    """A measurement with a time: it ran and its result was right."""
    return m.status == "ok" and m.runs > 0


def transfer_plan(shapes: Sequence[tuple[int, ...]], neighbours: int = NEIGHBOURS) -> dict[tuple[int, ...], tuple]:
    """Each shape's source shapes: none for the round(sqrt(n)) anchors (the medoid first, then
    each next shape farthest from the anchors so far; ties to the smaller shape), and the
    ``neighbours`` nearest anchors for every other shape. Shapes that differ in a bool or string
    key value (``causal``) never seed each other: each such group is planned on its own."""
    groups: dict[tuple, list[tuple]] = {}
    for shape in set(map(tuple, shapes)):
        groups.setdefault(tuple(v for v in shape if not is_size(v)), []).append(shape)
    if len(groups) > 1:
        return {s: sources for group in groups.values() for s, sources in transfer_plan(group, neighbours).items()}
    shapes = sorted(set(map(tuple, shapes)))
    if len(shapes) < 2:
        return {s: () for s in shapes}
    count = max(1, round(math.sqrt(len(shapes))))
    anchors = [min(shapes, key=lambda s: (sum(key_distance(s, t) for t in shapes), s))]
    while len(anchors) < count:
        rest = [s for s in shapes if s not in anchors]
        farthest = max(min(key_distance(s, a) for a in anchors) for s in rest)
        anchors.append(min(s for s in rest if min(key_distance(s, a) for a in anchors) == farthest))
    return {s: () if s in anchors else tuple(sorted(anchors, key=lambda a: (key_distance(s, a), a))[:neighbours])
            for s in shapes}


@dataclass(frozen=True)
class Source:
    """A record's measurements, seeding the search of a shape."""

    shape: tuple[int, ...]
    distance: float                      # the runtime's log2 distance to the shape searched
    times: tuple[tuple[Config, float], ...]  # passing measurements: config, median ms
    winners: tuple[Config, ...]          # fastest first, its pick first
    device: str = ""                     # the device key and Triton version it was measured with
    triton: str = ""
    #: For a record of a search other than exhaustive: the digest of the candidates it chose among
    #: (aot_tune.search.strategies.candidate_digest), and every config it measured, failed ones too;
    #: the candidates it left unmeasured are the ones its search ruled out.
    candidates: str = ""
    measured: frozenset[str] = frozenset()


class Seed(NamedTuple):
    """A source as the searched record names it (aot_tune.tuning.proto's TransferSource)."""

    shape: tuple
    config_ids: tuple[str, ...]  # the configs it had measured first (none: it only informed the search)
    device: str = ""
    triton: str = ""


def source_from_record(record: TuningRecord, shape: tuple[int, ...]) -> Source:
    """A record as a source for ``shape``: its passing measurements, full timings before short
    ones, fastest first, its pick at the head of the winners."""
    passing = [(Config.from_dict(config_from_proto(m.config)), m.median_ms, bool(m.short_rep_ms))
               for m in record.measurements if passed(m)]
    passing.sort(key=lambda t: (t[2], t[1], t[0].id))
    winners = sorted((c for c, _, _ in passing), key=lambda c: c.id != record.best.id)  # stable
    return Source(record_full_shape(record), key_distance(record_full_shape(record), tuple(shape)),
                  tuple((c, t) for c, t, _ in passing), tuple(winners), record.device.key, record.toolchain.triton,
                  record.search.candidates, frozenset(m.config.id for m in record.measurements))


def transfer_first(sources: Sequence[Source], candidates: Sequence[Config], per_source: int,
                   seeded: list[Seed] | None = None) -> list[Config]:
    """The winners of the sources within ``TRANSFER_REACH`` that are candidates here: every
    source's best, then every source's second, ...; nearest source first. Records in ``seeded``
    which source gave which (none for a source that only informs the surrogate)."""
    allowed = {c.id for c in candidates}
    picked: dict[str, Config] = {}
    given: list[list[str]] = [[] for _ in sources]  # by position: sources of one shape from two devices
    for rank in range(per_source):
        for source, ids in zip(sources, given):
            if source.distance > TRANSFER_REACH:
                continue
            winners = [c for c in source.winners if c.id in allowed]
            if rank < len(winners) and winners[rank].id not in picked:
                picked[winners[rank].id] = winners[rank]
                ids.append(winners[rank].id)
    if seeded is not None:
        seeded.extend(Seed(s.shape, tuple(ids), s.device, s.triton) for s, ids in zip(sources, given))
    return list(picked.values())
