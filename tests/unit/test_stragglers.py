"""Straggler compiles (aot_tune.pipeline.stragglers): a bench stops waiting for one that cannot
win on its shape, and the compile deadline gives up only compiles no bench may still pick."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

from aot_tune.pipeline.stragglers import StragglerJudge, Stragglers, cannot_win
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement

#: A tile space whose time is driven by warps (1 warp: 4x slower) and tiles (256: 1.5x slower).
SPACE = [Config.from_dict({"BLOCK": b, "num_warps": w}) for b, w in itertools.product([64, 128, 256], [1, 4, 8])]


def time_of(config: Config) -> float:
    params = dict(config.params)
    return 0.1 * {1: 4.0, 4: 1.0, 8: 1.1}[params["num_warps"]] * {64: 1.2, 128: 1.0, 256: 1.5}[params["BLOCK"]]


def config(block: int, warps: int) -> Config:
    return Config.from_dict({"BLOCK": block, "num_warps": warps})


def test_a_config_predicted_far_slower_than_the_best_cannot_win():
    straggler = config(256, 1)
    measured = [(c, time_of(c)) for c in SPACE if c != straggler]
    why = cannot_win(straggler, measured, SPACE)
    assert why.startswith("predicted ") and why.endswith("it cannot win")


def test_a_config_that_might_win_or_is_unknown_is_waited_for():
    measured = [(c, time_of(c)) for c in SPACE if c != config(128, 4)]
    assert cannot_win(config(128, 4), measured, SPACE) == ""  # the fastest of all
    few = [(c, time_of(c)) for c in SPACE[:5]]
    assert cannot_win(config(256, 1), few, SPACE) == ""  # too few measurements to judge
    unseen = [(c, t) for c, t in measured if dict(c.params)["num_warps"] != 1]
    assert cannot_win(config(256, 1), unseen, SPACE + [config(256, 1)]) == ""  # one warp never measured


def test_a_compile_straggles_past_a_multiple_of_its_peers_median():
    now = [0.0]
    stragglers = Stragglers(clock=lambda: now[0])
    for i in range(4):
        stragglers.compile_ended(f"peer{i}", "k", "sm90", 1.0)
    stragglers.compile_started("slow")
    now[0] = 2.9
    assert stragglers.straggling("slow", "k", "sm90") is None  # under 3x the median (1 s)
    now[0] = 3.5
    assert stragglers.straggling("slow", "k", "sm90") == 3.5
    assert stragglers.straggling("slow", "k", "sm80") is None  # no peers of that target yet
    stragglers.compile_ended("slow", "k", "sm90", None)
    assert stragglers.straggling("slow", "k", "sm90") is None


def test_a_waiting_bench_gives_up_only_stragglers_that_cannot_win_and_the_deadline_hears_it():
    now = [0.0]
    stragglers = Stragglers(clock=lambda: now[0])
    for i in range(4):
        stragglers.compile_ended(f"peer{i}", "k", "sm90", 1.0)
    losing, winning, queued = config(256, 1), config(128, 4), config(64, 8)
    entries = {}
    for c in SPACE:
        if c not in (losing, winning, queued):
            m = Measurement(status="ok", median_ms=time_of(c))
            m.config.id = c.id
            entries[c.id] = m
    compiles = {c.id: [SimpleNamespace(name=f"compile-{c.id}", target="sm90")] for c in SPACE}
    stragglers.compile_started(f"compile-{losing.id}")
    stragglers.compile_started(f"compile-{winning.id}")
    now[0] = 10.0  # both run 10 s against a 1 s median; `queued` has not started
    bench = SimpleNamespace(name="bench:k:h100:float16:1024", configs=tuple(SPACE))
    judge = StragglerJudge(bench, entries, lambda c: compiles[c.id], lambda unit: False, stragglers, "k",
                           clock=lambda: now[0])
    assert judge.give_up([losing, winning, queued]) == [losing]
    assert list(judge.given_up) == [losing.id] and judge.given_up[losing.id].startswith("compile still running after 10 s")
    assert judge.give_up([winning, queued]) == []  # judged again only after LOOK_EVERY_S
    assert not stragglers.may_still_pick(bench.name, losing.id) and stragglers.may_still_pick(bench.name, winning.id)
    assert stragglers.gave_up(bench.name, losing.id) and not stragglers.gave_up(bench.name, winning.id)
    assert not stragglers.gave_up("bench:k:h100:float16:2048", losing.id)
    stragglers.finished(bench.name)
    assert not stragglers.may_still_pick(bench.name, winning.id) and stragglers.given_up == 1
    assert not stragglers.gave_up(bench.name, winning.id)  # finished without judging it: nothing given up


def test_a_compile_is_lost_once_the_benches_that_needed_it_gave_it_up_even_after_they_finished():
    """The compile stage's view (``Compiles._lost``): a bench's written record holds the config
    it gave up, so it no longer measures it; it still counts as having given it up. A bench that
    still has the config to measure (running, or failed before it judged it) keeps the compile,
    and one that measured it in an earlier run has no say."""
    from aot_tune.pipeline.compiling import Compiles

    straggler = config(256, 1)
    benches = [SimpleNamespace(name=f"bench:k:h100:float16:{m}", device="h100",
                               search=SimpleNamespace(exhaustive=True)) for m in (1024, 2048, 4096)]
    measures = {b.name: True for b in benches}
    kp = SimpleNamespace(benches_for=lambda launch: benches, bench_targets=lambda device: ("sm90",))
    compiles = Compiles.__new__(Compiles)
    compiles.plan = SimpleNamespace(device_of=lambda bench: "h100")
    compiles.staleness = SimpleNamespace(measures=lambda kp, bench, config: measures[bench.name])
    compiles.stragglers = Stragglers()
    unit = SimpleNamespace(launches=[("shape", "float16")], target="sm90", config=straggler)
    assert not compiles._lost(kp, unit) and compiles._may_win(kp, unit)
    measures[benches[2].name] = False  # measured in an earlier run: no say
    compiles.stragglers.give_up(benches[0].name, straggler.id)
    compiles.stragglers.finished(benches[0].name)
    measures[benches[0].name] = False  # its record now holds the config, given up
    assert not compiles._lost(kp, unit)  # the second bench still waits for it
    compiles.stragglers.give_up(benches[1].name, straggler.id)
    assert compiles._lost(kp, unit) and compiles._may_win(kp, unit) is False
    compiles.stragglers.finished(benches[1].name)
    measures[benches[1].name] = False
    assert compiles._lost(kp, unit) and compiles._may_win(kp, unit) is None  # all written: the deadline's case
    compiles.stragglers = Stragglers()  # a run in which no bench judged it
    assert not compiles._lost(kp, unit)
