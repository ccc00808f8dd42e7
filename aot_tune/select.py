"""Choosing the config for a shape from its measurements, without chasing noise.

Two configs whose medians differ by less than the measurement can resolve are a tie: their 95%
confidence intervals of the median overlap, after widening each by ``TIE_FLOOR`` (run-to-run
drift that one run's samples cannot show). Among the configs tied with the fastest:

1. the previous pick for this key, if it is one of them, stays (a retune on the same GPU does not
   churn the checked-in table over noise);
2. otherwise the lowest median wins, and equal medians go to the smaller config id.

Failed configs are never chosen, and only like is compared with like: a short screening
measurement (successive halving's early rungs, ``short_rep_ms`` set) never competes with a full
one. The pick is among the full measurements; only a search whose seconds budget ran out before
any config was timed in full picks among its longest short ones.
"""
from __future__ import annotations

from typing import Iterable

from aot_tune.tuning_schema import Measurement

#: Relative widening of each interval; keeps a pick at most about this much slower than the fastest.
TIE_FLOOR = 0.005


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


def tied_with_fastest(measurements: Iterable[Measurement]) -> list[Measurement]:
    """The comparable configs indistinguishable from the fastest one, fastest first."""
    passing = sorted(comparable(measurements), key=lambda m: (m.median_ms, m.config.id))
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
