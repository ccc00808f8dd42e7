"""Benches streaming behind compiles: configs in waves as their compiles land, every compile run
once whichever thread claims it first."""
from __future__ import annotations

import threading

from aot_tune.pipeline.streaming import CompileClaims, landed_waves
from aot_tune.pipeline.stragglers import Stragglers


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
        claims.schedule("u", failing, driver.submit)
        claims.schedule("u", lambda: None, driver.submit)  # claimed already: not queued again
        assert claims.claimed("u") and not claims.finished("u")
        release.set()
        claims.run_once("u", lambda: None)  # waits for the claimant
    assert claims.finished("u") and claims.failures(["u", "v"]) == "u failed: OSError: disk full"
    assert claims.landings == 1  # a compile that raised has finished too: its benches look again


def test_run_all_runs_the_unclaimed_side_by_side_and_waits_for_the_claimed_ones():
    """A search's batch on demand: its unclaimed compiles run at once, in parallel; one another
    bench claimed is waited for, not run again; one that raised is reported, not lost."""
    claims, lock = CompileClaims(), threading.Lock()
    running, most, ran = [0], [0], []
    other_started, other_release = threading.Event(), threading.Event()

    def compile_(name):
        def work():
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            threading.Event().wait(0.2)
            with lock:
                running[0] -= 1
                ran.append(name)
            if name == "bad":
                raise OSError("disk full")
        return work

    other = threading.Thread(target=claims.run_once,
                             args=("theirs", lambda: (other_started.set(), other_release.wait(10), ran.append("theirs"))))
    other.start()
    other_started.wait(10)
    threading.Timer(0.5, other_release.set).start()
    names = ["a", "b", "bad", "theirs"]
    claims.run_all([(name, compile_(name)) for name in names], jobs=3)
    assert sorted(ran) == sorted(names) and ran.count("theirs") == 1  # theirs ran once, by its claimant
    assert all(claims.finished(name) for name in names) and most[0] == 3
    assert claims.failures(names) == "bad failed: OSError: disk full"
    claims.run_all([("a", compile_("again"))], jobs=3)  # finished before: nothing runs
    assert "again" not in ran
    other.join(10)


def test_the_record_does_not_depend_on_the_waves():
    """Measured in one batch or in waves as compiles land, a bench task records the same
    measurements (but for each one's share of its batch's wall time) and picks the same config."""
    import itertools
    from types import SimpleNamespace

    from aot_tune.bench.runner import ConfigMeasurement
    from aot_tune.manifest import BenchSettings
    from dataclasses import dataclass

    from aot_tune.pipeline.baselines import Baselines
    from aot_tune.pipeline.benching import Benches
    from aot_tune.runs.stats import RunStats
    from aot_tune.select import choose
    from aot_tune.space import Config

    configs = [Config.from_dict({"A": a, "B": b}) for a, b in itertools.product([16, 32, 64], [1, 2, 4])]
    invalid = {configs[4].id: "shared_memory: needs at least 300000 bytes"}

    batches = []

    @dataclass(frozen=True)
    class Request:
        config_id: str
        launch_ref: str = "kernels.k:launch"
        plain: bool = False
        baseline: bool = False

    class Lease:
        def measure_all(self, requests, timeout_s, more=None):
            """Results as they complete (not in request order); after each, the configs that
            landed meanwhile (``landing``, one step a result) are asked for and join the batch."""
            batches.append([r.config_id for r in requests])
            pending = list(reversed(requests))
            while pending:
                r = pending.pop(0)
                t = 1.0 + [c.id for c in configs].index(r.config_id) % 5 / 7 if r.config_id != "vendor" else 0.5
                yield ConfigMeasurement(r.config_id, "ok", times_ms=[t] * 12, method="events",
                                        phase_seconds={"check": 0.001, "timed": t / 50})
                if landing:
                    landed.update(landing.pop(0))
                    claims.landings += 1
                added = list(more()) if more is not None else []
                batches[-1] += [a.config_id for a in added]
                pending += added

    landed: set = set()
    landing: list = []
    claims = SimpleNamespace(landings=0)  # the compiles finished so far (CompileClaims.landings)

    def measure(waves, landed_meanwhile=(), landing_during=()):
        batches.clear()
        landed.clear()
        landed.update(landed_meanwhile)
        landing[:] = list(landing_during)
        benches = Benches.__new__(Benches)
        benches.compiles = SimpleNamespace(
            all_landed=lambda kp, unit, config, device: config in landed, stragglers=Stragglers(),
            landed=lambda cu: True, claims=claims,
            invalid_configs=lambda kp, unit, wave: {c.id: invalid[c.id] for c in wave if c.id in invalid})
        benches.stats = RunStats()
        benches.staleness = SimpleNamespace(configs_to_measure=lambda kp, unit: list(configs))
        benches._landed = lambda kp, unit, todo, device, on_wait, give_up: iter(waves)
        benches.request = lambda kp, unit, config, settings, device: SimpleNamespace(config_id=config.id)
        kp = SimpleNamespace(spec=SimpleNamespace(name="k", bench=BenchSettings(warmup_ms=2, rep_ms=18, l2_flush=True,
                                                                            l2_flush_bytes=None)))
        unit = SimpleNamespace(configs=tuple(configs), default_config=configs[0], vendor="kernels.k:vendor")
        hold = SimpleNamespace(lease=lambda upcoming=None: Lease(), release=lambda: None,
                               measure_all=lambda requests, timeout_s, more=None:
                                   list(Lease().measure_all(requests, timeout_s, more)))
        baselines = Baselines(unit, True, lambda config: Request(config.id), {c.id for c in configs}.__contains__)
        entries, fresh = benches._measure_all(kp, unit, hold, None, SimpleNamespace(backend="cuda"), baselines)
        assert "vendor" in batches[-1] and sum(b.count("vendor") for b in batches) == 1  # with the last batch
        assert baselines.measured["vendor"].times_ms == [0.5] * 12 and "vendor" not in entries
        assert baselines.protos(entries)["default"] is entries[configs[0].id]  # a config of the space: not timed again
        for entry in entries.values():
            entry.seconds = 0.0  # each one's share of its batch's wall time
        return [entries[k] for k in sorted(entries)], sorted(m.config_id for m in fresh)

    batch, batch_fresh = measure([configs])
    waves, waves_fresh = measure([configs[6:], configs[:1], configs[1:6]])
    assert batch == waves and batch_fresh == waves_fresh and len(batch) == len(configs)
    assert choose(batch, "").config == choose(waves, "").config
    assert [e.status for e in batch].count("invalid") == 1
    measure([configs[:4], configs[4:5]])  # the last wave holds only an invalid config: the vendor alone
    # configs that land while a batch waits for the device join it, and are not measured again
    joined, joined_fresh = measure([configs[:2], configs[2:], configs[5:]], landed_meanwhile=configs[2:5])
    assert joined_fresh == batch_fresh and [len(b) for b in batches] == [4, 5]  # 5 configs + the vendor
    # configs that land while a batch runs join it as it goes, the invalid one a result at once,
    # and the vendor comes once the last config has joined
    running, running_fresh = measure([configs[:2], configs[2:6], configs[6:]],
                                     landing_during=[configs[2:4], (), configs[4:6]])
    assert running_fresh == batch_fresh and running == batch
    assert batches == [[c.id for c in configs[:4] + configs[5:6]], [c.id for c in configs[6:]] + ["vendor"]]


def test_a_bench_lets_its_device_go_while_it_waits_and_counts_what_it_held():
    """The hold takes a device for a wave, lets it go for the wait, takes it again; it adds up
    the cache hits of every lease and the seconds held."""
    import contextlib
    import time
    from types import SimpleNamespace

    from aot_tune.pipeline.streaming import DeviceHold

    events = []

    class Devices:
        @contextlib.contextmanager
        def lease(self, device, upcoming=None):
            events.append("take")
            lease = SimpleNamespace(cache_hits=2, cache_misses=1, seconds={"batches": 0.5},
                                    ready=lambda: events.append("ready"))
            yield lease
            events.append("give")

    landed, claims = {"a1"}, CompileClaims()
    hold = DeviceHold(Devices(), "h100")
    waves = landed_waves(["a", "b"], lambda c: [c + "1"], landed.__contains__, claims.claimed,
                         lambda name: (time.sleep(0.01), landed.add(name)), hold.release)
    for wave in waves:
        hold.lease()
        events.append(wave)
    assert hold.counts() == (4, 2)  # both leases, the one of wave b still held
    hold.release()
    assert events == ["take", "ready", ["a"], "give", "take", "ready", ["b"], "give"]
    assert (hold.cache_hits, hold.cache_misses) == (4, 2) and hold.held_s > 0
    assert hold.seconds == {"batches": 1.0}  # the device workers' seconds, added over both leases


def test_a_hold_does_not_count_what_its_batches_waited_for_the_worker_to_start():
    """A cluster worker starts its device process with the run; the lease says how long its first
    batch waited for it (STARTUP_WAITED), and that is start-up, not device time held."""
    import contextlib
    import time
    from types import SimpleNamespace

    from aot_tune.bench.runner import STARTUP_WAITED
    from aot_tune.pipeline.streaming import DeviceHold

    class Devices:
        @contextlib.contextmanager
        def lease(self, device, upcoming=None):
            lease = SimpleNamespace(cache_hits=0, cache_misses=0, seconds={}, ready=lambda: None)

            def measure_all(requests, timeout_s, more=None):
                time.sleep(0.3)  # 0.25 s of it the worker's start-up
                lease.seconds = {"batches": 0.05, STARTUP_WAITED: 0.25}
                return []
            lease.measure_all = measure_all
            yield lease

    heard = []
    hold = DeviceHold(Devices(), "h100", on_progress=lambda seconds, measured: heard.append(seconds))
    hold.measure_all([], 1.0)
    assert len(heard) == 1 and 0.04 <= heard[0] < 0.25  # after each batch: the device time held so far
    hold.release()
    assert 0.04 <= hold.held_s < 0.25  # 0.3 s and more without the start-up taken out
    assert hold.held_s >= heard[0] and hold.held_now() == hold.held_s
    assert hold.seconds[STARTUP_WAITED] == 0.25


def test_a_hold_tells_the_measurements_of_its_batches_and_leaves_the_finals_out():
    """The progress estimate hears each result as it comes against the measurements the forecast
    predicted, which do not count the finals (their seconds are priced apart): once at a finals
    batch's end."""
    import contextlib
    from types import SimpleNamespace

    from aot_tune.pipeline.streaming import DeviceHold

    class Devices:
        @contextlib.contextmanager
        def lease(self, device, upcoming=None):
            yield SimpleNamespace(cache_hits=0, cache_misses=0, seconds={}, ready=lambda: None,
                                  measure_all=lambda requests, timeout_s, more=None: list(requests))

    heard = []
    hold = DeviceHold(Devices(), "h100", on_progress=lambda seconds, measured: heard.append(measured))
    searched, finals = [SimpleNamespace(final_rounds=0)] * 4, [SimpleNamespace(final_rounds=5)] * 3
    for batch in (searched, searched, finals):
        hold.measure_all(batch, 1.0)
    assert heard == [1, 2, 3, 4, 5, 6, 7, 8, 8]


def test_a_bench_waits_for_its_references_compile_without_a_device():
    """A shape whose reference launches one of its configs (a recorded entry's: the library's
    own) sends no batch before that config's compile landed: it lets the device go, runs the
    compile itself if nobody queued it; a shape without one waits for nothing."""
    from types import SimpleNamespace

    from aot_tune.pipeline.benching import Benches
    from aot_tune.runs.stats import RunStats

    claims, landed, events = CompileClaims(), set(), []
    units = {}
    benches = Benches.__new__(Benches)
    benches.stats = RunStats()
    benches.compiles = SimpleNamespace(
        landed=lambda cu: cu.name in landed, claims=claims,
        run_once=lambda kp, cu: claims.run_once(cu.name, lambda: (events.append(f"compiled {cu.name}"),
                                                                 landed.add(cu.name))))
    kp = SimpleNamespace(bench_targets=lambda device: ("sm90",),
                         compiles_for=lambda unit, config, targets: [
                             units.setdefault(config, SimpleNamespace(name=f"{config}-{targets[0]}"))])
    hold = SimpleNamespace(release=lambda: events.append("device let go"))
    device = SimpleNamespace(target="sm90")

    benches._await_reference(kp, SimpleNamespace(reference_config=None), device, hold)
    assert events == []
    benches._await_reference(kp, SimpleNamespace(reference_config="lib"), device, hold)
    assert events == ["device let go", "compiled lib-sm90"] and "lib-sm90" in landed
    benches._await_reference(kp, SimpleNamespace(reference_config="lib"), device, hold)  # landed: no wait
    assert events == ["device let go", "compiled lib-sm90"]


def test_a_waiting_bench_wakes_when_a_compile_lands_not_at_its_next_look(monkeypatch):
    """Every stale bench task waits on a thread of its own: the claims wake it as one of its
    compiles lands, instead of each one polling (72 of them for fla-core's row kernels)."""
    import time

    from aot_tune.pipeline import streaming

    monkeypatch.setattr(streaming, "POLL_S", 30.0)  # a wave that came by polling would take 30 s
    claims, landed, started = CompileClaims(), set(), threading.Event()

    def compile_task():
        started.set()
        time.sleep(0.1)
        landed.add("x1")

    worker = threading.Thread(target=claims.run_once, args=("x1", compile_task))
    worker.start()
    started.wait(10)
    began = time.monotonic()
    waves = landed_waves(["x"], lambda c: ["x1"], landed.__contains__, claims.claimed,
                         lambda name: claims.run_once(name, lambda: landed.add("ran here")),
                         wait_for=claims.wait_for_any)
    assert next(waves) == ["x"] and "ran here" not in landed
    assert time.monotonic() - began < 5.0
    worker.join()


def test_every_stale_bench_that_waits_for_the_compile_stage_gets_a_doit_thread(tmp_path, monkeypatch):
    """doit runs a task per thread and a bench task holds its thread while its compiles run: with
    -n threads only, the first -n benches in doit's order waited for their slow compiles while the
    shapes whose compiles had landed never started, and the device idled."""
    from tunerun import make_project, vector_add_manifest

    from aot_tune.bench.runner import INTERPRETER_DEVICE
    from aot_tune.commands import loader as loader_module
    from aot_tune.manifest import load_manifest
    from aot_tune.pipeline.plan import build_plan
    from aot_tune.pipeline.staleness import Staleness
    from aot_tune.pipeline.streaming import waiting_benches

    def plan_of(search: str):
        project = make_project(tmp_path / search.split(",")[0].split()[-1], vector_add_manifest(f"""\
    space: {{BLOCK_SIZE: [128, 256, 512, 1024], num_warps: [4]}}
    shapes: [{{n: 300}}, {{n: 500}}, {{n: 704}}, {{n: 900}}, {{n: 1100}}]
    dtypes: [float32]
    search: {search}
"""))
        manifest = load_manifest(project / "tuning.yaml")
        plan = build_plan(manifest, INTERPRETER_DEVICE, manifest.kernels)
        return plan, Staleness(plan)

    streaming_plan = plan_of("{strategy: exhaustive}")
    assert waiting_benches(*streaming_plan) == 5
    assert waiting_benches(*plan_of("{strategy: random, budget: {configs: 2}}")) == 5  # drawn up front
    assert waiting_benches(*plan_of("{strategy: surrogate, budget: {configs: 2}}")) == 0  # compiles on demand
    loader = loader_module.ManifestLoader()
    assert loader.task_threads(2, *streaming_plan) == 7
    monkeypatch.setattr(loader_module, "MAX_WAITING_BENCHES", 3)
    assert loader.task_threads(2, *streaming_plan) == 5


def test_a_wait_ends_when_one_of_its_own_compiles_lands_and_not_at_another_ones():
    import time

    claims, release = CompileClaims(), {"x1": threading.Event(), "y1": threading.Event()}
    workers = [threading.Thread(target=claims.run_once, args=(name, lambda name=name: release[name].wait(10)))
               for name in release]
    for worker in workers:
        worker.start()
    while not (claims.claimed("x1") and claims.claimed("y1")):
        pass
    waiter = threading.Thread(target=claims.wait_for_any, args=(["x1"], 30.0))
    waiter.start()
    release["y1"].set()
    workers[1].join()
    waiter.join(0.3)
    assert waiter.is_alive()  # another bench's compile landed: this one sleeps on
    release["x1"].set()
    waiter.join(5.0)
    assert not waiter.is_alive()
    workers[0].join()
    began = time.monotonic()
    claims.wait_for_any(["x1", "z1"], 30.0)  # one of them landed before the wait: it returns at once
    assert time.monotonic() - began < 5.0
