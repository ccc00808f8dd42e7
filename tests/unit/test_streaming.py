"""Benches streaming behind compiles: configs in waves as their compiles land, every compile run
once whichever thread claims it first."""
from __future__ import annotations

import threading

from aot_tune.pipeline.streaming import CompileClaims, landed_waves


def test_configs_come_in_waves_as_their_compiles_land_in_config_order():
    landed = {"a1", "b1"}
    compiles = {"a": ["a1"], "b": ["b1", "b2"], "c": ["c1"]}
    claims = CompileClaims()
    ran = []

    def run_here(name):
        claims.run_once(name, lambda: (ran.append(name), landed.add(name)))

    waves = landed_waves(["a", "b", "c"], compiles.__getitem__, landed.__contains__, claims.claimed, run_here)
    assert next(waves) == ["a"]
    # Nothing else landed and nobody claimed b2: the bench compiles it itself, first in config order.
    assert next(waves) == ["b"] and ran == ["b2"]
    landed.add("c1")
    assert next(waves) == ["c"] and ran == ["b2"]
    assert next(waves, None) is None


def test_a_bench_waits_for_a_compile_another_thread_claimed():
    claims, landed, release = CompileClaims(), set(), threading.Event()

    def compile_task():
        release.wait(10)
        landed.add("x1")

    worker = threading.Thread(target=claims.run_once, args=("x1", compile_task))
    worker.start()
    while not claims.claimed("x1"):
        pass
    waves = landed_waves(["x"], lambda c: ["x1"], landed.__contains__, claims.claimed,
                         lambda name: claims.run_once(name, lambda: landed.add("ran here")))
    threading.Timer(0.2, release.set).start()
    assert next(waves) == ["x"] and "ran here" not in landed
    worker.join()


def test_a_claimed_compile_runs_once_and_later_claimants_wait_for_it():
    claims, runs = CompileClaims(), []
    started, release = threading.Event(), threading.Event()

    def work():
        runs.append(1)
        started.set()
        release.wait(10)

    first = threading.Thread(target=claims.run_once, args=("u", work))
    first.start()
    started.wait(10)
    second = threading.Thread(target=claims.run_once, args=("u", work))
    second.start()
    second.join(0.2)
    assert second.is_alive() and not claims.finished("u")  # waiting for the first claimant
    release.set()
    first.join(10)
    second.join(10)
    assert runs == [1] and claims.finished("u")


def test_a_scheduled_compile_returns_at_once_and_a_failure_is_reported_to_its_benches():
    from concurrent.futures import ThreadPoolExecutor

    claims, release = CompileClaims(), threading.Event()

    def failing():
        release.wait(10)
        raise OSError("disk full")

    with ThreadPoolExecutor(1) as driver:
        claims.schedule("u", failing, driver)
        claims.schedule("u", lambda: None, driver)  # claimed already: not queued again
        assert claims.claimed("u") and not claims.finished("u")
        release.set()
        claims.run_once("u", lambda: None)  # waits for the claimant
    assert claims.finished("u") and claims.failures(["u", "v"]) == "u failed: OSError: disk full"
