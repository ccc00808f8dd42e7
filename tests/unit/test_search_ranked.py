"""The ranked strategy on a synthetic space: sources that rank well, badly or not at all, configs
new in the space, budgets, the stopping rule's model, and which cache records are sources.

Times come from test_search's deterministic landscape; a source is this shape's times on
"another device", so every search follows one path and the assertions are exact.
"""
from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from aot_tune import cache as cache_io
from aot_tune.cache import Mismatch
from aot_tune.manifest import SearchSettings
from aot_tune.search import ranked
from aot_tune.search.ranked import fit_source, source_records
from aot_tune.search.strategies import candidate_digest, run_search
from aot_tune.search.transfer import Source
from aot_tune.select import choose
from aot_tune.tuning_schema import Measurement, TuningRecord

from test_search import SPACE, Bench, landscape, still_clock

HERE = {c.id: landscape(c) for c in SPACE}
BEST = min(HERE, key=HERE.get)
RANKED = SearchSettings("ranked")


def source(times: dict[str, float], shape=(1,), distance: float = 0.0, device: str = "h200") -> Source:
    ordered = sorted((c for c in SPACE if c.id in times), key=lambda c: (times[c.id], c.id))
    return Source(shape, distance, tuple((c, times[c.id]) for c in ordered), tuple(ordered), device, "3.6.0")


def search(sources, settings=RANKED, times=HERE, invalid=None):
    bench = Bench(times)
    batches = []

    def measure_batch(probes):
        batches.append([c.id for c, _ in probes])
        return [bench(c, share) for c, share in probes]

    result = run_search(settings, SPACE, invalid or {}, bench, sources, clock=still_clock, measure_batch=measure_batch)
    search.calls = bench.calls
    return result, batches


def picked(result) -> str:
    return choose(result.measurements.values()).config.id


def test_a_source_that_ranks_perfectly_measures_few_and_picks_the_best():
    result, batches = search([source({k: 1.3 * v for k, v in HERE.items()})])  # another GPU: 30% slower
    assert picked(result) == BEST
    # One exact fit (the spread is 0, the margin MIN_MARGIN): after the first batch, only configs
    # predicted within 5% of the best here can win, and those are the ones measured.
    first = set(batches[0])
    within = {k for k, t in HERE.items() if t < HERE[BEST] * math.exp(ranked.MIN_MARGIN)}
    assert set(result.measurements) == first | within
    assert len(first) == ranked.FIRST_RANKS + ranked.RANKING_CHECKS and result.configs_measured < 0.05 * len(SPACE)
    assert all(share == 1.0 for _, share in search.calls)  # every timing full
    assert [seed[1] for seed in result.seeded_by] == [tuple(batches[0][:ranked.FIRST_RANKS])]
    assert result.seeded_by[0].device == "h200" and result.seeded_by[0].triton == "3.6.0"


def test_where_the_finals_follow_every_timing_is_a_screening_one_and_it_stops_as_soon():
    """On a GPU the bench's finals time the fastest again in full: the search screens, and its
    stopping rule compares its screening timings with one another."""
    perfect = [source({k: 1.3 * v for k, v in HERE.items()})]
    full, _ = search(perfect)
    bench = Bench(HERE)
    screened = run_search(RANKED, SPACE, {}, bench, perfect, clock=still_clock, finals=True)
    assert {share for _, share in bench.calls} == {ranked.SCREEN_SHARE}
    assert set(screened.measurements) == set(full.measurements) and picked(screened) == BEST
    alone = Bench(HERE)  # no source: every config, screened
    run_search(RANKED, SPACE, {}, alone, [], clock=still_clock, finals=True)
    assert len(alone.calls) == len(SPACE) and {share for _, share in alone.calls} == {ranked.SCREEN_SHARE}


def test_a_source_that_ranks_badly_keeps_it_measuring_until_the_rest_cannot_win():
    rng = random.Random(0)
    shuffled = dict(zip(HERE, rng.sample(sorted(HERE.values()), len(HERE))))
    result, batches = search([source(shuffled)])
    assert picked(result) == BEST
    assert result.configs_measured > 0.3 * len(SPACE)
    assert all(len(b) <= ranked.BATCH for b in batches[1:])
    # It stopped because even the optimistic time of every config left is slower than the best.
    here = {k: math.log(m.median_ms) for k, m in result.measurements.items()}
    fit = fit_source(source(shuffled), here)
    assert all(fit.predict(k)[0] - fit.predict(k)[1] >= min(here.values()) for k in HERE if k not in here)


def test_a_ranking_reversed_here_is_not_trusted():
    result, _ = search([source({k: 1 / v for k, v in HERE.items()})])
    assert picked(result) == BEST


def test_a_config_new_in_the_space_is_measured_in_the_first_batch():
    slowest = max(HERE, key=HERE.get)
    known = {k: 1.3 * v for k, v in HERE.items() if k != slowest}  # the source's space lacked it
    result, batches = search([source(known)])
    assert slowest in batches[0] and result.measurements[slowest].status == "ok"
    assert picked(result) == BEST and result.configs_measured < 0.05 * len(SPACE)


def test_a_searched_source_rules_out_what_it_left_unmeasured_among_the_same_candidates():
    fastest = sorted(HERE, key=HERE.get)[:20]
    partial = {k: 1.3 * HERE[k] for k in fastest}  # an earlier ranked record: its search measured these
    searched = replace(source(partial), candidates=candidate_digest(SPACE), measured=frozenset(partial))
    result, _ = search([searched])
    assert picked(result) == BEST and result.configs_measured < len(fastest)
    elsewhere = replace(searched, candidates=candidate_digest(SPACE[1:]))  # it chose among other candidates
    result, batches = search([elsewhere])
    assert set(HERE) - set(fastest) <= set(batches[0])  # so the others may be new here: measured


def test_without_a_source_of_this_shape_every_config_is_measured():
    neighbour = source({k: 1.3 * v for k, v in HERE.items()}, shape=(2,), distance=1.0)
    for sources in ([], [neighbour], [source({})]):
        result, batches = search(sources)
        assert result.configs_measured == len(SPACE) and picked(result) == BEST
        assert len(batches) == 1 and result.seeded_by == []


def test_a_neighbouring_shapes_winner_joins_the_first_batch_and_the_record_names_it():
    near = {k: landscape(c, shift=1.0) for k, c in ((c.id, c) for c in SPACE)}
    neighbour_best = min(near, key=near.get)
    same = source({k: 1.3 * v for k, v in HERE.items()})
    result, batches = search([source(near, shape=(2,), distance=1.0), same])
    top = sorted(HERE, key=HERE.get)[:ranked.FIRST_RANKS]
    assert neighbour_best in batches[0]
    assert [(s.shape, s.config_ids) for s in result.seeded_by] == \
        [((1,), tuple(top)), ((2,), () if neighbour_best in top else (neighbour_best,))]


def test_failed_compiles_and_failed_runs_are_never_predicted_or_picked():
    there = {k: 1.3 * v for k, v in HERE.items()}
    result, batches = search([source(there)], invalid={BEST: "shared_memory: too big"})
    assert BEST not in {c for b in batches for c in b} and result.measurements[BEST].status == "invalid"
    second = sorted(HERE, key=HERE.get)[1]
    assert picked(result) == second


@pytest.mark.parametrize("budget", [3, 20])
def test_a_configs_budget_caps_it_further(budget):
    rng = random.Random(0)
    shuffled = dict(zip(HERE, rng.sample(sorted(HERE.values()), len(HERE))))
    result, _ = search([source(shuffled)], SearchSettings("ranked", budget))
    assert result.configs_measured == budget


def test_the_fit_needs_min_fit_configs_before_it_rules_anything_out():
    there = source({k: 2.0 * v for k, v in HERE.items()})
    ids = sorted(HERE)[:ranked.MIN_FIT]
    loose = fit_source(there, {k: math.log(HERE[k]) for k in ids[:-1]})
    assert loose is not None and loose.predict(ids[-1])[1] == math.inf
    exact = fit_source(there, {k: math.log(HERE[k]) for k in ids})
    predicted, margin = exact.predict(BEST)
    assert exact.slope == pytest.approx(1.0) and predicted == pytest.approx(math.log(HERE[BEST]))
    assert margin == pytest.approx(ranked.MIN_MARGIN)  # a perfect fit still keeps the least margin
    assert fit_source(there, {}) is None and fit_source(there, {ids[0]: 0.0}) is None  # no slope from one point


def test_the_margin_widens_with_the_spread_and_away_from_the_configs_fitted():
    rng = random.Random(1)
    there = source({k: v * math.exp(rng.gauss(0, 0.1)) for k, v in HERE.items()})
    fitted = sorted(HERE, key=HERE.get)[:12]
    fit = fit_source(there, {k: math.log(HERE[k]) for k in fitted})
    assert fit.spread > 0.03
    near, far = fit.predict(fitted[0])[1], fit.predict(max(HERE, key=HERE.get))[1]
    assert ranked.MIN_MARGIN < near < far


# -- which cache records are sources ---------------------------------------------------------------

def record(device: str, shape=(64,), fingerprint="fp", triton="3.6.0", backend="cuda", dtype="float16",
           kernel="k") -> TuningRecord:
    r = TuningRecord(kernel=kernel, key_names=["n"], shape=list(shape), dtype=dtype, fingerprint=fingerprint)
    r.device.key, r.device.backend, r.toolchain.triton = device, backend, triton
    m = Measurement(status="ok", median_ms=1.0, runs=10)
    cache_io.config_to_proto(SPACE[0].id, SPACE[0].as_dict(), m.config)
    r.measurements.append(m)
    r.best.CopyFrom(m.config)
    return r


def test_sources_are_this_shapes_records_of_other_devices_and_fingerprints_then_their_neighbours():
    here = dict(kernel="k", dtype="float16", shape=(64,), device="h100-sxm", fingerprint="new", backend="cuda")
    records = {
        "other GPU": record("h200"),
        "its neighbour": record("h200", shape=(128,)),
        "this GPU, older triton": record("h100-sxm", fingerprint="old", triton="3.5.0"),
        "this GPU, this run": record("h100-sxm", fingerprint="new"),
        "neighbour of no source": record("a100", shape=(128,)),
        "the interpreter": record("interpreter", backend="interpreter"),
        "another dtype": record("h200", dtype="bfloat16"),
        "another kernel": record("h200", kernel="other"),
        "key changed": record("b200"),
    }
    stale = {"key changed": Mismatch("key", "the key changed from [m] to [n]")}
    found = source_records(((r, stale.get(name)) for name, r in records.items()), **here)
    names = {id(r): name for name, r in records.items()}
    assert [names[id(r)] for r in found] == ["this GPU, older triton", "other GPU", "its neighbour"]
    assert source_records(((records["its neighbour"], None),), **here) == []  # no record of this shape


def test_the_cost_model_expects_the_first_batch_and_one_more_where_a_source_exists():
    candidates = list(SPACE)
    two_origins = [record("h200"), record("h100-sxm", fingerprint="old", triton="3.5.0"), record("h200", shape=(128,))]
    count, batches = ranked.expected_measurements(candidates, two_origins, (64,))
    assert (count, batches) == (len(candidates), 2)  # the records time SPACE[0] alone: every other config is new
    assert ranked.expected_measurements(candidates, [record("h200", shape=(128,))], (64,)) == (len(candidates), 1)
    assert ranked.expected_measurements([], [], (64,)) == (0, 0)

    def timing_all(device: str, shape=(64,), **kw) -> TuningRecord:
        timed = record(device, shape=shape, **kw)
        for config in SPACE[1:]:
            m = Measurement(status="ok", median_ms=2.0 + SPACE.index(config) / 100, runs=10)
            cache_io.config_to_proto(config.id, config.as_dict(), m.config)
            timed.measurements.append(m)
        return timed

    one = ranked.FIRST_RANKS + ranked.RANKING_CHECKS + ranked.BATCH
    assert ranked.expected_measurements(candidates, [timing_all("h200")], (64,)) == (min(len(candidates), one), 2)
    # two origins and a neighbour that rank alike: their first batches are the same configs,
    # counted once, as the search measures them once (the GEMM retune measured 223 where 350
    # were expected when each source's were counted apart)
    alike = [timing_all("h200"), timing_all("h100-sxm", fingerprint="old", triton="3.5.0"),
             timing_all("h200", shape=(128,))]
    assert ranked.expected_measurements(candidates, alike, (64,)) == (min(len(candidates), one), 2)


def test_the_cost_model_expects_no_measurement_of_a_config_the_sources_found_invalid():
    """On the H200 the paper's GEMM space has 25 configs over the shared memory: an H100 retune
    compiles them and finds them invalid too, so they cost it no measurement (the dry run counted
    them as untimed and predicted 550 measurements where 231 were made)."""
    candidates = list(SPACE)
    source = record("h200")
    for config in SPACE[1:]:
        m = Measurement(status="invalid", reason="shared_memory")
        cache_io.config_to_proto(config.id, config.as_dict(), m.config)
        source.measurements.append(m)
    assert ranked.expected_measurements(candidates, [source], (64,)) == (1, 2)
