"""Choosing the config for a shape from its measurements."""
from __future__ import annotations

import statistics
from typing import Iterable

from .bench.records import ConfigMeasurement


def choose(measurements: Iterable[ConfigMeasurement]) -> ConfigMeasurement | None:
    """The passing config with the lowest median time; equal medians go to the smaller config id,
    so the pick is deterministic. Failed configs are never chosen; None if nothing passed."""
    passing = [m for m in measurements if m.ok and m.times_ms]
    if not passing:
        return None
    return min(passing, key=lambda m: (statistics.median(m.times_ms), m.config_id))
