"""The ``ranked`` search strategy: retune after an upgrade (a new Triton, a new GPU model) from
the ranking that the cache's other measurements give.

A cache keeps the records of every device it was tuned on, and a record whose toolchain or
kernel fingerprint has moved on stays until its shape is retuned. Their times are not this
device's, but they rank the configs well. ``ranked`` searches one (shape, dtype) from them:

1. Sources (``source_records``): the cache's records of this kernel, dtype and shape (key and
   bench dims) measured on another device of the same backend, or on this one under another
   fingerprint (another toolchain, kernel source, bench or search settings), and the
   neighbouring shapes' records of the same (device, Triton version). A shape that no such
   record times is measured exhaustively, and its record names no source.
2. The first batch: each source's ``FIRST_RANKS`` fastest configs (every source's best, then
   every source's second, ...), ``RANKING_CHECKS`` configs from further down each ranking, the
   neighbouring shapes' winners, and every config no source times (new in the space, or failed
   there): with no prediction, those are always measured. A source that was itself searched
   (``ranked`` or budgeted) times only what its search measured; the candidates it left
   unmeasured, when it chose among exactly this search's candidates, were ruled out there and
   are not measured here (else a second upgrade after a ranked retune would measure them all).
3. The model, per source: log t_here = slope * log t_there + offset, fitted by least squares on
   the configs measured in both, with the spread of its residuals. A config's optimistic time is
   its predicted time less a margin: ``SPREADS`` times the spread, widened as the textbook
   prediction interval of a new point widens (by ``sqrt(1 + 1/n + (x - mean x)^2 / Sxx)``, the
   farther its time there from those fitted, the wider), and at least ``MIN_MARGIN``. Over
   several sources, the most optimistic one counts. A source sharing fewer than ``MIN_FIT``
   configs with this shape's measurements rules nothing out yet. The slope is fitted rather than
   taken as 1 so that a ranking that does not hold (even one reversed here) shows as a wrong
   slope or a wide spread, not as confidence.
4. Then batches of ``BATCH``: the unmeasured configs whose optimistic time is below the best
   time measured here, fastest predicted first, until none is left: the rest cannot win. A
   budget (``{configs: N}`` or ``{seconds: S}``) may end it sooner, as for the other strategies.

Where the bench's finals follow (on a GPU, aot_tune.select.finalists), every timing is a
screening one of ``SCREEN_SHARE`` of rep_ms: the finals time the fastest again in full, side by
side, and the pick is among them, so the search has only to find them. Elsewhere every timing is
full. One search's timings all have one length: the stopping rule compares like with like. Pure
Python; measurements come through the search run's callbacks.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aot_tune.cache import Mismatch, record_full_shape
from aot_tune.search.transfer import TRANSFER_REACH, Seed, Source, passed, source_from_record, transfer_first
from aot_tune.space import Config
from aot_tune.tuning_schema import TuningRecord

if TYPE_CHECKING:
    from aot_tune.search.budget import SearchRun

#: Fastest configs of each source's ranking in the first batch: the winner here is most often
#: among them, and they give the fit its first points.
FIRST_RANKS = 6
#: Configs from further down each source's ranking in the first batch (at 1/3 and 2/3 of it): the
#: top configs alone span a narrow range of times there, over which the slope is uncertain and the
#: others' prediction intervals wide (on the unit tests' 288-config landscape, a source with 15%
#: noise needed 22 configs without them, 11 with them; a shuffled one 288 and 100).
RANKING_CHECKS = 2
#: Winners of each neighbouring shape (within TRANSFER_REACH) measured in the first batch.
NEIGHBOUR_WINNERS = 1
#: Configs measured per later batch, pipelined on the device as one (the surrogate's batch size).
BATCH = 4
#: Configs a source must share with this shape's measurements before its predictions rule a config
#: out: the residuals of a fitted line through fewer have one degree of freedom or none.
MIN_FIT = 4
#: Residual spreads below its predicted time that a config's optimistic time lies: with normal
#: residuals, a config ruled out has about a 2% chance of being faster than the best measured.
SPREADS = 2.0
#: The least margin, a log time ratio (5%): a handful of residuals can agree by chance, and a
#: GPU's medians drift by a few percent between runs (clocks, temperature), which no fit on one
#: run's measurements shows.
MIN_MARGIN = math.log(1.05)
#: Share of rep_ms of each timing where the finals follow: such a timing costs about half a full
#: one (whose timed phase is about two thirds of it, aot_tune.search.strategies.SCREEN_SHARE). The
#: finals' band (20%) is wide against what a shorter timing adds to a median's noise; the drift
#: between batches (10-33% on a GPU at its power cap) is what the finals are there for.
SCREEN_SHARE = 0.25


def source_records(records: Iterable[tuple[TuningRecord, Mismatch | None]], *, kernel: str, dtype: str,
                   shape: tuple, device: str, fingerprint: str, backend: str) -> list[TuningRecord]:
    """A ranked search's sources among a cache's records (each with its mismatch against the
    manifest): this shape's records measured on another device of ``backend`` or under another
    fingerprint than ``fingerprint``, then the other shapes' records of the same (device, Triton
    version) as one of them; in a fixed order. Records of another key are left out, as are those
    of another backend (the interpreter's times say nothing of a GPU's)."""
    shape = tuple(shape)
    usable = [r for r, why in records
              if (why is None or why.part != "key") and r.kernel == kernel and r.dtype == dtype
              and r.device.backend == backend and r.HasField("best")
              and not (r.device.key == device and r.fingerprint == fingerprint)]
    origins = {_origin(r) for r in usable if record_full_shape(r) == shape}
    chosen = [r for r in usable if _origin(r) in origins]
    return sorted(chosen, key=lambda r: (record_full_shape(r) != shape, _origin(r), record_full_shape(r)))


def _origin(record: TuningRecord) -> tuple[str, str]:
    return record.device.key, record.toolchain.triton


@dataclass(frozen=True)
class RankingFit:
    """One source's log times mapped onto this device's by least squares: log t_here = slope *
    log t_there + offset, with the residuals' spread and what it was fitted on (the prediction
    interval of a new config widens with its distance from the configs fitted)."""

    log_times: Mapping[str, float]  # config id -> log median ms there
    slope: float
    offset: float
    spread: float  # standard deviation of the residuals; math.inf before MIN_FIT configs in common
    count: int
    center: float  # mean log time there of the configs fitted
    sum_squares: float  # their squared deviations from it, summed

    def predict(self, config_id: str) -> tuple[float, float] | None:
        """(predicted log time here, margin below it that the time may still lie), or None."""
        there = self.log_times.get(config_id)
        if there is None:
            return None
        leverage = 1 + 1 / self.count + (there - self.center) ** 2 / self.sum_squares
        return self.slope * there + self.offset, max(MIN_MARGIN, SPREADS * self.spread * math.sqrt(leverage))


def fit_source(source: Source, here: Mapping[str, float]) -> RankingFit | None:
    """Fit ``source`` to the log times measured here (config id -> log ms); None when they share
    no config, or share only configs of one time there (nothing to fit a slope to)."""
    log_times = {c.id: math.log(t) for c, t in source.times if t > 0}
    pairs = [(log_times[cid], y) for cid, y in here.items() if cid in log_times]
    n = len(pairs)
    center = statistics.fmean(x for x, _ in pairs) if pairs else 0.0
    sum_squares = sum((x - center) ** 2 for x, _ in pairs)
    if sum_squares <= 0:
        return None
    mean_here = statistics.fmean(y for _, y in pairs)
    slope = sum((x - center) * (y - mean_here) for x, y in pairs) / sum_squares
    offset = mean_here - slope * center
    if n < MIN_FIT:
        return RankingFit(log_times, slope, offset, math.inf, n, center, sum_squares)
    residuals = sum((y - slope * x - offset) ** 2 for x, y in pairs)
    return RankingFit(log_times, slope, offset, math.sqrt(residuals / (n - 2)), n, center, sum_squares)


def search_ranked(run: SearchRun, candidates: Sequence[Config], sources: Sequence[Source], seeded: list[Seed],
                  candidate_set: str, finals: bool = False) -> None:
    """Search ``candidates`` from ``sources`` (module docstring); with no source that times one
    of them, measure them all (a config whose compile fails, found as it is reached, is free).
    ``candidate_set`` is the digest of every candidate
    (aot_tune.search.strategies.candidate_digest): a source whose own search chose among the
    same ones has ruled out the candidates it left unmeasured, so they are not new here.
    ``finals``: the bench's finals follow, so every timing is a screening one."""
    share = SCREEN_SHARE if finals else 1.0
    allowed = {c.id for c in candidates}
    rankers = [s for s in sources if s.distance == 0 and any(c.id in allowed for c, _ in s.times)]
    if not rankers:
        run.measure_batch(candidates, share)
        return
    timed = {c.id for s in rankers for c, _ in s.times}
    ruled_out = {c.id for s in rankers if s.candidates == candidate_set for c in candidates
                 if c.id not in s.measured and c.id not in timed}
    first = _first_batch(rankers, sources, [c for c in candidates if c.id not in ruled_out], seeded)
    if not run.measure_batch(first, share):
        return
    while True:
        contenders = _contenders(run, [c for c in candidates if c.id not in ruled_out], rankers)
        if not contenders or not run.measure_batch(contenders[:BATCH], share):
            return


#: Batches of ``BATCH`` a ranked search is expected to send after its first, for the cost model:
#: 0-2 a shape when the sources rank well (the H200 -> H100 replay of the GEMM: 71 configs over
#: 8 shapes, about its first batches alone).
EXPECTED_LATER_BATCHES = 1


def _first_batch(rankers: Sequence[Source], sources: Sequence[Source], candidates: Sequence[Config],
                 seeded: list[Seed] | None = None) -> list[Config]:
    """The first batch (module docstring), each config once: the rankers' fastest and ranking
    checks, the winners of the neighbours within reach, and the candidates no ranker timed."""
    allowed = {c.id for c in candidates}
    timed = {c.id for s in rankers for c, _ in s.times}
    neighbours = [s for s in sources if 0 < s.distance <= TRANSFER_REACH]
    first = [*transfer_first(rankers, candidates, FIRST_RANKS, seeded),
             *(c for s in rankers for c in _ranking_checks(s, allowed)),
             *transfer_first(neighbours, candidates, NEIGHBOUR_WINNERS, seeded),
             *(c for c in candidates if c.id not in timed)]
    return list({c.id: c for c in first}.values())


def expected_measurements(candidates: Sequence[Config], records: Sequence[TuningRecord],
                          shape: tuple) -> tuple[int, int]:
    """What a ranked search of ``candidates`` is expected to measure and in how many batches,
    given its source records (``source_records``): every candidate with no source of this shape;
    else its first batch, built as the search builds it, and ``EXPECTED_LATER_BATCHES``."""
    sources = [source_from_record(r, tuple(shape)) for r in records]
    allowed = {c.id for c in candidates}
    rankers = [s for s in sources if s.distance == 0 and any(c.id in allowed for c, _ in s.times)]
    if not rankers:
        return len(candidates), int(bool(candidates))
    # a config the sources found invalid (shared memory, registers) is expected not to compile
    # here either: it costs no measurement
    exact = [r for r in records if record_full_shape(r) == tuple(shape)]
    invalid = {m.config.id for r in exact for m in r.measurements if m.status == "invalid"}
    candidates = [c for c in candidates if c.id not in invalid]
    first = len(_first_batch(rankers, sources, candidates))
    return min(len(candidates), first + EXPECTED_LATER_BATCHES * BATCH), 1 + EXPECTED_LATER_BATCHES


def _ranking_checks(source: Source, allowed: set[str]) -> list[Config]:
    """Configs spread over the part of the source's ranking below its ``FIRST_RANKS`` fastest."""
    rest = [c for c, _ in source.times if c.id in allowed][FIRST_RANKS:]
    return [rest[len(rest) * k // (RANKING_CHECKS + 1)] for k in range(1, RANKING_CHECKS + 1) if rest]


def _contenders(run: SearchRun, candidates: Sequence[Config], rankers: Sequence[Source]) -> list[Config]:
    """The unmeasured configs that may still beat the best time here (the search's timings are
    all of one length), fastest predicted first (those no source can predict yet last, in their
    sources' order). A config is ruled out only when every source that times it predicts, even
    optimistically, a slower time."""
    here = {cid: math.log(m.median_ms) for cid, m in run.latest.items() if passed(m) and m.median_ms > 0}
    best = min(here.values(), default=math.inf)
    fits = [(frozenset(c.id for c, _ in s.times), fit_source(s, here)) for s in rankers]
    order: dict[str, int] = {}  # a config's best place in the sources' rankings
    for source in rankers:
        for place, (config, _) in enumerate(source.times):
            order[config.id] = min(place, order.get(config.id, place))
    contenders = []
    for config in candidates:
        if config.id in run.latest:
            continue
        predictions = [fit.predict(config.id) if fit is not None else None for timed, fit in fits
                       if config.id in timed]
        bounded = [p for p in predictions if p is not None]
        if bounded and len(bounded) == len(predictions) and min(p - margin for p, margin in bounded) >= best:
            continue  # even its optimistic time is slower than the best here
        expected = min((p for p, _ in bounded), default=math.inf)
        contenders.append((expected, order.get(config.id, len(order)), config.id, config))
    return [config for *_, config in sorted(contenders)]
