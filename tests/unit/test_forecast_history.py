"""The forecast of a project this machine never tuned (aot_tune.pipeline.calibration): the
machine's history of other kernels' runs calibrates it where the project's own runs.json does
not, the kernel modules' import is estimated, and a finished run joins the history."""
from __future__ import annotations

import os

import pytest
from tunerun import make_project, vector_add_manifest

from aot_tune.bench.runner import INTERPRETER_DEVICE, DeviceModel
from aot_tune.manifest import load_manifest
from aot_tune.pipeline import calibration as calibrating
from aot_tune.pipeline import forecast as model
from aot_tune.pipeline.plan import build_plan
from aot_tune.pipeline.staleness import Staleness
from aot_tune.runs.history import HistoryEntry, MachineKey, read_history
from aot_tune.runs.log import RunRecord
from aot_tune.select import FINALS_SHARE

MANIFEST = vector_add_manifest("""\
    space: {BLOCK_SIZE: [128, 256, 512], num_warps: [4]}
    shapes: [{n: 4096}]
    interpreter_shapes: [{n: 300}, {n: 704}]
    dtypes: [float32]
""")
H100 = DeviceModel("cuda", "h100-sxm", "NVIDIA H100 80GB HBM3", "9.0", 1)
#: What runs of other kernels on this machine observed.
MACHINE = {"startup_s": 6.0, "device_startup_s": 3.0, "compile_s": 0.5, "engine_s": 0.02, "batch_s": 0.3,
           "unstaged_s": 2.0}


def fresh(tmp_path, manifest: str = MANIFEST):
    project = make_project(tmp_path, manifest)
    loaded = load_manifest(project / "tuning.yaml")
    plan = build_plan(loaded, INTERPRETER_DEVICE, loaded.kernels)
    return plan, Staleness(plan)


def key_of(plan, jobs: int = 2, **changed) -> MachineKey:
    toolchain = f"triton {plan.toolchain.triton}, torch {plan.toolchain.torch}"
    return MachineKey(**{"backend": "interpreter", "device": "interpreter", "toolchain": toolchain,
                         "cpus": os.cpu_count() or 1, "jobs": jobs, **changed})


def others(key: MachineKey, n: int = 3, **observed) -> list[HistoryEntry]:
    return [HistoryEntry(key, f"2026-11-27T00:0{i}:00+00:00", [f"other{i}"], 20.0, {**MACHINE, **observed}, {})
            for i in range(n)]


def test_a_fresh_project_is_forecast_from_the_machines_runs_of_other_kernels(tmp_path):
    plan, staleness = fresh(tmp_path)
    bare = model.forecast(plan, staleness, 2)
    gpu = others(MachineKey("cuda", "h100-sxm", "triton 3.9.0, torch 2.13.0", 64, 2), startup_s=99.0)
    told = model.forecast(plan, staleness, 2, history=others(key_of(plan)) + gpu)
    calibration = told.calibration
    assert (calibration.runs, calibration.machine_runs, calibration.closeness) == (0, 3, 3)
    assert {calibration.sources[name] for name in MACHINE} == {"machine"}
    # the machine's typical compile on average, not the default
    assert sum(told.compiles) / len(told.compiles) == pytest.approx(0.5)
    assert sum(bare.compiles) / len(bare.compiles) == pytest.approx(model.DEFAULT_COMPILE_S_PER_KB * bare.kernels[0].code_kb)
    assert told.startup_s == pytest.approx(6.0 + told.import_s + told.kernels[0].to_capture * model.CAPTURE_S / 2)
    assert told.rest_s == 2.0 and bare.rest_s == model.DEFAULT_UNSTAGED_S
    assert list(told.bench_seconds.values()) == pytest.approx([3 * 0.02 + 0.3] * 2)  # 3 configs, one batch
    assert "3 runs in the machine's history (this machine, device, toolchain and -n)" in calibration.described()
    assert "uncalibrated" in bare.calibration.described()
    # another -n: the runs of the same CPUs and device still tell, less closely
    assert model.forecast(plan, staleness, 1, history=others(key_of(plan))).calibration.closeness == 1
    assert model.forecast(plan, staleness, 2, history=gpu).calibration.machine_runs == 0


def test_a_machine_with_nothing_calibrated_takes_the_defaults_at_its_pace(tmp_path, monkeypatch):
    """The interpreter's defaults are one machine's CPU seconds: a machine whose probe takes half
    as long forecasts each default part at half of it, and says so; a part earlier runs told is
    not scaled, and where every part was told no probe is taken at all."""
    plan, staleness = fresh(tmp_path)
    bare = model.forecast(plan, staleness, 2)  # the tests pin the pace to 1 (tests/conftest.py)
    monkeypatch.delenv(calibrating.PACE_ENV)
    monkeypatch.setattr(calibrating, "probe_seconds", lambda: calibrating.PROBE_REFERENCE_S["interpreter"] / 2)
    fast = model.forecast(plan, staleness, 2)
    assert fast.calibration.pace == 0.5 and "at this machine's pace, 0.50x theirs" in fast.calibration.described()
    assert sum(fast.compiles) == pytest.approx(sum(bare.compiles) / 2)
    assert fast.calibration.startup() == pytest.approx(bare.calibration.startup() / 2)
    assert fast.rest_s - fast.launch_s == pytest.approx((bare.rest_s - bare.launch_s) / 2)
    assert list(fast.bench_seconds.values()) == pytest.approx([s / 2 for s in bare.bench_seconds.values()])
    told = model.forecast(plan, staleness, 2, history=others(key_of(plan)))
    assert told.calibration.startup() == 6.0 and told.calibration.device_startup() == 3.0  # told: as they were
    assert sum(told.compiles) / len(told.compiles) == pytest.approx(0.5)
    assert calibrating.machine_pace("cuda") == 1.0  # a GPU host's probe does not tell its pace: its defaults stand

    def no_probe():
        raise AssertionError("probed although every part was calibrated")
    monkeypatch.setattr(calibrating, "probe_seconds", no_probe)
    everything = {name: 1.0 for name in calibrating.CALIBRATED} | {"import_s": 1.0, "import_estimate_s": 1.0}
    assert calibrating.calibrate([], "interpreter", others(key_of(plan), **everything), key_of(plan)).pace == 1.0
    monkeypatch.setenv(calibrating.PACE_ENV, "100")
    assert calibrating.machine_pace("interpreter") == calibrating.PACE_BOUNDS[1]


def test_a_pace_that_is_not_a_number_is_one_warning_line_and_the_probe_decides(monkeypatch, capfd):
    monkeypatch.setenv(calibrating.PACE_ENV, "fast")
    monkeypatch.setattr(calibrating, "probe_seconds", lambda: calibrating.PROBE_REFERENCE_S["interpreter"] * 2)
    assert calibrating.machine_pace("interpreter") == 2.0 and calibrating.machine_pace("interpreter") == 2.0
    (line,) = capfd.readouterr().err.splitlines()  # once a process
    assert "AOT_TUNE_PACE='fast' is not a number" in line and "fix:" in line


def test_the_probe_takes_a_fraction_of_a_second_and_reads_alike_twice():
    first = calibrating.probe_seconds.__wrapped__()
    second = calibrating.probe_seconds.__wrapped__()
    assert 0.0 < first < 0.5 and 0.25 < first / second < 4.0  # a busy moment may slow one of them


def test_a_kernel_never_compiled_here_is_priced_by_the_size_of_its_code(tmp_path):
    """Other kernels compiled at 0.4 s a KB of code: kernels/vector_add.py's add_kernel is 0.3 KB."""
    plan, staleness = fresh(tmp_path)
    told = model.forecast(plan, staleness, 2, history=others(key_of(plan), compile_s_per_kb=0.4))
    (work,) = told.kernels
    assert 0.2 < work.code_kb < 0.4 and told.calibration.sources["compile_s_per_kb"] == "machine"
    assert sum(told.compiles) / len(told.compiles) == pytest.approx(0.4 * work.code_kb)
    assert told.estimates["compile_kb"] == pytest.approx(work.code_kb)


def test_the_projects_own_runs_come_first_part_by_part(tmp_path):
    plan, staleness = fresh(tmp_path)
    own = RunRecord(started_at="2026-11-27T01:00:00+00:00", wall_s=12.0, ok=True, device="interpreter",
                    backend="interpreter", kernels=["vector_add"], stages={"specialize": [0.1, 4.1]},
                    worker_seconds={"specialize start-up": 3.5})  # it compiled and measured nothing
    told = model.forecast(plan, staleness, 2, runs=[own], history=others(key_of(plan)))
    assert told.calibration.startup_s == 3.5 and told.calibration.sources["startup_s"] == "project"
    assert told.calibration.compile_s == 0.5 and told.calibration.sources["compile_s"] == "machine"
    assert "1 earlier run on interpreter in .aot_tune/runs.json and 3 runs in the machine's history" in \
        told.calibration.described()


def test_the_machines_import_ratio_scales_the_static_estimate(tmp_path):
    plan, staleness = fresh(tmp_path)
    bare = model.forecast(plan, staleness, 2)
    assert 0 < bare.import_s == bare.estimates["import_s"]  # kernels/vector_add.py: milliseconds
    small = others(key_of(plan), import_s=0.3, import_estimate_s=0.1)  # under the floor: noise, not a rate
    assert model.forecast(plan, staleness, 2, history=small).import_s == bare.import_s
    big = others(key_of(plan), import_s=3.0, import_estimate_s=6.0)
    halved = model.forecast(plan, staleness, 2, history=big)
    assert halved.calibration.import_ratio == 0.5 and halved.import_s == pytest.approx(bare.import_s / 2)


def test_a_projects_own_exporter_costs_the_tuning_process_its_imports(tmp_path):
    manifest = MANIFEST + '    exports:\n      - {to: "exporter:write", path: "configs/{device}/{kernel}.json"}\n'
    plan, staleness = fresh(tmp_path, manifest)
    (tmp_path / "exporter.py").write_text("import torch\nimport kernels.vector_add\n\n\n"
                                          "def write(entries, info):\n    return ''\n")
    told = model.forecast(plan, staleness, 2)
    # torch and triton (a share of the fork server's imports), then the modules they reach, and the
    # tuning process's longer exit with them loaded
    assert told.main_import_s == pytest.approx((0.35 * told.calibration.startup() + told.import_s) * 1.25, abs=0.01)
    assert told.rest_s == pytest.approx(model.DEFAULT_UNSTAGED_S + told.main_import_s)
    assert told.estimates["main_import_s"] == told.main_import_s
    compiled = tmp_path / "exporter.py"  # a torch.compile at import: torch's dynamo and inductor too
    compiled.write_text("import torch\n\n\ndef write(entries, info):\n    return ''\n\n\nfast = torch.compile(write)\n")
    with_compile = model.forecast(plan, staleness, 2)
    from aot_tune.build.imports import TORCH_COMPILE_S
    assert with_compile.main_import_s == pytest.approx(
        ((0.35 + 0.3) * told.calibration.startup() + TORCH_COMPILE_S) * 1.25, abs=0.01)
    compiled.write_text("def write(entries, info):\n    return ''\n")
    assert model.forecast(plan, staleness, 2).main_import_s < 0.01


def test_on_a_gpu_the_engine_overhead_beyond_the_warm_up_is_taken_from_other_projects(tmp_path):
    """Another project's runs measured 3 ms a measurement beyond their warm-up; this one warms up
    1 ms: its measurements are 3 ms beyond 1.1 ms of timed launches, and each batch's first one
    warms up 1 ms."""
    project = make_project(tmp_path, MANIFEST)
    loaded = load_manifest(project / "tuning.yaml")
    plan = build_plan(loaded, H100, loaded.kernels)
    staleness = Staleness(plan)
    key = key_of(plan, backend="cuda", device="h100-sxm")
    told = model.forecast(plan, staleness, 2, history=others(key, engine_s=0.05, engine_extra_s=0.003))
    assert told.calibration.sources["engine_extra_s"] == "machine"
    measurement = 1e-3 * model.TIMED_STRETCH + 0.003
    final = 1e-3 * FINALS_SHARE * model.TIMED_STRETCH + 0.003
    # 3 configs in a batch, then again for FINALS_SHARE of rep_ms in the finals' batch
    assert list(told.bench_seconds.values()) == pytest.approx([3 * measurement + 3 * final + 2 * (0.3 + 1e-3)])
    assert told.estimates["warmup_s"] == pytest.approx(2 * 1e-3 / 6)  # two batches' warm-ups over 6 measurements
    gpu_run = logged(backend="cuda", device="h100-sxm", estimates={"warmup_s": 0.002})
    seen = calibrating.observed(gpu_run)
    assert seen["engine_extra_s"] == pytest.approx(seen["engine_s"] - 0.002)


def logged(**changes) -> RunRecord:
    run = RunRecord(
        started_at="2026-11-27T02:00:00+00:00", wall_s=30.0, ok=True, device="interpreter", backend="interpreter",
        kernels=["l2norm"], stages={"specialize": [0.5, 10.5], "compile": [10.5, 20.0], "bench": [10.6, 21.0]},
        worker_seconds={"specialize start-up": 5.0, "capture": 0.2, "compiling": 20.0, "device held": 7.0,
                        "device batches": 6.5, "device inputs": 4.5, "measured": 0.0, "device start-up": 3.0,
                        "main imports": 6.0},
        compile={"ok": 40}, bench={"ok": 100}, baselines={"default ok": 4}, batches=10, predicted_s=25.0,
        predicted={"start-up": 8.0, "compile": 10.0, "bench": 1.0, "rest": 6.0},
        estimates={"import_s": 4.0, "compile_s": 0.35, "compile_kb": 0.8}, launch_s=0.8, jobs=2, cpus=2,
        toolchain="triton 3.9.0, torch 2.13.0")
    for name, value in changes.items():
        setattr(run, name, value)
    return run


def test_what_a_run_observed_part_by_part():
    seen = calibrating.observed(logged())
    assert seen["startup_s"] == 5.0 and seen["device_startup_s"] == 3.0
    assert seen["import_s"] == pytest.approx(10.0 - 5.0 - 0.2 / 2)  # the specialize step beyond start-up, captures
    assert seen["import_estimate_s"] == 4.0
    assert seen["compile_s"] == 0.5  # 20 s over 40 compiles
    assert seen["compile_s_per_kb"] == pytest.approx(0.5 / 0.8)  # of a kernel of 0.8 KB of code
    assert seen["main_import_s"] == 6.0
    assert seen["unstaged_s"] == pytest.approx(30.0 - 20.5 - 6.0)  # what no stage covers, less imports; not the launch
    assert "launch_s" not in seen
    assert seen["rest_after_s"] == pytest.approx(30.0 - 21.0 - 6.0)  # after the last stage, less the exporters' imports
    assert seen["engine_s"] == pytest.approx((6.5 - 4.5) / 104)
    # the device held beyond its batches, and their inputs less the import the first one paid
    assert seen["batch_s"] == pytest.approx((7.0 - 6.5 + max(0.0, 4.5 - seen["import_s"])) / 10)


def test_a_finished_run_joins_the_machines_history(tmp_path):
    path = tmp_path / "history.json"
    assert calibrating.remember(logged(), path)
    (entry,) = read_history(path)
    assert entry.key == MachineKey("interpreter", "interpreter", "triton 3.9.0, torch 2.13.0", 2, 2)
    assert entry.wall_s == pytest.approx(30.8) and entry.kernels == ["l2norm"]
    assert entry.observed == calibrating.observed(logged())
    assert entry.predicted["wall_s"] == 25.0 and entry.predicted["part start-up"] == 8.0
    assert entry.predicted["import_s"] == 4.0
    assert not calibrating.remember(logged(ok=False), path)  # a failed run tells nothing
    assert len(read_history(path)) == 1


def test_the_commands_own_start_is_measured_where_it_forecasts_not_taken_from_other_runs(tmp_path):
    """A first run after ``pip install`` spent 45 s before the run began (the packages' bytecode
    written on a busy 2-core CPU); the next forecast must not expect that again: the rest is the
    calibrated time no stage covers plus the forecasting command's own start, measured."""
    plan, staleness = fresh(tmp_path)
    first = logged(launch_s=45.2)
    assert calibrating.observed(first)["unstaged_s"] == calibrating.observed(logged())["unstaged_s"]
    history = others(key_of(plan))
    told = model.forecast(plan, staleness, 2, history=history, launch_s=0.7)
    assert told.launch_s == 0.7 and told.rest_s == pytest.approx(0.7 + 2.0)
    assert told.predicted_s == pytest.approx(model.forecast(plan, staleness, 2, history=history).predicted_s + 0.7)
