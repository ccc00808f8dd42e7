"""The surrogate model behind the ``surrogate`` search strategy, in plain Python.

A config's log run time is modelled as additive effects of its parameter values and of every
pair of them, plus one offset per shape::

    log t(config, shape) = offset[shape] + sum_p main_p[v_p] + sum_{p<q} pair_pq[v_p, v_q]

Each effect is a small table keyed by parameter values (categorical, so any value type works),
fitted by weighted backfitting with shrinkage: a table cell seen by observations of total
weight w moves w / (w + SHRINKAGE) of the way to their mean residual, so a value seen once stays
near zero and an unseen one is exactly zero. Pairs carry the interactions that matter for tiled
kernels (BLOCK_M with BLOCK_N, BLOCK_K with num_stages, ...). Neighbouring shapes' observations
enter with a weight below 1, so they shape the first predictions and the shape's own
measurements take over as they arrive. A fit over a few hundred observations takes tens of
milliseconds, which matters because the search's own compute counts against its budget.

``maximin_design`` picks the first configs to measure when nothing is known: each next one as
far as possible (in log2 steps of the numeric parameters) from those already picked.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence

from aot_tune.space import Config

SHRINKAGE = 1.0
ROUNDS = 6


def varying_params(configs: Sequence[Config]) -> tuple[str, ...]:
    """Parameters that take more than one value among ``configs`` (the others explain nothing)."""
    values: dict[str, set] = {}
    for config in configs:
        for name, value in config.params:
            values.setdefault(name, set()).add(value)
    return tuple(sorted(name for name, seen in values.items() if len(seen) > 1))


class AdditiveModel:
    """Main and pairwise effects of parameter values on log time; see the module docstring."""

    def __init__(self, params: Sequence[str]) -> None:
        self.tables: tuple[tuple[str, ...], ...] = (
            *((p,) for p in params), *itertools.combinations(params, 2))
        self._effects: list[dict[tuple, float]] = [{} for _ in self.tables]
        self._keys: dict[str, tuple[tuple, ...]] = {}

    def keys(self, config: Config) -> tuple[tuple, ...]:
        """The cell of each table this config falls in (memoized by config id)."""
        cells = self._keys.get(config.id)
        if cells is None:
            values = dict(config.params)
            cells = self._keys[config.id] = tuple(tuple(values.get(p) for p in table) for table in self.tables)
        return cells

    def fit(self, observations: Sequence[tuple[Hashable, Config, float, float]]) -> None:
        """Fit to ``(group, config, log time, weight)``; each group (shape) gets its own offset."""
        observations = [o for o in observations if o[3] > 0]
        weights = [weight for _, _, _, weight in observations]
        residual = [y for _, _, y, _ in observations]  # y minus every table's effect (offsets apart)
        group_index: dict[Hashable, int] = {}
        groups = [group_index.setdefault(group, len(group_index)) for group, _, _, _ in observations]
        # Per table: each observation's cell as a small int, and the cells' keys.
        tables = []
        rows = [self.keys(config) for _, config, _, _ in observations]
        for t in range(len(self.tables)):
            index: dict[tuple, int] = {}
            tables.append(([index.setdefault(row[t], len(index)) for row in rows], index))
        effects = [[0.0] * len(index) for _, index in tables]
        group_mass = [0.0] * len(group_index)
        for g, w in zip(groups, weights):
            group_mass[g] += w
        # each cell's weight, the same in every round
        masses = []
        for cells, index in tables:
            mass = [0.0] * len(index)
            for c, w in zip(cells, weights):
                mass[c] += w
            masses.append(mass)
        for _ in range(ROUNDS):
            sums = [0.0] * len(group_index)
            for g, w, r in zip(groups, weights, residual):
                sums[g] += w * r
            offsets = [sums[g] / group_mass[g] for g in groups]
            for (cells, index), effect, mass in zip(tables, effects, masses):
                totals = [0.0] * len(index)
                for c, w, r, o in zip(cells, weights, residual, offsets):
                    totals[c] += w * (r + effect[c] - o)
                fresh = [total / (m + SHRINKAGE) for total, m in zip(totals, mass)]
                change = [old - new for old, new in zip(effect, fresh)]
                residual = [r + change[c] for r, c in zip(residual, cells)]
                effect[:] = fresh
        self._effects = [{key: effect[c] for key, c in index.items()} for (_, index), effect in zip(tables, effects)]

    def predict(self, config: Config) -> float:
        """Predicted log time up to the shape's offset (only differences between configs matter)."""
        return sum(map(dict.get, self._effects, self.keys(config), itertools.repeat(0.0)))


def maximin_design(candidates: Sequence[Config], count: int, first: Sequence[Config]) -> list[Config]:
    """``first``, then configs each as far as possible from all picked so far (ties: earlier in
    ``candidates``), until ``count`` are picked. Distance: the sum over parameters of the
    |log2| step for positive numbers, 1 for any other difference."""
    picked = list(dict.fromkeys(first))
    if not candidates or len(picked) >= count:
        return picked
    params = varying_params(candidates)
    vectors = {c.id: _coordinates(c, params) for c in candidates}
    for config in picked:
        vectors.setdefault(config.id, _coordinates(config, params))
    if not picked:
        picked.append(candidates[0])
    nearest = {c.id: min(_distance(vectors[c.id], vectors[p.id]) for p in picked) for c in candidates}
    while len(picked) < count:
        chosen = {p.id for p in picked}
        best, best_distance = None, -1.0
        for config in candidates:
            d = nearest[config.id]
            if config.id not in chosen and d > best_distance:
                best, best_distance = config, d
        if best is None:
            break
        picked.append(best)
        for config in candidates:
            nearest[config.id] = min(nearest[config.id], _distance(vectors[config.id], vectors[best.id]))
    return picked


def _coordinates(config: Config, params: Sequence[str]) -> tuple:
    values = dict(config.params)
    out = []
    for name in params:
        value = values.get(name)
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        out.append(math.log2(value) if numeric else value)
    return tuple(out)


def _distance(a: tuple, b: tuple) -> float:
    total = 0.0
    for x, y in zip(a, b):
        if isinstance(x, float) and isinstance(y, float):
            total += abs(x - y)
        elif x != y:
            total += 1.0
    return total
