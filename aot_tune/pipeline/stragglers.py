"""Straggler compiles: no bench waits for one that cannot win, and none is given up that might.

A compile far slower than its kernel's others is nearly always a config that spills (a big tile
on few warps), and such a config is slow when it runs too. So a bench task whose landed configs
are all measured and that waits only for stragglers asks, for each, whether it can still win
on its shape: the additive model of the search (aot_tune.search.surrogate) is fitted to the
log times measured so far, and a straggler whose every parameter value was measured at least
``SEEN_AT_LEAST`` times and whose predicted time exceeds the best by more than both
``LOSING_RATIO`` and ``SPREAD_MARGIN`` times the fit's residual spread cannot win. The bench
then records it as given up (``invalid``: never picked) and finishes without waiting.

The compile deadline (aot_tune.build.deadline) asks the same bookkeeping before it gives a
compile up: while a bench that needs it may still pick it, the compile runs on (up to the
absolute compile limit); once none may, it is given up. A compile that every bench needing it
has given up is abandoned at once, before the deadline (with the deadline off, it runs on): the
run would otherwise wait for it to end, unread (two GEMM compiles of the paper's space held a
run 6.2 s past its last bench, until the 20 s deadline). A compile no bench of this run needs
(another GPU target, a dtype only GPUs measure) has no measurements to judge it by: the
deadline gives it up as before.
"""
from __future__ import annotations

import math
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

from aot_tune.search.surrogate import AdditiveModel, varying_params
from aot_tune.space import Config

#: A compile is a straggler once it has run this many times the median valid compile of its
#: kernel and target in this run ...
STRAGGLER_FACTOR = 3.0
#: ... and at least this long (a second's wait costs nothing worth a judgement).
STRAGGLER_MIN_S = 2.0
#: Valid compiles of the kernel and target that must have finished before a median means anything.
PEERS = 4
#: Passing measurements of the shape a judgement needs.
MEASURED_AT_LEAST = 6
#: Times each parameter value of the straggler must have been measured (its effect is then
#: estimated; an unseen value could be the one that wins).
SEEN_AT_LEAST = 2
#: Predicted at least this many times the best measured time ...
LOSING_RATIO = 1.5
#: ... and by more than this many residual standard deviations of the fit (in log time).
SPREAD_MARGIN = 3.0


def cannot_win(candidate: Config, measured: Sequence[tuple[Config, float]], space: Sequence[Config]) -> str:
    """Why ``candidate`` cannot beat the best of ``measured`` (config, median ms), or "" when it
    might (or too little is known to tell)."""
    passing = [(c, t) for c, t in measured if t > 0 and math.isfinite(t)]
    if len(passing) < MEASURED_AT_LEAST:
        return ""
    seen: Counter = Counter(value for config, _ in passing for value in config.params)
    if any(seen[value] < SEEN_AT_LEAST for value in candidate.params):
        return ""
    model = AdditiveModel(varying_params(space))
    observations = [("shape", config, math.log(t), 1.0) for config, t in passing]
    model.fit(observations)
    offsets = [y - model.predict(config) for _, config, y, _ in observations]
    offset = statistics.fmean(offsets)
    spread = statistics.pstdev(offsets)
    best = min(t for _, t in passing)
    predicted = math.exp(model.predict(candidate) + offset)
    margin = max(math.log(LOSING_RATIO), SPREAD_MARGIN * spread)
    if math.log(predicted / best) <= margin:
        return ""
    return (f"predicted {predicted:.3g} ms from the {len(passing)} configs measured, against the best "
            f"{best:.3g} ms: it cannot win")


class Stragglers:
    """The run's compiles in flight and each bench's verdicts on the stragglers it needs."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}  # compile unit -> when its compile started
        self._valid: dict[tuple[str, str], list[float]] = defaultdict(list)  # (kernel, target) -> seconds
        self._given_up: set[tuple[str, str]] = set()  # (bench unit, config id)
        self._finished: set[str] = set()  # bench units that measured all they will

    def compile_started(self, unit_name: str) -> None:
        with self._lock:
            self._since[unit_name] = self._clock()

    def compile_ended(self, unit_name: str, kernel: str, target: str, valid_seconds: float | None) -> None:
        with self._lock:
            self._since.pop(unit_name, None)
            if valid_seconds is not None:
                self._valid[(kernel, target)].append(valid_seconds)

    def straggling(self, unit_name: str, kernel: str, target: str) -> float | None:
        """Seconds the compile has run if it is a straggler now, else None."""
        with self._lock:
            since, peers = self._since.get(unit_name), self._valid[(kernel, target)]
            if since is None or len(peers) < PEERS:
                return None
            running = self._clock() - since
            limit = max(STRAGGLER_MIN_S, STRAGGLER_FACTOR * statistics.median(peers))
        return running if running >= limit else None

    def give_up(self, bench: str, config_id: str) -> None:
        with self._lock:
            self._given_up.add((bench, config_id))

    def finished(self, bench: str) -> None:
        with self._lock:
            self._finished.add(bench)

    @property
    def given_up(self) -> int:
        """Configs the run's benches gave up on as stragglers that could not win."""
        with self._lock:
            return len(self._given_up)

    def gave_up(self, bench: str, config_id: str) -> bool:
        """Whether ``bench`` judged ``config_id`` a straggler that cannot win."""
        with self._lock:
            return (bench, config_id) in self._given_up

    def may_still_pick(self, bench: str, config_id: str) -> bool:
        """Whether ``bench`` may still measure and pick ``config_id`` (it neither finished nor gave it up)."""
        with self._lock:
            return bench not in self._finished and (bench, config_id) not in self._given_up


#: How often a waiting bench judges its stragglers again (a fit takes milliseconds).
LOOK_EVERY_S = 1.0


class StragglerJudge:
    """One exhaustive bench task's judgement of the stragglers it waits for (``landed_waves``'s
    ``give_up``): each that cannot win is recorded in ``given_up`` (config id -> why) and dropped."""

    def __init__(self, bench, entries: dict, compiles_of: Callable[[Config], Sequence], landed: Callable[[object], bool],
                 stragglers: Stragglers, kernel: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._bench, self._entries, self._compiles_of, self._landed = bench, entries, compiles_of, landed
        self._stragglers, self._kernel, self._clock = stragglers, kernel, clock
        self._next_look = 0.0
        self.given_up: dict[str, str] = {}

    def give_up(self, pending: list[Config]) -> list[Config]:
        """The pending configs that wait only for straggler compiles and cannot win (judged at
        most every ``LOOK_EVERY_S``; ``entries``, the bench's measurements, grow meanwhile)."""
        now = self._clock()
        if now < self._next_look:
            return []
        self._next_look = now + LOOK_EVERY_S
        waiting = []
        for config in pending:
            running = [self._stragglers.straggling(cu.name, self._kernel, cu.target)
                       for cu in self._compiles_of(config) if not self._landed(cu)]
            if running and all(seconds is not None for seconds in running):
                waiting.append((config, max(running)))
        if not waiting:
            return []
        space = {c.id: c for c in self._bench.configs}
        measured = [(space[m.config.id], m.median_ms) for m in self._entries.values()
                    if m.status == "ok" and m.config.id in space]
        dropped = []
        for config, seconds in waiting:
            why = cannot_win(config, measured, self._bench.configs)
            if why:
                self.given_up[config.id] = f"compile still running after {seconds:.0f} s: {why}"
                self._stragglers.give_up(self._bench.name, config.id)
                dropped.append(config)
        return dropped
