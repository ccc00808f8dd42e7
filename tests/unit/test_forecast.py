"""The cost model (aot_tune.pipeline.forecast): a plan whose compiles and bench settings are known
gives the prediction the model's rules add up to; earlier runs calibrate it; the progress
lines' estimate of what is left comes from it. Real plans of scratch projects, nothing run."""
from __future__ import annotations

from pathlib import Path

import pytest
from tunerun import make_project, vector_add_manifest

from aot_tune import cache as cache_io
from aot_tune.bench.runner import INTERPRETER_DEVICE, DeviceModel
from aot_tune.build.compile import CompileRecord, CompileResult
from aot_tune.build.specialize import SpecializeResult, launch_key
from aot_tune.manifest import SearchSettings, load_manifest
from aot_tune.pipeline import forecast as model
from aot_tune.pipeline.calibration import DEFAULT_LIGHT_STARTUP_S
from aot_tune.search import ranked
from aot_tune.search.strategies import search_plan
from aot_tune.select import FINALS_SHARE
from aot_tune.pipeline.plan import build_plan
from aot_tune.runs.log import RunRecord
from aot_tune.pipeline.staleness import Staleness
from aot_tune.tuning_schema import Measurement, TuningRecord

H100 = DeviceModel("cuda", "h100-sxm", "NVIDIA H100 80GB HBM3", "9.0", 1)
#: Three configs that compiled before (under another fingerprint) in 4, 2 and 1 seconds.
RECORDED_S = {128: 4.0, 256: 2.0, 512: 1.0}
MANIFEST = vector_add_manifest("""\
    space: {BLOCK_SIZE: [128, 256, 512], num_warps: [4]}
    shapes: [{n: 4096}, {n: 8192}]
    interpreter_shapes: [{n: 300}, {n: 500}, {n: 704}]
    dtypes: [float32]
""")


def plan_of(project: Path, device: DeviceModel = H100):
    manifest = load_manifest(project / "tuning.yaml")
    plan = build_plan(manifest, device, manifest.kernels)
    return plan, Staleness(plan)


@pytest.fixture
def compiled_before(tmp_path) -> Path:
    """Every launch's specialization captured (one for both shapes), and each config's compile
    output left by an earlier run under an older fingerprint."""
    project = make_project(tmp_path, MANIFEST)
    plan, _ = plan_of(project)
    (kp,) = plan.kernels
    result = SpecializeResult("sm90")
    for shape in ((4096,), (8192,)):
        result.by_launch[launch_key(shape, "float32")] = {c.id: "spec1" for c in kp.spec.space.configs_for({})}
    kp.specializations.add(result)
    kp.specializations.write(kp.specializations_path)
    plan, _ = plan_of(project)
    for unit in plan.kernels[0].compile_units:
        seconds = RECORDED_S[unit.config.as_dict()["BLOCK_SIZE"]]
        compiled = CompileResult("vector_add", unit.config.id, "sm90", seconds=seconds)
        unit.output.parent.mkdir(parents=True, exist_ok=True)
        unit.output.write_text(CompileRecord("an older fingerprint", unit.config.as_dict(), "spec1", [], compiled).to_json())
    return project


def test_known_compiles_and_bench_settings_add_up_to_the_prediction(compiled_before):
    plan, staleness = plan_of(compiled_before)
    predicted = model.forecast(plan, staleness, compile_jobs=2)
    (work,) = predicted.kernels
    assert (work.compiles_stale, work.compiles_total, work.estimated, work.to_capture) == (3, 3, 0, 0)
    assert sorted(predicted.compiles) == [1.0, 2.0, 4.0]  # the recorded seconds
    # 2 workers, longest first: 4 s on one, 2 + 1 s on the other; the first lands at 2 s
    assert model.list_schedule(predicted.compiles, 2) == (4.0, 2.0)
    # a measurement: rep 1 ms x 1.1 of timed launches + the engine's overhead
    measurement = 1e-3 * model.TIMED_STRETCH + model.DEFAULT_ENGINE_S["cuda"]
    # three configs in a batch, then the three again for FINALS_SHARE of rep_ms in the finals' batch
    final = 1e-3 * FINALS_SHARE * model.TIMED_STRETCH + model.DEFAULT_ENGINE_S["cuda"]
    # and each batch's own seconds, with its first config's warm-up of 1 ms (the others warm up
    # behind the timed launches ahead of them)
    task = 3 * measurement + 3 * final + 2 * (model.DEFAULT_BATCH_S["cuda"] + 1e-3)
    assert predicted.bench_seconds == pytest.approx({u.name: task for u in plan.kernels[0].bench_units})
    device = work.devices["h100-sxm"]
    assert (device.stale, device.total, device.measurements, device.configs) == (2, 2, 6, [3, 3])
    # the benches (2 x task on one GPU, from 2 s) end before the last compile at 4 s, plus one
    # measurement per bench of that compile's config (a third of each: its share of the task)
    tail = 2 * task / 3
    # the fork server's imports, then each worker's import of the kernel's modules (kernels/vector_add.py)
    assert 0 < predicted.import_s < 0.05
    assert predicted.startup_s == model.DEFAULT_STARTUP_S["cuda"] + predicted.import_s
    assert predicted.compile_s == 4.0
    assert predicted.bench_s == pytest.approx(tail) and predicted.bench_tail_s == pytest.approx(tail)
    # the GPU workers start with the compile workers and import the kernel's modules side by side
    # with them: they wait only for the start-up they take beyond the compile workers' (none here)
    assert predicted.device_wait_s == max(0.0, model.DEFAULT_DEVICE_STARTUP_S["cuda"] - model.DEFAULT_STARTUP_S["cuda"])
    assert predicted.rest_s == model.DEFAULT_UNSTAGED_S
    assert predicted.predicted_s == pytest.approx(model.DEFAULT_STARTUP_S["cuda"] + predicted.import_s + 4.0 + tail
                                                  + model.DEFAULT_UNSTAGED_S)


@pytest.mark.parametrize("budget, expected", [(1, 2), (2, 3)])
def test_an_adaptive_search_predicts_compiles_on_demand_not_every_candidate(compiled_before, budget, expected):
    """2 shapes sharing one specialization, 3 candidates: the surrogate is expected to compile as
    many configs as its searches measure (budget x 2 shapes), at most the 3 candidates, on demand."""
    from aot_tune.commands.dry_run import describe

    manifest = compiled_before / "tuning.yaml"
    manifest.write_text(manifest.read_text() + f"    search: {{strategy: surrogate, budget: {{configs: {budget}}}}}\n")
    plan, staleness = plan_of(compiled_before)
    predicted = model.forecast(plan, staleness, compile_jobs=2)
    (work,) = predicted.kernels
    assert (work.compiles_stale, work.on_demand, work.on_demand_candidates) == (0, expected, 3)
    assert predicted.compiles == [] and predicted.on_demand == [pytest.approx(7.0 / 3)] * expected  # their mean
    assert predicted.compile_s == 0.0
    lines = describe(predicted)
    assert f"  compile  about {expected} more on demand, as the budgeted searches reach their configs " \
           f"(of 3 candidate compiles not made yet)" in lines
    # the benches wait for them: 2 workers side by side, on top of the measurements
    assert predicted.bench_s >= model.list_schedule(predicted.on_demand, 2)[0] and lines[-1].startswith("predicted ")
    manifest.write_text(manifest.read_text().replace("strategy: surrogate", "strategy: random"))  # a draw: up front
    plan, staleness = plan_of(compiled_before)
    (work,) = model.forecast(plan, staleness, compile_jobs=2).kernels
    drawn = {c.id for u in plan.kernels[0].bench_units for c in u.probes}  # the same draw for every shape
    assert (work.compiles_stale, work.on_demand) == (len(drawn), 0) and len(drawn) == budget


def test_more_workers_and_a_deadline_shorten_the_compile_part(compiled_before):
    plan, staleness = plan_of(compiled_before)
    assert model.forecast(plan, staleness, compile_jobs=3).compile_s == 4.0
    assert model.forecast(plan, staleness, compile_jobs=1).compile_s == 7.0
    strict = model.CompileDeadline(factor=1.0, min_s=1.5, peers=3)  # caps at max(1.5, 1 x the median 2 s)
    assert sorted(model.forecast(plan, staleness, 1, deadline=strict).compiles) == [1.0, 2.0, 2.0]


def run(backend: str = "cuda", **seconds) -> RunRecord:
    return RunRecord(started_at="2026-11-25T20:00:00+00:00", wall_s=30.0, ok=True, device="h100-sxm",
                     backend=backend, kernels=["vector_add"], stages={"compile": [5.0, 12.0], "bench": [6.0, 29.0]},
                     worker_seconds=seconds, compile={"ok": 10}, bench={"ok": 90, "invalid": 5},
                     baselines={"vendor ok": 10}, batches=20)


def test_a_ranked_search_on_a_gpu_is_priced_as_screening_timings_then_the_finals(tmp_path):
    """No source in the cache: every config, each for a quarter of rep_ms, then the finals in full."""
    project = make_project(tmp_path, MANIFEST.replace("    dtypes: [float32]\n",
                                                      "    dtypes: [float32]\n    search: {strategy: ranked}\n"))
    plan, staleness = plan_of(project)
    predicted = model.forecast(plan, staleness, compile_jobs=2)
    screening = 1e-3 * ranked.SCREEN_SHARE * model.TIMED_STRETCH + model.DEFAULT_ENGINE_S["cuda"]
    final = 1e-3 * FINALS_SHARE * model.TIMED_STRETCH + model.DEFAULT_ENGINE_S["cuda"]
    # each batch's first config warms up: the screenings' for the same share of the bench's 1 ms
    # (BenchSettings.screening), the finals' for all of it
    warmups = 1e-3 * ranked.SCREEN_SHARE + 1e-3
    task = 3 * screening + 3 * final + 2 * model.DEFAULT_BATCH_S["cuda"] + warmups
    assert predicted.bench_seconds == pytest.approx({u.name: task for u in plan.kernels[0].bench_units})


def test_runs_that_compiled_without_torch_calibrate_their_own_start_ups() -> None:
    """A run whose kernels were all rebuilt from their recorded sources started workers with Triton
    alone: its start-ups are kept apart, and price only such runs (a dry run of one says so)."""
    light = run(**{"light start-up": 4.5, "device start-up": 6.5, "compiling": 8.0})
    heavy = run(**{"specialize start-up": 12.0, "device start-up": 14.0, "compiling": 8.0})
    assert model.observed(light)["light_startup_s"] == 4.5 and "startup_s" not in model.observed(light)
    for is_light, startup, device in ((True, 4.5, 6.5), (False, 12.0, 14.0)):
        calibration = model.calibrate([light, heavy], "cuda", light=is_light)
        assert (calibration.startup(), calibration.device_startup()) == (startup, device)
    assert model.calibrate([heavy], "cuda", light=True).startup() == DEFAULT_LIGHT_STARTUP_S["cuda"]


def test_earlier_runs_on_the_backend_calibrate_the_overheads(compiled_before):
    logged = run(**{"specialize start-up": 3.0, "device start-up": 0.5, "compiling": 8.0, "device held": 12.0,
                    "device batches": 11.0, "device inputs": 1.0, "measured": 4.0, "measured baselines": 1.0})
    failed = run(**{"specialize start-up": 99.0})
    failed.ok = False
    torn = run(**{"specialize start-up": "soon"})
    calibration = model.calibrate([run("interpreter", **{"specialize start-up": 99.0}), failed, torn, logged], "cuda")
    assert calibration.runs == 1 and calibration.startup_s == 3.0 and calibration.device_startup_s == 0.5
    assert calibration.compile_s == 0.8  # 8 s over 10 compiles
    assert calibration.engine_s == pytest.approx((11.0 - 1.0 - 5.0) / 100)  # 90 ok + 10 baselines measured
    assert calibration.batch_s == pytest.approx((12.0 - 11.0 + 1.0) / 20)
    assert calibration.unstaged_s == pytest.approx(30.0 - 24.0)  # what no stage covers
    assert calibration.rest_after_s == pytest.approx(30.0 - 29.0)  # of it, what followed the last stage

    plan, staleness = plan_of(compiled_before)
    default = model.forecast(plan, staleness, 2)
    calibrated = model.forecast(plan, staleness, 2, [logged])
    assert calibrated.startup_s == 3.0 + calibrated.import_s and calibrated.rest_s == pytest.approx(6.0)
    # the progress lines come after the planning: what they still have ahead is the rest after the stages
    assert calibrated.rest_after_s == pytest.approx(1.0)
    assert default.rest_after_s == pytest.approx(model.DEFAULT_REST_AFTER_S) and default.rest_s == model.DEFAULT_UNSTAGED_S
    task = (3 * (1e-3 * model.TIMED_STRETCH + calibration.engine_s) + calibration.batch_s
            + 3 * (1e-3 * FINALS_SHARE * model.TIMED_STRETCH + calibration.engine_s) + calibration.batch_s  # the finals
            + 2 * 1e-3)  # each batch's first config's warm-up
    assert calibrated.bench_seconds == pytest.approx({u.name: task for u in plan.kernels[0].bench_units})
    assert calibrated.predicted_s != default.predicted_s
    assert calibrated.compile_s == default.compile_s  # recorded compile seconds win over the typical one


def test_uncaptured_launches_share_a_compile_per_specialization_class(tmp_path):
    """n=300 and n=500 specialize alike (neither divisible by 16), n=704 does not."""
    plan, staleness = plan_of(make_project(tmp_path, MANIFEST), INTERPRETER_DEVICE)
    predicted = model.forecast(plan, staleness, 2)
    (work,) = predicted.kernels
    assert (work.compiles_stale, work.compiles_total, work.estimated, work.to_capture) == (6, 6, 6, 9)
    # nothing recorded: the typical compile of its code's size on average, the larger blocks (a
    # larger estimate) slower
    assert work.code_kb > 0
    assert sum(predicted.compiles) / 6 == pytest.approx(model.DEFAULT_COMPILE_S_PER_KB * work.code_kb)
    by_block = {key[2]: seconds for key, seconds in predicted.compile_seconds.items()}
    blocks = {c.id: c.as_dict()["BLOCK_SIZE"] for c in plan.kernels[0].spec.space.configs_for({})}
    assert sorted(by_block, key=by_block.get) == sorted(blocks, key=blocks.get)
    # the 9 captures are split over the 2 compile workers, after their start-up
    assert predicted.startup_s == pytest.approx(predicted.calibration.startup() + predicted.import_s
                                                + 9 * model.CAPTURE_S / 2)
    assert model.specialization_class(launch_key((300, 1, 4096), "float16")) == "float16:_x1x16"


def current(project: Path) -> None:
    """The compile outputs rewritten under today's fingerprints, as a finished run leaves them."""
    plan, _ = plan_of(project)
    for unit in plan.kernels[0].compile_units:
        result = CompileRecord.read(unit.output).result
        unit.output.write_text(CompileRecord(unit.fingerprint, unit.config.as_dict(), "spec1", [], result).to_json())


def test_an_added_shape_compiles_only_for_a_specialization_class_not_compiled_yet(compiled_before):
    current(compiled_before)
    manifest = compiled_before / "tuning.yaml"
    manifest.write_text(manifest.read_text().replace("{n: 8192}]", "{n: 8192}, {n: 2048}]"))  # divisible by 16
    plan, staleness = plan_of(compiled_before)
    (work,) = model.forecast(plan, staleness, 2).kernels
    assert (work.compiles_stale, work.compiles_total, work.to_capture) == (0, 3, 3)
    manifest.write_text(manifest.read_text().replace("{n: 2048}]", "{n: 2048}, {n: 1000}]"))  # another class
    plan, staleness = plan_of(compiled_before)
    (work,) = model.forecast(plan, staleness, 2).kernels
    assert (work.compiles_stale, work.compiles_total, work.estimated, work.to_capture) == (3, 6, 3, 6)


def write_earlier_record(project: Path, n: int, seconds: tuple[float, ...]) -> None:
    """An interpreter record of shape ``n`` from an older kernel: the first configs measured in
    ``seconds`` each."""
    plan, _ = plan_of(project, INTERPRETER_DEVICE)
    configs = plan.kernels[0].bench_units[0].configs
    record = TuningRecord(kernel="vector_add", key_names=["n"], shape=[n], dtype="float32",
                          fingerprint="an older one")
    record.device.key, record.device.name, record.device.backend = "interpreter", INTERPRETER_DEVICE.name, "interpreter"
    record.device.compute_capability = "cpu"
    record.toolchain.triton, record.toolchain.torch = "3.9.0", "2.13.0"
    for config, spent in zip(configs, seconds):
        m = Measurement(status="ok", median_ms=1.0, runs=3, seconds=spent)
        cache_io.config_to_proto(config.id, config.as_dict(), m.config)
        record.measurements.append(m)
    cache_io.write_cache(cache_io.sorted_cache([record]), project / "generated" / "vector_add.tuning.pb")


def test_the_interpreter_prices_a_measurement_by_the_shapes_earlier_record(tmp_path):
    project = make_project(tmp_path, MANIFEST)
    write_earlier_record(project, 300, (0.5, 1.5))  # the third config was not measured then
    plan, staleness = plan_of(project, INTERPRETER_DEVICE)
    predicted = model.forecast(plan, staleness, 2)
    batch = model.DEFAULT_BATCH_S["interpreter"]
    assert predicted.bench_seconds["bench:vector_add:interpreter:float32:300"] == pytest.approx(0.5 + 1.5 + 1.0 + batch)
    assert predicted.bench_seconds["bench:vector_add:interpreter:float32:500"] == pytest.approx(
        3 * model.DEFAULT_ENGINE_S["interpreter"] + batch)


def test_the_bench_tasks_go_out_dearest_first_by_the_forecast(tmp_path):
    """Equal config counts, one shape priced higher by its earlier record: its task is dispatched
    first, so the devices end on the cheap ones; without a forecast, manifest order stands."""
    from types import SimpleNamespace

    from rules import bench

    project = make_project(tmp_path, MANIFEST)
    write_earlier_record(project, 704, (30.0, 30.0, 30.0))
    plan, staleness = plan_of(project, INTERPRETER_DEVICE)

    def order(forecast) -> list[str]:
        session = SimpleNamespace(plan=plan, staleness=staleness, forecast=forecast, bench=None,
                                  start_stage=lambda *args: None)
        return [task["name"].rpartition(":")[2] for task in bench.tasks(session) if task["name"]]

    assert order(model.forecast(plan, staleness, 2)) == ["704", "300", "500"]
    assert order(None) == ["300", "500", "704"]


@pytest.mark.parametrize("search, groups, batches", [
    (SearchSettings(), [(120, 1.0)], 1),
    (SearchSettings("random", budget_configs=40), [(40, 1.0)], 40),
    (SearchSettings("successive_halving", budget_configs=27), [(27, 1 / 9), (9, 1 / 3), (3, 1.0)], 39),
    (SearchSettings("surrogate", budget_configs=40), [(40, 1 / 9), (3, 1.0)], 10),  # design, 8 rounds, finalists
])
def test_a_search_measures_what_its_budget_allows(search, groups, batches):
    measured, sent = search_plan(search, 120)
    assert sent == batches
    assert [n for n, _ in measured] == [n for n, _ in groups]
    assert [share for _, share in measured] == pytest.approx([share for _, share in groups])


def test_without_stale_compiles_the_start_up_is_the_device_workers(compiled_before):
    """A run that compiles nothing waits only for its device workers: spawned beside a fork server
    that imports torch, they do not wait for its imports (a bench-only retune on the H100 host
    waited 7.5 s for them while its workers forked from it). Beside a server of Triton alone they
    fork from it once it is up."""
    current(compiled_before)
    plan, staleness = plan_of(compiled_before)
    predicted = model.forecast(plan, staleness, 2)
    assert predicted.compiles == [] and predicted.kernels[0].compiles_stale == 0 and not predicted.idle
    assert predicted.startup_s == model.DEFAULT_DEVICE_STARTUP_S["cuda"] + predicted.import_s
    plan.compiles_need_torch = lambda: False  # as where every kernel is rebuilt from its recording
    forked = model.forecast(plan, staleness, 2)
    assert forked.calibration.light
    light = forked.calibration
    assert forked.startup_s == light.startup() + light.device_startup() + forked.import_s
    assert light.startup() > 0 and light.device_startup() > 0
    assert predicted.compile_s == 0.0
    assert predicted.bench_s == pytest.approx(sum(predicted.bench_seconds.values()))  # one GPU, one task after another


def test_a_no_op_is_told_without_a_forecast(tmp_path):
    plan, staleness = plan_of(make_project(tmp_path, MANIFEST), INTERPRETER_DEVICE)
    assert model.may_have_work(plan, staleness)
    plan.kernels[0].bench_units.clear()  # nothing measured, nothing compiled only
    assert not model.may_have_work(plan, staleness) and model.forecast(plan, staleness, 2).idle


def only_compiled(plan):
    """Its launches compiled, not measured, as a dtype the interpreter cannot compute is."""
    (kp,) = plan.kernels
    kp.compile_only = {(u.shape, u.dtype): u.probes for u in kp.bench_units}
    kp.bench_units.clear()
    return plan


def test_launches_only_compiled_are_work_until_their_compiles_have_results(compiled_before):
    """A CPU machine's no-op run of this repository forecast and kept its fork server importing
    torch because fp8 launches are compiled there, not measured, however current their compiles."""
    plan, staleness = plan_of(compiled_before)
    assert model.may_have_work(only_compiled(plan), staleness)  # compiled under an older fingerprint
    current(compiled_before)
    plan, staleness = plan_of(compiled_before)
    assert not model.may_have_work(only_compiled(plan), staleness)
    assert model.forecast(plan, staleness, 2).idle
    kp = plan.kernels[0]
    kp.unspecialized.append(("sm90", (2048,), "float32", kp.compile_units[0].config))
    kp.compile_only[((2048,), "float32")] = (kp.compile_units[0].config,)
    assert model.may_have_work(plan, staleness)  # a capture to do


@pytest.mark.parametrize("default, extra", [("{BLOCK_SIZE: 256, num_warps: 4}", 1),   # a config: not timed twice
                                            ("{BLOCK_SIZE: 1024, num_warps: 4}", 2)])  # outside the space
def test_the_baselines_ride_with_the_last_batch(compiled_before, default, extra):
    manifest = compiled_before / "tuning.yaml"
    manifest.write_text(manifest.read_text().replace(
        "    dtypes: [float32]\n", f"    dtypes: [float32]\n    default_config: {default}\n"
                                  "    vendor: kernels.vector_add:vendor\n"))
    plan, staleness = plan_of(compiled_before)
    predicted = model.forecast(plan, staleness, 2)
    measurement = 1e-3 * model.TIMED_STRETCH + model.DEFAULT_ENGINE_S["cuda"]
    final = 1e-3 * FINALS_SHARE * model.TIMED_STRETCH + model.DEFAULT_ENGINE_S["cuda"]
    # still one batch, then the three configs again in the finals' batch; one warm-up of 1 ms each
    task = (3 + extra) * measurement + 3 * final + 2 * (model.DEFAULT_BATCH_S["cuda"] + 1e-3)
    assert predicted.bench_seconds == pytest.approx({u.name: task for u in plan.kernels[0].bench_units})
    assert predicted.kernels[0].devices["h100-sxm"].measurements == 2 * (3 + extra)


def test_a_failing_estimate_leaves_the_run_without_one_and_says_so(compiled_before, monkeypatch, capfd):
    """The forecast is an estimate: where it fails (the import walk met a layout it did not know,
    say), the run goes on without one, after one line that names the fault."""
    from aot_tune.build.deadline import CompileDeadline
    from aot_tune.commands import loader

    plan, staleness = plan_of(compiled_before)
    assert isinstance(loader.predict(plan, staleness, 2, CompileDeadline()), model.Forecast)

    def broken(*args, **kwargs):
        raise KeyError("scipy")

    monkeypatch.setattr(loader, "forecast", broken)
    assert loader.predict(plan, staleness, 2, CompileDeadline()) is None
    assert "aot_tune: no estimate of this run (KeyError: 'scipy'); it runs without one" in capfd.readouterr().err



def test_the_import_walk_runs_on_its_own_thread_and_its_fault_is_one_line(compiled_before, monkeypatch, capfd):
    """The run starts the walk before its captures and makes the forecast after them: a library
    that reaches a large tree (fla-core reaches transformers) is read while the captures run. A
    walk that fails is the forecast's one line, as any fault of the estimate."""
    import threading
    import time

    from aot_tune.build import imports
    from aot_tune.build.deadline import CompileDeadline
    from aot_tune.commands import loader

    plan, staleness = plan_of(compiled_before)
    made_here = loader.predict(plan, staleness, 2, CompileDeadline())
    walked = threading.Event()
    real = imports.import_cost

    def slow(*args, **kwargs):
        assert walked.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(imports, "import_cost", slow)
    began = time.perf_counter()
    walk = loader.start_walk(plan, staleness)  # returns while the walk waits
    assert walk is not None and time.perf_counter() - began < 5
    walked.set()
    assert loader.predict(plan, staleness, 2, CompileDeadline(), walk).import_s == made_here.import_s

    def broken(*args, **kwargs):
        raise KeyError("fla")

    monkeypatch.setattr(imports, "import_cost", broken)
    assert loader.predict(plan, staleness, 2, CompileDeadline(), loader.start_walk(plan, staleness)) is None
    assert "aot_tune: no estimate of this run (KeyError: 'fla'); it runs without one" in capfd.readouterr().err


def recorded_project(tmp_path: Path, compile_s: dict[str, float]) -> Path:
    """A project of one kernel as ``aot_tune record`` leaves it (reclib's gather, two launches),
    with ``compile_s`` in its recording."""
    from aot_tune.record.entries import fold
    from aot_tune.record.recording import Argument, RecordedKernel, RecordedLaunch, TensorSpec

    project = tmp_path / "project"
    project.mkdir(parents=True)
    (project / "timedlib.py").write_text((Path(__file__).parents[1] / "fixtures" / "reclib" / "ops.py").read_text())
    configs = ({"BLOCK": 32, "num_warps": 1, "num_stages": 3}, {"BLOCK": 64, "num_warps": 2, "num_stages": 3},
               {"BLOCK": 128, "num_warps": 4, "num_stages": 3})
    launches = {}
    for n in (64, 4096):
        arguments = (Argument("X", tensor=TensorSpec((n,), (1,), "float32", None, -1.0, 1.0, 0.0, 0.5)),
                     Argument("IDX", tensor=TensorSpec((n,), (1,), "int32", tuple(range(n)))),
                     Argument("Y", tensor=TensorSpec((n,), (1,), "float32")),
                     Argument("n", scalar=n), Argument("scale", scalar=2.0))
        launch = RecordedLaunch(arguments, tuple((-(-n // c["BLOCK"]),) for c in configs),
                                (n, "torch.float32", "torch.int32", "torch.float32"), configs[0], "first", ("Y",))
        launches[launch.launch_id("timedlib:_gather_kernel")] = launch
    fold(project / "tuning.yaml", [RecordedKernel("timedlib:_gather_kernel", ("n",), configs, launches=launches,
                                                  compile_s=compile_s)], target="sm90")
    return project


def test_a_kernel_recorded_compiling_is_priced_by_that_compile(tmp_path):
    """The seconds a kernel's compile took when its workload was recorded price its compiles on
    that target (fla-core's slowest kernel compiles 5-8x its others, at one size of code)."""
    plan, staleness = plan_of(recorded_project(tmp_path / "timed", {"sm90": 6.0, "sm100": 0.5}))
    timed = model.forecast(plan, staleness, 16)
    seconds = [s for (_, target, _), s in timed.compile_seconds.items() if target == "sm90"]
    assert len(seconds) == 3 and sum(seconds) / 3 == pytest.approx(6.0)
    assert timed.compile_s >= max(seconds)
    plan, staleness = plan_of(recorded_project(tmp_path / "untimed", {}))
    untimed = model.forecast(plan, staleness, 16)
    assert sum(untimed.compile_seconds.values()) / 3 < 1.0  # a typical compile of its size
    assert timed.predicted_s > untimed.predicted_s + 4.0


def test_a_gpu_hosts_first_run_prices_the_kernels_import_at_the_documented_ratio(compiled_before):
    """With no run to say how this machine imports, a GPU host's workers (16 importing at once)
    take the documented ratio of the static estimate; a run in the history replaces it."""
    from aot_tune.pipeline.calibration import DEFAULT_IMPORT_RATIO

    plan, staleness = plan_of(compiled_before)
    predicted = model.forecast(plan, staleness, 2)
    assert predicted.calibration.import_ratio is None and DEFAULT_IMPORT_RATIO["cuda"] > 1
    assert predicted.import_s == pytest.approx(predicted.estimates["import_s"] * DEFAULT_IMPORT_RATIO["cuda"])
