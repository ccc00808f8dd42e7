"""Config subset selection: few configs that keep every tuned shape within a tolerance of its best.

For users who keep Triton's autotuner: give it this short list instead of the whole space, and
every shape the tables cover still finds a config within ``tolerance`` (5%) of the fastest one
measured for it, at a fraction of the autotuning cost. The smallest such set is a set cover
problem (NP-hard); this is the greedy approximation: take the config that brings the most
uncovered entries (device, dtype, shape) within tolerance, until all are covered (ties: the
lower geometric mean of its ratios on the entries it brings, then the smaller config id).
Greedy is within a factor ln(entries) + 1 of the smallest set, and often finds it; it is not
guaranteed minimal.

An entry's best is the lowest median among its passing full measurements, and a config covers
an entry only where it was measured in full: a budgeted record offers the configs it measured.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from aot_tune.cache import config_from_proto, record_shape
from aot_tune.select import comparable
from aot_tune.space import LAUNCH_OPTIONS
from aot_tune.tuning_schema import TuningRecord

DEFAULT_TOLERANCE = 0.05


@dataclass(frozen=True)
class Entry:
    """One tuned key: its fastest median, and each config's ratio to it."""

    device: str
    dtype: str
    shape: tuple[int, ...]
    ratios: dict[str, float]

    @property
    def label(self) -> str:
        return f"{self.device} {self.dtype} {'x'.join(map(str, self.shape))}"


@dataclass(frozen=True)
class Chosen:
    config_id: str
    params: dict
    covers: tuple[tuple[Entry, float], ...]   # entries it was chosen for, and its ratio on each


@dataclass
class Subset:
    kernel: str
    tolerance: float
    entries: list[Entry]
    chosen: list[Chosen] = field(default_factory=list)
    space_size: int = 0

    @property
    def devices(self) -> list[str]:
        return sorted({e.device for e in self.entries})


def entries_of(records: Iterable[TuningRecord]) -> tuple[list[Entry], dict[str, dict]]:
    """Entries of the records, and the params of every config they measured."""
    entries, params = [], {}
    for record in records:
        measured = comparable(record.measurements)
        if not measured:
            continue
        best = min(m.median_ms for m in measured)
        ratios = {m.config.id: m.median_ms / best for m in measured}
        for m in measured:
            params.setdefault(m.config.id, config_from_proto(m.config))
        entries.append(Entry(record.device.key, record.dtype, record_shape(record), ratios))
    entries.sort(key=lambda e: (e.device, e.dtype, e.shape))
    return entries, params


def select_subset(kernel: str, records: Iterable[TuningRecord], tolerance: float = DEFAULT_TOLERANCE,
                  space_size: int = 0) -> Subset:
    """The greedy cover described in the module docstring."""
    entries, params = entries_of(records)
    subset = Subset(kernel, tolerance, entries, space_size=space_size)
    limit = 1 + tolerance
    uncovered = set(range(len(entries)))
    while uncovered:
        gains: dict[str, list[int]] = {}
        for i in uncovered:
            for config_id, ratio in entries[i].ratios.items():
                if ratio <= limit:
                    gains.setdefault(config_id, []).append(i)

        def score(config_id: str) -> tuple:
            covered = gains[config_id]
            mean_log = sum(math.log(entries[i].ratios[config_id]) for i in covered) / len(covered)
            return (-len(covered), mean_log, config_id)

        best = min(gains, key=score)  # every entry's fastest config covers it, so gains is never empty
        covered = sorted(gains[best])
        subset.chosen.append(Chosen(best, params[best], tuple((entries[i], entries[i].ratios[best]) for i in covered)))
        uncovered -= set(covered)
    return subset


def worst_ratio(subset: Subset) -> dict[str, float]:
    """Per entry label: the best ratio any chosen config reaches there (what the autotuner gets)."""
    chosen = [c.config_id for c in subset.chosen]
    return {e.label: min(e.ratios.get(c, math.inf) for c in chosen) for e in subset.entries}


def render_report(subset: Subset) -> str:
    if not subset.entries:
        return f"{subset.kernel}: no tuned entries to cover"
    space = f" of the {subset.space_size} in the space" if subset.space_size else ""
    reached = worst_ratio(subset)
    lines = [f"{subset.kernel} on {', '.join(subset.devices)}: {len(subset.chosen)} configs{space} keep all "
             f"{len(subset.entries)} tuned entries within {subset.tolerance:.0%} of their best "
             f"(greedy set cover; worst entry {max(reached.values()):.3f}x)"]
    for chosen in subset.chosen:
        label = " ".join(f"{k}={v}" for k, v in chosen.params.items())
        lines.append(f"  {chosen.config_id}  {label}")
        lines.extend(f"      {entry.label}  {ratio:.3f}x" for entry, ratio in chosen.covers)
    return "\n".join(lines)


def render_triton(subset: Subset, param_order: Sequence[str] = ()) -> str:
    """The chosen configs as a ``configs = [triton.Config(...), ...]`` list to paste next to a
    ``@triton.autotune`` kernel; constexprs in ``param_order`` (the manifest's), launch options
    as keyword arguments."""
    reached = worst_ratio(subset)
    worst = f"; worst entry {max(reached.values()):.3f}x" if reached else ""
    lines = [f"# {subset.kernel}: {len(subset.chosen)} configs keep every tuned entry on {', '.join(subset.devices)} "
             f"within {subset.tolerance:.0%} of its best (aot_tune subset, greedy set cover{worst})",
             "configs = ["]
    for chosen in subset.chosen:
        order = [p for p in param_order if p in chosen.params] + sorted(p for p in chosen.params if p not in param_order)
        constexprs = ", ".join(f"{k!r}: {chosen.params[k]!r}" for k in order if k not in LAUNCH_OPTIONS)
        options = "".join(f", {k}={chosen.params[k]!r}" for k in order if k in LAUNCH_OPTIONS)
        lines.append(f"    triton.Config({{{constexprs}}}{options}),")
    lines.append("]")
    return "\n".join(lines)
