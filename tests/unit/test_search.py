"""Search strategies on synthetic spaces: budgets, orders, rungs, transfer, and the like-with-like pick.

Every measurement here comes from a deterministic table of times, and clocks are fake, so each
search follows one path and the assertions are exact.
"""
from __future__ import annotations

import itertools
import math
import zlib

import pytest

from aot_tune.search import strategies as search
from aot_tune.manifest import SearchSettings
from aot_tune.search.strategies import (
    Source, covers, run_search, seeded_order, source_from_record, transfer_plan, up_front,
)
from aot_tune.select import choose, comparable
from aot_tune.space import Config
from aot_tune.search.surrogate import AdditiveModel, maximin_design, varying_params
from aot_tune.tuning_schema import Measurement, TuningRecord

SPACE = [Config.from_dict({"A": a, "B": b, "C": c, "D": d, "E": e})
         for a, b, c, d, e in itertools.product([16, 32, 64, 128], [16, 32, 64, 128], [1, 2, 4], [2, 3, 4], ["x", "y"])]


def landscape(config: Config, shift: float = 0.0) -> float:
    """A structured time in ms: separable terms, an A-B interaction (a best tile shape) and a
    small deterministic wobble; ``shift`` moves the best A-B cell (a neighbouring shape)."""
    p = config.as_dict()
    la, lb = math.log2(p["A"]), math.log2(p["B"])
    log_t = 0.3 * (la - 5.5 - shift) ** 2 + 0.2 * (lb - 5) ** 2 + 0.15 * (la + lb - 11 - shift) ** 2
    log_t += 0.1 * abs(math.log2(p["C"]) - 1) + 0.05 * (p["D"] - 3) ** 2 + (0.08 if p["E"] == "y" else 0.0)
    log_t += (zlib.crc32(config.id.encode()) % 1000) / 1000 * 0.02
    return math.exp(log_t)


def measurement(config: Config, ms: float, seconds: float = 0.01, status: str = "ok", short_rep_ms: float = 0.0):
    m = Measurement(status=status, median_ms=ms, runs=20 if status == "ok" else 0, seconds=seconds,
                    median_ci_low_ms=ms * 0.999, median_ci_high_ms=ms * 1.001, short_rep_ms=short_rep_ms)
    m.config.id = config.id
    for name, value in sorted(config.params):
        param = m.config.params.add(name=name)
        if isinstance(value, str):
            param.string_value = value
        else:
            param.int_value = value
    return m


class Bench:
    """Answers probes from ``times``; records each (config id, share) asked for."""

    def __init__(self, times: dict[str, float], seconds: float = 0.01, failing: set[str] = frozenset()):
        self.times, self.seconds, self.failing = times, seconds, failing
        self.calls: list[tuple[str, float]] = []

    def __call__(self, config: Config, share: float) -> Measurement:
        self.calls.append((config.id, share))
        status = "wrong_result" if config.id in self.failing else "ok"
        return measurement(config, self.times[config.id], self.seconds * share, status,
                           short_rep_ms=20 * share if share < 1 else 0.0)


def still_clock():
    return 0.0


def pick_ratio(result, times) -> float:
    pick = choose(result.measurements.values())
    return times[pick.config.id] / min(times.values())


# -- orders, draws and the transfer plan ---------------------------------------------------------

def test_seeded_order_is_stable_when_configs_are_added_and_changes_with_the_seed():
    order = seeded_order(SPACE[:100], 0)
    grown = seeded_order(SPACE[:101], 0)
    assert [c for c in grown if c != SPACE[100]] == order
    assert seeded_order(SPACE[:100], 1) != order
    assert up_front(SearchSettings("random", 10), SPACE) == tuple(seeded_order(SPACE, 0)[:10])
    assert up_front(SearchSettings("random", None, 2.0), SPACE) == tuple(SPACE)  # a seconds budget may reach all
    assert up_front(SearchSettings("surrogate", 10), SPACE) == tuple(SPACE)


def test_transfer_plan_anchors_are_spread_and_every_other_shape_is_seeded_by_the_nearest():
    shapes = [(m, 4096, 4096) for m in (32, 64, 128, 256, 512, 1024, 2048, 4096)]
    plan = transfer_plan(shapes)
    anchors = [s for s, sources in plan.items() if not sources]
    assert len(anchors) == round(math.sqrt(len(shapes)))
    assert (256, 4096, 4096) in anchors or (512, 4096, 4096) in anchors  # the medoid comes first
    assert (32, 4096, 4096) in anchors or (4096, 4096, 4096) in anchors  # then the far ends
    for shape, sources in plan.items():
        assert set(sources) <= set(anchors) and len(sources) == (0 if shape in anchors else 2)
        distances = [sum(abs(math.log2(a) - math.log2(b)) for a, b in zip(shape, s)) for s in sources]
        assert distances == sorted(distances)
    assert transfer_plan(list(reversed(shapes))) == plan  # the manifest's order does not matter
    assert transfer_plan([(1, 2, 3)]) == {(1, 2, 3): ()}


# -- budgets ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["random", "successive_halving", "surrogate"])
def test_a_configs_budget_caps_the_distinct_configs_measured(strategy):
    times = {c.id: landscape(c) for c in SPACE}
    bench = Bench(times)
    result = run_search(SearchSettings(strategy, 20), SPACE, {}, bench, clock=still_clock)
    measured = {config_id for config_id, _ in bench.calls}
    assert len(measured) == result.configs_measured == 20
    assert len(result.measurements) == 20 and all(m.status == "ok" for m in result.measurements.values())
    if strategy == "random":
        assert all(share == 1.0 for _, share in bench.calls)


@pytest.mark.parametrize("strategy", ["random", "successive_halving", "surrogate"])
def test_a_seconds_budget_starts_no_measurement_once_spent(strategy):
    times = {c.id: landscape(c) for c in SPACE}
    bench = Bench(times, seconds=0.1)
    result = run_search(SearchSettings(strategy, None, 1.0), SPACE, {}, bench, clock=still_clock)
    spent = sum(0.1 * share for _, share in bench.calls)  # promoted configs were timed more than once
    assert result.seconds == pytest.approx(spent)
    if strategy == "surrogate":  # screening stops at 80% of the budget, the last batch times finalists
        finals = [s for _, s in bench.calls[-search.FINALISTS:]]
        assert finals == [1.0] * search.FINALISTS and 0.8 <= result.seconds - 0.1 * search.FINALISTS < 1.0
    else:
        last = bench.calls[-1][1] * 0.1
        assert 1.0 - 0.1 <= result.seconds - last < 1.0  # stopped right after crossing the budget
    assert choose(result.measurements.values()) is not None


def test_the_strategy_compute_counts_against_the_budget():
    ticks = iter(range(10**6))
    times = {c.id: landscape(c) for c in SPACE}
    result = run_search(SearchSettings("surrogate", None, 50.0), SPACE, {}, Bench(times, seconds=0.0),
                        clock=lambda: float(next(ticks)))
    assert result.compute_seconds > 0 and result.seconds == pytest.approx(result.compute_seconds)
    # screening ended on compute alone, at its share of the budget; then the finalists
    assert result.seconds >= 50.0 * search.SCREEN_SECONDS_SHARE and result.configs_measured < len(SPACE)


def test_random_measures_its_draw_and_a_drawn_config_that_failed_to_compile_counts():
    times = {c.id: landscape(c) for c in SPACE}
    draw = up_front(SearchSettings("random", 12), SPACE)
    invalid = {draw[3].id: "shared_memory: too big", SPACE[0].id: "compile_error: x"}
    bench = Bench(times)
    result = run_search(SearchSettings("random", 12), SPACE, invalid, bench, clock=still_clock)
    assert [c for c, _ in bench.calls] == [c.id for c in draw if c.id not in invalid]
    assert result.measurements[draw[3].id].status == "invalid" and result.configs_measured == 12
    assert (SPACE[0].id in result.measurements) == (SPACE[0] in draw)  # only drawn failures are listed


@pytest.mark.parametrize("strategy", ["successive_halving", "surrogate"])
def test_adaptive_strategies_ask_verdicts_only_of_configs_they_reach_and_carry_on_past_failures(strategy):
    times = {c.id: landscape(c) for c in SPACE}
    invalid = {c.id: "shared_memory: too big" for c in SPACE if c.as_dict()["A"] == 128}
    asked: list[str] = []

    def verdicts(configs):  # what the bench stage does: compile these now, report the failures
        assert not set(asked) & {c.id for c in configs}, "a verdict is asked once"
        asked.extend(c.id for c in configs)
        return {c.id: invalid[c.id] for c in configs if c.id in invalid}

    bench = Bench(times)
    result = run_search(SearchSettings(strategy, 15), SPACE, verdicts, bench, clock=still_clock)
    failed = {cid for cid, m in result.measurements.items() if m.status == "invalid"}
    assert not {c for c, _ in bench.calls} & set(invalid)  # never launched
    assert failed and failed <= set(invalid)  # the search reached some failures ...
    assert result.configs_measured == 15 == len(result.measurements) - len(failed)  # ... and they were free
    assert set(asked) == set(result.measurements) and len(asked) < len(SPACE)  # the rest never compiled
    # the same records when every verdict was known before the search (a replay, a warm rerun)
    again = run_search(SearchSettings(strategy, 15), SPACE, invalid, Bench(times), clock=still_clock)
    assert again.measurements == result.measurements and again.configs_measured == 15


def test_a_surrogate_design_and_round_keep_their_size_when_some_of_their_configs_fail_to_compile():
    """The design's and each round's configs that fail to compile give way to the next ones of
    the design's order and the model's ranking: the surrogate still screens INITIAL_DESIGN, then
    BATCH valid configs at a time, as it did when failures were filtered out before it started."""
    times = {c.id: landscape(c) for c in SPACE}
    invalid = {c.id: "shared_memory: too big" for c in SPACE if c.as_dict()["A"] == 128}
    batches: list[list[str]] = []

    def measure_batch(probes):
        batches.append([config.id for config, _ in probes])
        return [Bench(times)(config, share) for config, share in probes]

    result = run_search(SearchSettings("surrogate", 20), SPACE, invalid, Bench(times), clock=still_clock,
                        measure_batch=measure_batch)
    failed = [cid for cid, m in result.measurements.items() if m.status == "invalid"]
    assert failed, "the design or a round reached a config that fails"
    assert not {cid for batch in batches for cid in batch} & set(invalid)
    assert [len(b) for b in batches[:-1]] == [search.INITIAL_DESIGN] + [search.BATCH] * 3  # 8 + 3 x 4 = 20
    assert len(batches[-1]) == search.FINALISTS and result.configs_measured == 20


# -- successive halving -----------------------------------------------------------------------------

def test_successive_halving_times_short_then_promotes_the_best_third_twice():
    times = {c.id: landscape(c) for c in SPACE}
    bench = Bench(times)
    result = run_search(SearchSettings("successive_halving", 27, seed=2), SPACE, {}, bench, clock=still_clock)
    shares = [share for _, share in bench.calls]
    assert shares == [1 / 9] * 27 + [1 / 3] * 9 + [1.0] * 3
    pool = [c for c, s in bench.calls if s == 1 / 9]
    assert pool == [c.id for c in seeded_order(SPACE, 2)[:27]]
    middle = sorted(pool, key=lambda c: (times[c], c))[:9]
    assert [c for c, s in bench.calls if s == 1 / 3] == middle
    assert [c for c, s in bench.calls if s == 1.0] == sorted(middle, key=lambda c: (times[c], c))[:3]
    final = [m for m in result.measurements.values() if not m.short_rep_ms]
    assert len(final) == 3 and choose(result.measurements.values()) in final


def test_picks_compare_full_timings_only():
    a, b, c = SPACE[:3]
    full, short_fast = measurement(a, 2.0), measurement(b, 1.0, short_rep_ms=2.0)
    assert choose([full, short_fast]).config.id == a.id  # a short timing never beats a full one
    assert comparable([short_fast, measurement(c, 0.5, short_rep_ms=0.5)]) == [short_fast]  # else the longest
    assert choose([measurement(c, 0.5, status="crashed")]) is None


# -- the surrogate -----------------------------------------------------------------------------------

def test_the_additive_model_learns_main_effects_and_a_pair_interaction():
    model = AdditiveModel(varying_params(SPACE))
    assert model.tables[:5] == (("A",), ("B",), ("C",), ("D",), ("E",)) and len(model.tables) == 15
    train = seeded_order(SPACE, 0)[:120]
    model.fit([("s", c, math.log(landscape(c)), 1.0) for c in train])
    rest = [c for c in SPACE if c not in train]
    predicted = sorted(rest, key=model.predict)[:10]
    truth = sorted(rest, key=landscape)[:10]
    assert len(set(predicted) & set(truth)) >= 5


def test_maximin_design_spreads_over_the_space_from_its_first_points():
    design = maximin_design(SPACE, 6, [SPACE[0]])
    assert design[0] == SPACE[0] and len(set(design)) == 6
    assert {c.as_dict()["A"] for c in design} >= {16, 128} and {c.as_dict()["E"] for c in design} == {"x", "y"}


def test_the_surrogate_finds_near_best_configs_where_random_does_not():
    times = {c.id: landscape(c) for c in SPACE}
    surrogate = [pick_ratio(run_search(SearchSettings("surrogate", 30, seed=s), SPACE, {}, Bench(times),
                                       clock=still_clock), times) for s in range(3)]
    randoms = [pick_ratio(run_search(SearchSettings("random", 30, seed=s), SPACE, {}, Bench(times),
                                     clock=still_clock), times) for s in range(3)]
    assert max(surrogate) <= 1.02, surrogate
    assert sum(map(math.log, surrogate)) < sum(map(math.log, randoms)), (surrogate, randoms)


def test_the_surrogate_screens_short_and_times_its_fastest_in_full_for_the_pick():
    times = {c.id: landscape(c) for c in SPACE}
    bench = Bench(times)
    result = run_search(SearchSettings("surrogate", 24, seed=1), SPACE, {}, bench, clock=still_clock)
    screened = [c for c, s in bench.calls if s == search.SCREEN_SHARE]
    finals = [c for c, s in bench.calls if s == 1.0]
    assert len(bench.calls) == 24 + search.FINALISTS and len(set(screened)) == 24 == result.configs_measured
    assert bench.calls[-search.FINALISTS:] == [(c, 1.0) for c in finals]  # full timings come last
    assert finals == sorted(screened, key=lambda c: (times[c], c))[:search.FINALISTS]
    pick = choose(result.measurements.values())
    assert not pick.short_rep_ms and pick.config.id == min(finals, key=times.get)
    assert result.seconds == pytest.approx(0.01 * (24 * search.SCREEN_SHARE + search.FINALISTS))


def test_the_surrogate_measures_its_design_rounds_and_finalists_as_batches():
    times = {c.id: landscape(c) for c in SPACE}
    batches = []

    def measure_batch(probes):
        batches.append([(c.id, share) for c, share in probes])
        return [measurement(c, times[c.id], 0.01 * share, short_rep_ms=20 * share if share < 1 else 0.0)
                for c, share in probes]

    def one(config, share):
        raise AssertionError("a batch of the surrogate was measured one by one")

    result = run_search(SearchSettings("surrogate", 22, seed=3), SPACE, {}, one, clock=still_clock,
                        measure_batch=measure_batch)
    sizes = [len(b) for b in batches]
    # the design, rounds of BATCH (the last one cut to the budget), then the finalists
    assert sizes == [search.INITIAL_DESIGN, search.BATCH, search.BATCH, search.BATCH, 2, search.FINALISTS]
    assert all(s == search.SCREEN_SHARE for b in batches[:-1] for _, s in b) and all(s == 1.0 for _, s in batches[-1])
    bench = Bench(times)
    same = run_search(SearchSettings("surrogate", 22, seed=3), SPACE, {}, bench, clock=still_clock)
    assert [p for b in batches for p in b] == bench.calls  # batched or not, the same probes
    assert choose(same.measurements.values()).config.id == choose(result.measurements.values()).config.id


def test_failed_measurements_are_kept_and_never_modelled_or_picked():
    times = {c.id: landscape(c) for c in SPACE}
    best = min(SPACE, key=lambda c: times[c.id])
    bench = Bench(times, failing={best.id})
    source = Source((64,), 1.0, ((best, 1.0),), (best,))
    result = run_search(SearchSettings("surrogate", 10), SPACE, {}, bench, [source], clock=still_clock)
    assert bench.calls[0][0] == best.id and result.measurements[best.id].status == "wrong_result"
    assert choose(result.measurements.values()).config.id != best.id


# -- transfer ------------------------------------------------------------------------------------------

def searched_record(shape, result) -> TuningRecord:
    record = TuningRecord(shape=list(shape))
    record.measurements.extend(result.measurements[k] for k in sorted(result.measurements))
    record.best.CopyFrom(choose(record.measurements).config)
    return record


def test_neighbours_winners_go_first_and_the_record_names_them():
    near = {c.id: landscape(c, shift=0.5) for c in SPACE}
    here = {c.id: landscape(c) for c in SPACE}
    neighbour = searched_record((2,), run_search(SearchSettings("surrogate", 30), SPACE, {}, Bench(near),
                                                 clock=still_clock))
    source = source_from_record(neighbour, (1,))
    assert source.distance == 1.0 and source.winners[0].id == neighbour.best.id
    for strategy, first in (("surrogate", 1), ("successive_halving", 3)):
        bench = Bench(here)
        result = run_search(SearchSettings(strategy, 20), SPACE, {}, bench, [source], clock=still_clock)
        assert [c for c, _ in bench.calls[:first]] == [c.id for c in source.winners[:first]]
        assert [seed[:2] for seed in result.seeded_by] == [((2,), tuple(c.id for c in source.winners[:first]))]
        off = run_search(SearchSettings(strategy, 20, transfer=False), SPACE, {}, Bench(here), [source],
                         clock=still_clock)
        assert off.seeded_by == []


def test_transfer_from_a_close_neighbour_helps_the_surrogate_on_a_small_budget():
    near = {c.id: landscape(c, shift=0.3) for c in SPACE}
    here = {c.id: landscape(c) for c in SPACE}
    neighbour = searched_record((2,), run_search(SearchSettings("surrogate", 40), SPACE, {}, Bench(near),
                                                 clock=still_clock))
    source = source_from_record(neighbour, (1,))
    seeded = [pick_ratio(run_search(SearchSettings("surrogate", 12, seed=s), SPACE, {}, Bench(here), [source],
                                    clock=still_clock), here) for s in range(3)]
    alone = [pick_ratio(run_search(SearchSettings("surrogate", 12, seed=s), SPACE, {}, Bench(here),
                                   clock=still_clock), here) for s in range(3)]
    assert sum(map(math.log, seeded)) <= sum(map(math.log, alone)), (seeded, alone)


def test_a_record_covers_the_candidates_it_searched():
    record = TuningRecord()
    record.search.candidates = "x"
    assert not covers(record, SPACE)
    from aot_tune.search.strategies import candidate_digest

    record.search.candidates = candidate_digest(list(reversed(SPACE)))
    assert covers(record, SPACE) and not covers(record, SPACE[1:])
    assert not covers(TuningRecord(), SPACE)  # an exhaustive record answers no budgeted search
