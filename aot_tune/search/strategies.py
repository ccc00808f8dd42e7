"""Search strategies: which configs the bench stage measures for one (shape, dtype), and how long.

``exhaustive`` (the default) measures every candidate config; the bench stage keeps its
incremental path for it (a new config is measured alone). The budgeted strategies measure part
of the space within a per-shape budget:

* ``random``: the first configs of a seeded order (a hash of seed and config id, so adding a
  config to the space changes the draw by at most that config). Transfer does not apply: it
  is the yardstick the other strategies are measured against.
* ``successive_halving``: every config of the pool is timed short (``rep_ms / eta**(rungs-1)``
  of samples), the best ``1/eta`` again ``eta`` times longer, and so on until the last rung,
  which is timed in full. The pool is the neighbours' winners, then the seeded order.
* ``surrogate``: an initial design (the neighbours' winners, then configs spread over the space,
  aot_tune.search.surrogate.maximin_design), then rounds of: fit the additive model to every
  measurement so far (the neighbours' at a lower weight), measure the ``BATCH`` untried configs
  it predicts fastest (one of them one parameter away from the best so far). Every such probe is
  a short screening timing (``SCREEN_SHARE`` of rep_ms: the model needs a rough time, not a
  tight one); once the budget is spent the ``FINALISTS`` fastest are timed in full, and the pick
  is among those. The design, each round and the finalists are each measured as one batch
  (pipelined on the device in the bench stage).
* ``ranked`` (aot_tune.search.ranked): after an upgrade, the configs that ranked best in the
  cache's records of another device or toolchain first, until a model of this device's times
  from theirs says the rest cannot win; the budget is optional. On a GPU its timings are short
  screening ones, and the bench's finals time the fastest in full.

Budgets. ``{configs: N}`` caps the distinct configs measured (short or full; a config that
failed to compile costs nothing and does not count, except in ``random``, whose draw is fixed
before compiling). ``{seconds: S}`` caps the wall time of the search, measurements and the
strategy's own compute: no new measurement (or batch) starts once S is spent (so a search ends
at most one measurement or batch past it; seconds budgets depend on the machine, configs budgets
do not). Successive halving under a seconds budget ends its first rung at ``FIRST_RUNG_SHARE`` of
it, and the surrogate its screening at ``SCREEN_SECONDS_SHARE`` (the rest is for its finalists).
Re-timing a config measured before (a promotion, a finalist) does not count against a configs
budget.

Transfer (aot_tune.search.transfer). The bench tasks of a (kernel, dtype) form two waves
(``transfer_plan``): anchor shapes, spread over the shapes by farthest-point sampling, search
with no neighbours; every other shape's bench task depends on its nearest anchors and starts
from their results: the winners of those within ``TRANSFER_REACH`` are measured first, and all
of them inform the surrogate at a weight that falls with distance. Which shape seeds which is
fixed by the manifest's shapes alone, never by which task finished first on which GPU, so a run
gives the same records whatever the scheduling; records name the shapes and configs that
seeded them.

Compile verdicts are lazy. A search asks for a config's verdict (did it compile for the bench's
targets?) only when it is about to measure it, through a ``Verdicts`` callback: the bench stage
compiles an adaptive search's configs on demand there (aot_tune.pipeline.session), a replay
reads them off its record. A config that failed is an ``invalid`` measurement, costs nothing and
the search carries on past it; nothing a strategy chooses depends on a verdict it has not asked
for, so a search gives the same records whichever compiles happened to have landed before it.

Everything here is pure Python and gets its measurements through a callback, so the same code
runs in the bench stage (real measurements) and in aot_tune.search.replay (recorded samples).
"""
from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence

from aot_tune.sources import digest
from aot_tune.manifest import SearchSettings
from aot_tune.space import Config
from aot_tune.search.budget import Measure, MeasureBatch, SearchResult, SearchRun, Verdicts, known_verdicts
from aot_tune.search.ranked import search_ranked
from aot_tune.search.surrogate import AdditiveModel, maximin_design, varying_params
from aot_tune.search.transfer import (  # noqa: F401 (re-exported: callers take them from here)
    TRANSFER_REACH, Seed, Source, passed, source_from_record, transfer_first, transfer_plan,
)
from aot_tune.tuning_schema import TuningRecord

#: Configs the surrogate measures before its first fit (neighbours' winners included).
INITIAL_DESIGN = 8
#: Configs measured between two fits of the surrogate, as one batch.
BATCH = 4
#: Share of rep_ms of the surrogate's screening timings (successive halving's first rung at eta 3,
#: 3 rungs): on a GPU most of a full timing is its timed phase, so a probe costs about 40% of one.
SCREEN_SHARE = 1 / 9
#: Screened configs, fastest first, the surrogate times in full at the end; the pick is among them.
FINALISTS = 3
#: Share of a seconds budget the surrogate spends screening before it times its finalists.
SCREEN_SECONDS_SHARE = 0.8
#: Weight of a neighbour's observation in the surrogate, times exp(-log2 distance).
SOURCE_WEIGHT = 0.5
#: Winners of each neighbour tried first: the surrogate's design is small, a short rung is cheap.
TRANSFER_WINNERS = {"surrogate": 1, "successive_halving": 3}
#: Share of a seconds budget successive halving spends on its first rung.
FIRST_RUNG_SHARE = 0.5


def compiles_on_demand(settings: SearchSettings) -> bool:
    """Whether a search's compiles wait until it asks to measure their configs: every strategy
    but ``exhaustive`` and a ``random`` draw under a configs budget, whose configs are known up
    front (``up_front``) and compiled by the compile stage like an exhaustive bench's."""
    return not settings.exhaustive and not (settings.strategy == "random" and settings.budget_configs is not None)


def seeded_order(configs: Sequence[Config], seed: int) -> list[Config]:
    """A random order that is stable per config: adding a config moves no other."""
    return sorted(configs, key=lambda c: hashlib.sha256(f"{seed}:{c.id}".encode()).digest())


def up_front(settings: SearchSettings, candidates: Sequence[Config]) -> tuple[Config, ...]:
    """The configs a search may measure, as far as is known before it runs: ``random`` with a
    configs budget draws them up front (the compile stage builds them); the adaptive strategies,
    and any search under a seconds budget, may reach every candidate (compiled on demand,
    ``compiles_on_demand``)."""
    if settings.strategy == "random" and settings.budget_configs is not None:
        return tuple(seeded_order(candidates, settings.seed)[:settings.budget_configs])
    return tuple(candidates)


def candidate_digest(configs: Sequence[Config]) -> str:
    return digest(sorted(c.id for c in configs))


def covers(record: TuningRecord, configs: Sequence[Config]) -> bool:
    """A budgeted record (already matched by fingerprint, so by strategy and budget) answers
    these candidates when its search chose among exactly them."""
    return record.HasField("search") and record.search.candidates == candidate_digest(configs)


def run_search(settings: SearchSettings, candidates: Sequence[Config], verdicts: Verdicts | Mapping[str, str],
               measure: Measure, sources: Sequence[Source] = (),
               clock: Callable[[], float] = time.perf_counter,
               measure_batch: MeasureBatch | None = None, finals: bool = False) -> SearchResult:
    """Search one shape's candidates with a strategy other than exhaustive. ``verdicts`` gives
    the compile verdicts of the configs the search is about to measure (a mapping of the failed
    ones' ids to the reason, when all are known: consulted as lazily); ``sources`` are
    neighbouring shapes' results (for ``ranked``, the cache's records of other devices and
    toolchains). ``measure_batch``, if given, measures the configs a strategy chooses together
    (the surrogate's batches) in one go; without it they are measured one by one with ``measure``.
    ``finals``: the bench times the fastest configs again in full afterwards (aot_tune.select.finals_on),
    so ``ranked`` screens."""
    if settings.exhaustive:
        raise ValueError("exhaustive is not a budgeted search; the bench stage measures every config")
    if isinstance(verdicts, Mapping):
        verdicts = known_verdicts(verdicts)
    run = SearchRun(settings, measure, verdicts, clock, measure_batch)
    sources = sorted(sources, key=lambda s: (s.distance, s.shape)) if settings.strategy != "random" \
        and settings.transfer else []
    seeded: list[Seed] = []
    if settings.strategy == "random":
        _random(run, candidates)
    elif settings.strategy == "successive_halving":
        _successive_halving(run, candidates, sources, seeded)
    elif settings.strategy == "surrogate":
        _surrogate(run, candidates, sources, seeded)
    elif settings.strategy == "ranked":
        search_ranked(run, candidates, sources, seeded, candidate_digest(candidates), finals)
    else:
        raise ValueError(f"unknown search strategy {settings.strategy!r}")
    # the candidates it never reached were never asked about: their compiles may never have run
    return SearchResult(dict(run.latest), run.configs_measured, run.seconds, run.compute_seconds, seeded)


def _random(run: SearchRun, candidates: Sequence[Config]) -> None:
    for config in seeded_order(candidates, run.settings.seed):
        if run.measure(config) is None:
            return


def _successive_halving(run: SearchRun, candidates: Sequence[Config], sources: Sequence[Source],
                        seeded: list) -> None:
    settings = run.settings
    shares = [settings.eta ** -(settings.rungs - 1 - r) for r in range(settings.rungs)]
    reached = [s for s in sources if s.distance <= TRANSFER_REACH]  # no model here for the others to inform
    first = transfer_first(reached, candidates, TRANSFER_WINNERS["successive_halving"], seeded)
    pool = list(dict.fromkeys([*first, *seeded_order(candidates, settings.seed)]))
    stop_first_rung = (settings.budget_seconds * FIRST_RUNG_SHARE if settings.budget_seconds is not None
                       else math.inf)
    alive = []
    for config in pool:
        if run.seconds >= stop_first_rung:
            break
        m = run.measure(config, shares[0])
        if m is None:
            break
        if passed(m):
            alive.append(config)
    for share in shares[1:]:
        alive.sort(key=lambda c: (run.latest[c.id].median_ms, c.id))
        alive = alive[:max(1, math.ceil(len(alive) / settings.eta))]
        promoted = []
        for config in alive:
            m = run.measure(config, share)
            if m is None:
                return
            if passed(m):
                promoted.append(config)
        alive = promoted


def _surrogate(run: SearchRun, candidates: Sequence[Config], sources: Sequence[Source], seeded: list) -> None:
    _screen(run, candidates, sources, seeded)
    _finalists(run, candidates)  # also when the budget ran out mid-way: the pick is among full timings


def _screen(run: SearchRun, candidates: Sequence[Config], sources: Sequence[Source], seeded: list) -> None:
    """The surrogate's screening: short timings of the design, then of the model's batches."""
    order = seeded_order(candidates, run.settings.seed)
    if not order:
        return
    budget_seconds = run.settings.budget_seconds
    stop = budget_seconds * SCREEN_SECONDS_SHARE if budget_seconds is not None else math.inf
    first = transfer_first(sources, candidates, TRANSFER_WINNERS["surrogate"], seeded)
    size = max(INITIAL_DESIGN, len(first))
    # twice the design, in maximin order: the configs that fail to compile give way to the next
    if not run.measure_batch(maximin_design(order, 2 * size, first or order[:1]), SCREEN_SHARE, fill=size):
        return
    model = AdditiveModel(varying_params(candidates))
    prior = [(source.shape, config, math.log(t), SOURCE_WEIGHT * math.exp(-source.distance))
             for source in sources for config, t in source.times if t > 0]
    rank = {c.id: i for i, c in enumerate(order)}
    while run.seconds < stop:
        untried = [c for c in order if c.id not in run.latest]
        if not untried:
            return
        own = [("searched", config, math.log(max(run.latest[config.id].median_ms, 1e-9)), 1.0)
               for config in candidates if config.id in run.latest and passed(run.latest[config.id])]
        model.fit(prior + own)
        untried.sort(key=lambda c: (model.predict(c), rank[c.id]))
        batch = _batch(untried, _incumbent(run, candidates))
        # the model's next favourites stand in for the configs of the batch that fail to compile
        if not run.measure_batch([*batch, *untried], SCREEN_SHARE, fill=len(batch)):
            return


def _finalists(run: SearchRun, candidates: Sequence[Config]) -> None:
    """Time the ``FINALISTS`` fastest screened configs in full, as one batch."""
    screened = [c for c in candidates if c.id in run.latest and passed(run.latest[c.id])
                and run.latest[c.id].short_rep_ms]
    screened.sort(key=lambda c: (run.latest[c.id].median_ms, c.id))
    if screened:
        run.measure_batch(screened[:FINALISTS], 1.0)


def _incumbent(run: SearchRun, candidates: Sequence[Config]) -> Config | None:
    passing = [c for c in candidates if c.id in run.latest and passed(run.latest[c.id])]
    return min(passing, key=lambda c: (run.latest[c.id].median_ms, c.id)) if passing else None


def _batch(ranked: list[Config], incumbent: Config | None) -> list[Config]:
    """The model's ``BATCH - 1`` favourites, and its favourite among the configs one parameter
    away from the best so far: a value first seen next to bad ones gets tried in good company."""
    batch = ranked[:BATCH - 1]
    if incumbent is not None:
        best = dict(incumbent.params)
        near = next((c for c in ranked[BATCH - 1:]
                     if sum(value != best.get(name) for name, value in c.params) == 1), None)
        if near is not None:
            batch.append(near)
    return batch if len(batch) == BATCH else ranked[:BATCH]


def search_plan(search: SearchSettings, candidates: int) -> tuple[list[tuple[int, float]], int]:
    """What a search of ``candidates`` configs measures, as (measurements, share of rep_ms) groups,
    and how many batches it sends (the forecast's price of it); a seconds budget is applied later."""
    if search.exhaustive:
        return [(candidates, 1.0)], int(candidates > 0)
    count = min(candidates, search.budget_configs if search.budget_configs is not None else candidates)
    if count == 0:
        return [], 0
    if search.strategy == "successive_halving":
        groups, alive = [], count
        for rung in range(search.rungs):
            groups.append((alive, float(search.eta) ** -(search.rungs - 1 - rung)))
            alive = max(1, math.ceil(alive / search.eta))
        return groups, sum(n for n, _ in groups)  # one batch a probe
    if search.strategy == "surrogate":  # the design, the model's rounds, the finalists: a batch each
        rounds = math.ceil(max(0, count - INITIAL_DESIGN) / BATCH)
        return [(count, SCREEN_SHARE), (min(FINALISTS, count), 1.0)], 2 + rounds
    return [(count, 1.0)], count  # random: one batch a probe
