"""The bench stage on a Dask cluster (`doit tune --executor dask`), on the CPU: a real scheduler and
real Dask workers on this machine (aot_tune.bench.dask.local), running the Triton interpreter, with
workers and the scheduler killed mid-run. Plus planning for several GPU models, and the Triton
cache entries a remote worker is sent."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest
from tunerun import doit, executed, make_project, subprocess_env, tune, vector_add_manifest

from aot_tune.bench.runner import BenchRequest
from aot_tune.cache import read_cache, read_record
from aot_tune.build.compile import CompileRequest
from aot_tune.bench.runner import INTERPRETER_DEVICE, DeviceModel
from aot_tune.manifest import load_manifest
from aot_tune.pipeline.plan import build_plan
from aot_tune.pipeline.staleness import Staleness
from aot_tune.triton_compat import cache_entry_folder, install_cache_entry, pack_cache_entry

pytest.importorskip("distributed")

# Shapes big enough that one bench task takes a second or more under the interpreter, so a
# worker can be killed while it runs one.
SHAPES = (100_000, 110_000, 120_000, 130_000)
MANIFEST = vector_add_manifest("""\
    space:
      BLOCK_SIZE: [256, 512, 1024]
      num_warps: [4]
    shapes:
""" + "".join(f"      - {{n: {n}}}\n" for n in SHAPES) + "    dtypes: [float16]\n")

H100 = DeviceModel("cuda", "h100-sxm", "NVIDIA H100 80GB HBM3", "9.0", 2)
A100 = DeviceModel("cuda", "a100-sxm", "NVIDIA A100-SXM4-80GB", "8.0", 1)


# -- planning for several GPU models (no cluster needed) -----------------------------------------
def test_a_plan_for_several_models_has_bench_units_and_targets_for_each(tmp_path):
    project = make_project(tmp_path, MANIFEST)
    manifest = load_manifest(project / "tuning.yaml")
    plan = build_plan(manifest, (H100, A100), manifest.kernels)
    kp = plan.kernels[0]
    assert kp.targets == ("sm90", "sm80")  # each model's arch is compiled
    by_device = {}
    for unit in kp.bench_units:
        by_device.setdefault(unit.device, []).append(unit)
        assert unit.output.parent == project / ".aot_tune" / "bench" / unit.device / "vector_add"
        assert plan.device_of(unit).key == unit.device
    assert sorted(by_device) == ["a100-sxm", "h100-sxm"] and all(len(u) == len(SHAPES) for u in by_device.values())
    fingerprints = {u.fingerprint for u in kp.bench_units}
    assert len(fingerprints) == 2 * len(SHAPES)  # the device is part of each fingerprint
    assert len(kp.launches()) == len(SHAPES)  # one capture and compile per launch, whatever the models
    assert len(kp.benches_for(((SHAPES[0],), "float16"))) == 2
    assert len(Staleness(plan).launches_to_specialize(kp)) == 2 * len(SHAPES) * 3  # 2 targets x shapes x configs


def test_merging_a_cluster_run_keeps_other_models_and_drops_unplanned_shapes(tmp_path):
    """A record of a model this run tunes, for a shape no longer planned, is dropped; records of
    models the run does not tune stay (their table was measured elsewhere)."""
    from aot_tune.tuning_schema import TuningRecord

    project = make_project(tmp_path, MANIFEST)
    manifest = load_manifest(project / "tuning.yaml")
    kp = build_plan(manifest, (H100, A100), manifest.kernels).kernels[0]

    def record(device: str, n: int) -> TuningRecord:
        r = TuningRecord(kernel="vector_add", dtype="float16", shape=[n])
        r.device.key = device
        return r

    devices = frozenset({"h100-sxm", "a100-sxm"})
    assert kp.unplanned_local(record("h100-sxm", 12345), devices)
    assert not kp.unplanned_local(record("h100-sxm", SHAPES[0]), devices)
    assert not kp.unplanned_local(record("h200", 12345), devices)


# -- the Triton cache entries shipped to a worker ------------------------------------------------
def test_a_shipped_cache_entry_is_a_hit_in_another_cache_folder(tmp_path, compile_executors):
    """Pack the compile stage's entry, install it into another folder (as a worker does), and a
    fresh process launching the same kernel from another copy of the sources finds it there:
    Triton compiles nothing."""
    from aot_tune.workers.pools import Executors

    project = make_project(tmp_path / "project", MANIFEST)
    request = CompileRequest(kernel="vector_add", root=str(project), kernel_ref="kernels.vector_add:add_kernel",
                             launch_ref="kernels.vector_add:add", inputs_ref="kernels.vector_add:make_inputs",
                             config={"BLOCK_SIZE": 512, "num_warps": 4}, target="sm90",
                             shapes=({"n": 4096},), dtypes=("float16",))
    first = compile_executors.compile(request, "c512")
    assert first.status == "ok" and len(first.specializations) == 1
    kernel_hash = first.specializations[0]
    packed = pack_cache_entry(compile_executors.triton_cache_dir, kernel_hash)
    assert packed is not None
    assert sorted(packed) == ["__grp__add_kernel.json", "add_kernel.cubin", "add_kernel.json"]  # no IRs
    other = tmp_path / "worker-cache"
    assert install_cache_entry(str(other), kernel_hash, packed)
    assert not install_cache_entry(str(other), kernel_hash, packed)  # already there
    group = json.loads((other / cache_entry_folder(kernel_hash) / "__grp__add_kernel.json").read_text())
    assert all(Path(p).parent == other / cache_entry_folder(kernel_hash) for p in group["child_paths"].values())
    # The worker imports the kernel from the sources it was sent, in another folder.
    elsewhere = make_project(tmp_path / "worker-sources", MANIFEST)
    fresh = Executors(INTERPRETER_DEVICE, other, compile_jobs=1)
    try:
        again = fresh.compile(replace(request, root=str(elsewhere)), "c512")
    finally:
        fresh.close()
    assert (again.status, again.cache_hits, again.cache_misses) == ("ok", 1, 0), again.message
    assert again.specializations == [kernel_hash]


def test_packing_a_missing_entry_gives_none(tmp_path):
    assert pack_cache_entry(str(tmp_path), "ab" * 32) is None


# -- runs on a local Dask cluster ----------------------------------------------------------------
@pytest.fixture(scope="module")
def compiled(tmp_path_factory, compile_executors) -> Path:
    """The project with its specialize and compile stages done once (in the session's compile
    worker), so each run below starts at the bench stage."""
    from aot_tune.pipeline.session import TuneSession

    project = make_project(tmp_path_factory.mktemp("compiled"), MANIFEST)
    manifest = load_manifest(project / "tuning.yaml")
    plan = build_plan(manifest, INTERPRETER_DEVICE, manifest.kernels)
    session = TuneSession(plan, compile_executors)
    session.specialize()
    units = [(kp, unit) for kp in plan.kernels for unit in kp.compile_units]
    session.start_stage("compile", len(units))
    for kp, unit in units:
        session.compile(kp, unit)
    return project


@pytest.fixture
def project(compiled, tmp_path) -> Path:
    return Path(shutil.copytree(compiled, tmp_path / "project"))


def cluster(tmp_path: Path, workers: int):
    from aot_tune.bench.dask.local import LocalCluster

    return LocalCluster(tmp_path / "cluster", interpreter=workers, env=subprocess_env(), name="t")


def dask_tune(project: Path, dask, *args: str, check: bool = True):
    return tune(project, "--executor", "dask", *dask.tune_args(), "-n", "2", *args, check=check)


def start_dask_tune(project: Path, dask, *args: str):
    import subprocess

    from tunerun import doit_command

    return subprocess.Popen(doit_command("tune", "--bench-backend", "interpreter", "--executor", "dask",
                                         *dask.tune_args(), "-n", "2", *args),
                            cwd=project, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def outputs(project: Path) -> list[Path]:
    return sorted((project / ".aot_tune" / "bench").rglob("*.pb"))


def wait_for(condition, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_dask_run_writes_what_a_local_run_writes(project, tmp_path):
    with cluster(tmp_path, 2) as dask:
        first = dask_tune(project, dask)
        started = dask.batches_started()
    assert "benchmarking on the Dask cluster" in first.stderr and "2 x interpreter" in first.stderr
    assert sum(n.startswith("bench:vector_add:interpreter:") for n in executed(first)) == len(SHAPES)
    assert {worker for worker, _ in started} == {"t-interpreter0", "t-interpreter1"}  # both GPUs' worth of work
    assert "bench: 12 config measurements, 12 ok" in first.stderr
    for path in outputs(project):
        record = read_record(path)
        assert record.device.key == "interpreter" and record.HasField("best") and len(record.measurements) == 3
    # The same durable outputs and cache as a local run: nothing is stale for the local executor either.
    assert executed(tune(project)) == []
    assert doit(project, "check").returncode == 0
    assert len(read_cache(project / "generated" / "vector_add.tuning.pb").records) == len(SHAPES)


def test_a_worker_killed_mid_task_loses_only_that_task_which_reruns_on_another(project, tmp_path):
    with cluster(tmp_path, 2) as dask:
        run = start_dask_tune(project, dask)
        wait_for(lambda: dask.batches_started(), "a bench task to start on a worker")
        victim, label = dask.batches_started()[0]
        os.kill(dask.worker_pids()[victim], signal.SIGKILL)
        out, err = run.communicate(timeout=300)
        started = dask.batches_started()
    assert run.returncode == 0, out + err
    assert f"[cluster] worker {victim} (interpreter) left; 1 interpreter worker(s) remain" in err
    survivor = ({"t-interpreter0", "t-interpreter1"} - {victim}).pop()
    assert (survivor, label) in started  # the lost task ran again, on the other worker
    assert len(outputs(project)) == len(SHAPES)
    assert all(len(read_record(p).measurements) == 3 for p in outputs(project))
    assert doit(project, "check").returncode == 0


def test_when_no_worker_of_a_model_is_left_its_tasks_fail_with_a_reason(project, tmp_path):
    with cluster(tmp_path, 1) as dask:
        run = start_dask_tune(project, dask, "--worker-wait", "2")
        wait_for(lambda: len(outputs(project)) >= 1 and len(dask.batches_started()) >= 2,
                 "a finished shape and a second bench task")
        os.kill(dask.worker_pids()["t-interpreter0"], signal.SIGKILL)
        out, err = run.communicate(timeout=300)
    assert run.returncode != 0
    assert "no Dask worker of device model interpreter is left in the cluster" in out + err
    assert "Traceback" not in out + err
    finished = outputs(project)
    assert 1 <= len(finished) < len(SHAPES)
    for path in finished:
        read_record(path)  # kept, whole
    assert not (project / "generated" / "vector_add.py").exists()  # merge and generate never ran


def test_when_the_scheduler_goes_away_the_run_fails_cleanly_and_resumes(project, tmp_path):
    with cluster(tmp_path, 2) as dask:
        run = start_dask_tune(project, dask)
        wait_for(lambda: len(outputs(project)) >= 1, "a finished shape")
        dask.scheduler.kill()
        out, err = run.communicate(timeout=300)
    assert run.returncode != 0
    lines = [line for line in (out + err).splitlines() if "lost the Dask scheduler" in line]
    assert lines and all("finished shapes are kept" in line for line in lines)
    assert "Traceback" not in out + err
    finished = {p.name for p in outputs(project)}
    assert 1 <= len(finished) < len(SHAPES)
    assert not (project / "generated" / "vector_add.py").exists()
    resumed = tune(project, "-n", "2")  # on the local devices: only the unfinished shapes run
    rerun = {n.rsplit(":", 2)[-2] + "-" + n.rsplit(":", 1)[-1] + ".pb" for n in executed(resumed)
             if n.startswith("bench:")}
    assert rerun and not rerun & finished
    assert len(outputs(project)) == len(SHAPES)
    assert doit(project, "check").returncode == 0


@contextlib.contextmanager
def planned_cluster(project: Path, tmp_path: Path, workers: int, compile_executors):
    """A cluster of ``workers`` interpreter workers, planned and given the project as a run does:
    (the cluster's devices, its one device model, a request maker for a bench unit's first config
    with every compile's Triton cache entry, those entries' hashes)."""
    from aot_tune.bench.dask.client import ClusterDevices
    from aot_tune.triton_compat import versions

    manifest = load_manifest(project / "tuning.yaml")
    kp = build_plan(manifest, INTERPRETER_DEVICE, manifest.kernels).kernels[0]
    hashes = sorted({h for c in kp.compile_units for h in json.loads(c.output.read_text())["specializations"]})
    assert hashes
    spec = kp.spec

    def request(index: int) -> BenchRequest:
        unit = kp.bench_units[index]
        return BenchRequest(kernel=spec.name, root=str(project), launch_ref=spec.launch, inputs_ref=spec.inputs,
                            reference_ref=spec.reference, shape=(("n", unit.shape[0]),), dtype=unit.dtype,
                            config_id=unit.configs[0].id, config=unit.configs[0].params, settings=spec.bench,
                            kernel_hashes=tuple(hashes))

    with cluster(tmp_path, workers) as dask:
        devices = ClusterDevices(str(dask.scheduler_file), worker_wait_s=10, log=lambda line: None, tls=dask.tls)
        try:
            (device,) = devices.discover(versions())
            devices.use_project(project, [spec.kernel, spec.launch, spec.inputs, spec.reference],
                                Path(compile_executors.triton_cache_dir))
            yield devices, device, request, hashes
        finally:
            devices.close()


def test_a_batch_carries_its_triton_cache_entries_to_the_worker(project, tmp_path, compile_executors):
    """The path a GPU batch takes, on an interpreter worker: the entries of its compiles are packed
    and compressed here, sent with the batch, and installed once into the worker's Triton cache."""
    from aot_tune.bench.dask.remote import RemoteBatch
    from aot_tune.bench.runner import STARTUP_WAITED

    with planned_cluster(project, tmp_path, 1, compile_executors) as (devices, device, request, hashes):
        entries = devices.cache_entries([request(0)])
        assert sorted(entries) == hashes
        results = [devices.run(RemoteBatch(f"check {i}", device.key, device.backend, devices._sources,
                                           (request(0),), entries, 600.0)) for i in range(2)]
    assert [r.entries_installed for r in results] == [len(hashes), 0]  # the second batch found them there
    assert all(r.measurements[0].status == "ok" and r.worker == "t-interpreter0" for r in results)
    # nothing started the worker's device process before: the first batch waited for it, and says so
    waited = [r.seconds[STARTUP_WAITED] for r in results]
    assert waited[0] > 0.2 and waited[1] < 0.05, waited


def test_a_bench_task_holds_one_worker_and_each_worker_is_sent_an_entry_once(project, tmp_path, compile_executors):
    """As a local lease holds one GPU: two tasks at once hold two workers, a task's batches all
    run on its worker, and a freed worker goes first to the task of the shape it measured last.
    A worker is sent each Triton cache entry once; another worker is sent it again."""
    from aot_tune.bench.dask.remote import RemoteBatch

    with planned_cluster(project, tmp_path, 2, compile_executors) as (devices, device, request, hashes):
        first, second = request(0), request(1)
        with devices.lease(device, first) as one, devices.lease(device, second) as two:
            for _ in range(2):
                assert one.measure_all([first], 600.0)[0].status == "ok"
                assert two.measure_all([second], 600.0)[0].status == "ok"
            assert len(set(one.workers)) == len(set(two.workers)) == 1 and one.workers != two.workers
            held = one._address
        with devices.lease(device, second) as again:
            assert again._address != held  # the worker that measured this shape last
        entries = devices.cache_entries([first], held)
        assert sorted(entries) == hashes
        batch = RemoteBatch("entries", device.key, device.backend, devices._sources, (first,), entries, 600.0)
        result = devices.run(batch, held)
        devices.shipped(held, batch, result)
        assert result.entries_installed == len(hashes)
        assert devices.cache_entries([first], held) == {}  # sent there already
        (other,) = [a for a in devices._seats[device.key].members() if a != held]
        assert sorted(devices.cache_entries([first], other)) == hashes


def test_dask_options_are_checked_with_one_line(project):
    for args, message in ((["--executor", "dask"], "--executor dask needs the scheduler's address"),
                          (["--executor", "ray"], "unknown executor 'ray'"),
                          (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler is only used with --executor dask")):
        proc = tune(project, *args, check=False)
        assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr


def test_a_dry_run_on_the_cluster_plans_its_devices_and_writes_nothing(tmp_path):
    fresh = make_project(tmp_path / "fresh", MANIFEST)
    with cluster(tmp_path, 2) as dask:
        proc = doit(fresh, "tune", "--dry-run", "--bench-backend", "interpreter", "--executor", "dask",
                    *dask.tune_args(), "-n", "2")
        assert dask.batches_started() == []
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("dry run of tuning.yaml on 2 x interpreter: nothing is compiled")
    assert f"  bench    {len(SHAPES)} of {len(SHAPES)} tasks on interpreter, {3 * len(SHAPES)} measurements" in proc.stdout
    assert "2 x interpreter, beyond the compile part" in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("predicted ")
    assert not (fresh / ".aot_tune").exists()
