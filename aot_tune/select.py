"""Choosing the config for a shape from its measurements."""
from __future__ import annotations

from typing import Iterable

from .tuning_schema import Measurement


def choose(measurements: Iterable[Measurement]) -> Measurement | None:
    """The passing config with the lowest median time; equal medians go to the smaller config id,
    so the pick is deterministic. Failed configs are never chosen; None if nothing passed."""
    passing = [m for m in measurements if m.status == "ok" and m.runs > 0]
    if not passing:
        return None
    return min(passing, key=lambda m: (m.median_ms, m.config.id))
