"""One shape's search spending its budget (``SearchRun``), below the strategies that drive it,
so that ``ranked`` and the others share it without importing each other."""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from aot_tune.cache import config_to_proto
from aot_tune.manifest import SearchSettings
from aot_tune.search.transfer import Seed
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement

#: (config, share of rep_ms) -> the measurement; the share is 1.0 for a full timing.
Measure = Callable[[Config, float], Measurement]
#: [(config, share of rep_ms), ...] -> their measurements in that order, measured as one batch
#: (pipelined on the device: each measurement's seconds is its share of the batch's wall time).
MeasureBatch = Callable[[Sequence[tuple[Config, float]]], list[Measurement]]
#: The configs a search is about to measure (none measured before) -> the ids of those whose
#: compile failed, with the reason. Asked once per config, just before its first measurement.
Verdicts = Callable[[Sequence[Config]], Mapping[str, str]]


def known_verdicts(invalid: Mapping[str, str]) -> Verdicts:
    """The verdicts of a search whose compiles are all known (a replay: its record's invalid configs)."""
    return lambda configs: {c.id: invalid[c.id] for c in configs if c.id in invalid}



@dataclass
class SearchResult:
    measurements: dict[str, Measurement]   # the latest measurement of each config reached, invalid ones too
    configs_measured: int                   # distinct configs measured (not the invalid ones, but in random)
    seconds: float                          # spent against the budget
    compute_seconds: float                  # of which the strategy's own compute
    seeded_by: list[Seed] = field(default_factory=list)


class SearchRun:
    """One shape's search in progress: spends the budget, asks for compile verdicts as it reaches
    configs, and keeps each config's latest measurement."""

    def __init__(self, settings: SearchSettings, measure: Measure, verdicts: Verdicts,
                 clock: Callable[[], float] = time.perf_counter, measure_batch: MeasureBatch | None = None) -> None:
        self.settings = settings
        self._measure = measure
        self._measure_batch = measure_batch
        self._verdicts = verdicts
        self._clock = clock
        self._mark = clock()
        self.latest: dict[str, Measurement] = {}
        self.failed: set[str] = set()  # configs whose compile failed (their measurement is invalid)
        self.measured_seconds = 0.0
        self.compute_seconds = 0.0

    @property
    def configs_measured(self) -> int:
        """Distinct configs measured; a failed compile counts only in ``random`` (its draw is fixed)."""
        if self.settings.strategy == "random":
            return len(self.latest)
        return len(self.latest) - len(self.failed)

    @property
    def seconds(self) -> float:
        self._charge_compute()
        return self.measured_seconds + self.compute_seconds

    def _spent(self) -> bool:
        budget_seconds = self.settings.budget_seconds
        return budget_seconds is not None and self.seconds >= budget_seconds

    def _room(self) -> float:
        """New configs the configs budget still allows."""
        budget_configs = self.settings.budget_configs
        return math.inf if budget_configs is None else budget_configs - self.configs_measured

    def _sort_out(self, configs: Sequence[Config]) -> list[Config]:
        """Ask for the verdicts of ``configs`` (new ones); record the failed ones as invalid
        measurements and return the others. The wait for their compiles is no search time."""
        self._charge_compute()
        verdicts = self._verdicts(configs)
        self._mark = self._clock()
        valid = []
        for config in configs:
            reason = verdicts.get(config.id)
            if reason is None:
                valid.append(config)
            else:
                self.latest[config.id] = invalid_measurement(config, reason)
                self.failed.add(config.id)
        return valid

    def measure(self, config: Config, share: float = 1.0) -> Measurement | None:
        """Measure ``config`` with ``share`` of rep_ms; None once the budget is spent (a config
        measured before may always be timed again under a configs budget). A config whose
        compile failed gives its invalid measurement, for free."""
        if self._spent():
            return None
        if config.id in self.failed:
            return self.latest[config.id]
        if config.id not in self.latest:
            if self._room() <= 0:
                return None
            if not self._sort_out([config]):
                return self.latest[config.id]
        self._charge_compute()
        m = self._measure(config, share)
        self._mark = self._clock()
        self.measured_seconds += m.seconds
        self.latest[config.id] = m
        return m

    def measure_batch(self, configs: Sequence[Config], share: float = 1.0, fill: int | None = None) -> bool:
        """Measure ``configs`` with ``share`` of rep_ms as one batch: in their order, as many as
        the configs budget allows (the failed compiles among them free, so the budget reaches
        further into ``configs``), none once the seconds budget is spent. With ``fill``,
        ``configs`` are new ones in order of preference, and the batch is their first ``fill``
        that compile: a design or a model's round keeps its size whichever of its configs fail.
        False when the budget cut it short."""
        if self._spent():
            return False
        wanted = list(dict.fromkeys(configs))
        taken: list[Config] = []  # to measure, in order: new valid configs and re-timings
        position = 0
        cut = False  # the configs budget ran out before the batch did
        while position < len(wanted):
            new: list[Config] = []
            budget_room = self._room() - sum(1 for c in taken if c.id not in self.latest)
            fill_room = math.inf if fill is None else fill - len(taken)
            while position < len(wanted):
                config = wanted[position]
                if config.id not in self.latest:
                    if len(new) >= min(budget_room, fill_room):
                        break
                    new.append(config)
                elif config.id not in self.failed and fill is None:
                    taken.append(config)
                position += 1
            if not new:
                cut = position < len(wanted) and budget_room <= 0 < fill_room
                break
            valid = {c.id for c in self._sort_out(new)}
            taken += [c for c in new if c.id in valid]
        order = {c.id: i for i, c in enumerate(wanted)}
        taken.sort(key=lambda c: order[c.id])
        probes = [(config, share) for config in taken]
        if probes:
            self._charge_compute()
            if self._measure_batch is not None:
                measured = self._measure_batch(probes)
            else:
                measured = [self._measure(config, s) for config, s in probes]
            self._mark = self._clock()
            for (config, _), m in zip(probes, measured, strict=True):
                self.measured_seconds += m.seconds
                self.latest[config.id] = m
        return not cut

    def _charge_compute(self) -> None:
        now = self._clock()
        self.compute_seconds += now - self._mark
        self._mark = now


def invalid_measurement(config: Config, reason: str) -> Measurement:
    """The entry of a config whose compile failed: never launched, never chosen."""
    m = Measurement(status="invalid", reason=reason)
    config_to_proto(config.id, config.as_dict(), m.config)
    return m
