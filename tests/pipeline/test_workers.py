"""How worker processes start: compile workers forked from a fork server that imported torch and
triton once (aot_tune.forking, aot_tune.workers.preload), and what must still hold for them:
the run's Triton cache and environment, recovery from a crash or a hang, the spawn fallback."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from tunerun import doit_command, make_project, subprocess_env, vector_add_manifest

from aot_tune import triton_compat
from aot_tune import forking
from aot_tune.build.compile import CompileRequest
from aot_tune.workers.pools import COMPILE_NICENESS, Executors, worker_state
from aot_tune.bench.runner import INTERPRETER_DEVICE, DeviceModel

pytest.importorskip("triton")
needs_forkserver = pytest.mark.skipif(not forking.available(), reason="no forkserver start method here")


def states(executors: Executors, workers: int) -> list[dict]:
    """The state of each of ``workers`` distinct workers (tasks held long enough to spread)."""
    futures = [executors._pool().submit(worker_state, 1.0) for _ in range(workers)]
    found = {s["pid"]: s for s in (f.result(timeout=120) for f in futures)}
    assert len(found) == workers
    return list(found.values())


@needs_forkserver
def test_compile_workers_are_forks_of_a_server_that_imported_torch_once(tmp_path, monkeypatch):
    """No worker imports torch, triton or anything else of note: it inherits them. Each still
    compiles into its own run's Triton cache, with the pinned environment and without the
    interpreter switch this test process has; and it sees the environment its pool was created
    with, as a spawned worker would (the server was started earlier, with another one). Where
    the benches run on GPUs, the compile workers run below this process's CPU priority, so a
    device worker's host work never waits for a compile; under the interpreter they do not."""
    monkeypatch.setenv("AOT_TUNE_TEST_MARK", "set after the server started")
    first = Executors(INTERPRETER_DEVICE, tmp_path / "one", compile_jobs=2)
    second = Executors(DeviceModel("cuda", "h100-sxm", "NVIDIA H100 80GB HBM3", "9.0", 1), tmp_path / "two",
                       compile_jobs=1)
    try:
        first.start_compiles()
        begun = time.perf_counter()
        found = states(first, 2)
        up = time.perf_counter() - begun - 1.0  # less the tasks' own hold
        other = states(second, 1)
    finally:
        first.close()
        second.close()
    assert os.environ["TRITON_INTERPRET"] == "1"  # this process: the interpreter (conftest)
    for state, cache in [(s, tmp_path / "one") for s in found] + [(other[0], tmp_path / "two")]:
        assert state["forked"] and state["torch_preloaded"], state
        assert state["preload"]["preloaded"] and state["preload"]["threads"] == 1 and not state["preload"]["error"]
        assert state["preload"]["exits_at_once"]  # the server skips its teardown (workers leave by os._exit)
        assert state["modules_imported"] < 20, state  # a spawned worker imports about 1000 here
        assert state["TRITON_CACHE_DIR"] == str(cache) and state["TRITON_INTERPRET"] is None
        assert all(state["environ"].get(k) == v for k, v in triton_compat.PINNED_ENV.items())
        assert state["environ"]["AOT_TUNE_TEST_MARK"] == "set after the server started"
    assert [s["niceness"] for s in found] == [os.nice(0)] * 2
    assert other[0]["niceness"] == min(19, os.nice(0) + COMPILE_NICENESS) > os.nice(0) or os.nice(0) == 19
    assert up < 30  # generous: loaded CI machines; the point is above, nothing is imported


@needs_forkserver
def test_compile_workers_import_the_kernels_modules_as_they_start(tmp_path):
    """Each worker imports the kernels' modules in its start-up (a library's import, seconds,
    overlaps the captures); one that fails to import is left to the compile that needs it."""
    executors = Executors(INTERPRETER_DEVICE, tmp_path / "cache", compile_jobs=2)
    root = str(Path(__file__).resolve().parents[2])
    executors.kernel_imports = ((root, "kernels.vector_add:add"), (root, "no_such_module:thing"))
    try:
        found = [executors._pool().submit(worker_state, 1.0, "kernels.vector_add") for _ in range(2)]
        found = {s["pid"]: s for s in (f.result(timeout=120) for f in found)}
    finally:
        executors.close()
    assert len(found) == 2
    assert all(s["imported"] and s["kernel_imports_s"] > 0 for s in found.values()), found


@needs_forkserver
def test_no_cuda_in_the_fork_server():
    """A GPU device worker forked from the server initializes CUDA itself: the server must not
    have initialized the CUDA driver or NVML (a CUDA build of torch loads libcuda when imported,
    which is harmless), torch's CUDA or Triton's driver (checked in a fork of it, on whatever
    machine runs the tests, a GPU host included)."""
    executors = Executors(INTERPRETER_DEVICE, Path("/nonexistent-cache"), compile_jobs=1)
    try:
        problem = executors._pool().submit(forking.cuda_fork_problem).result(timeout=120)
        (state,) = states(executors, 1)
    finally:
        executors.close()
    assert problem is None and state["forked"]


def crashing_project(root: Path) -> Path:
    """A kernel whose launch function kills its process (BLOCK 1) or hangs (BLOCK 2) before launching."""
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "__init__.py").write_text("")
    (root / "kernels" / "crashy.py").write_text(textwrap.dedent("""\
        import os, time
        import torch, triton, triton.language as tl

        @triton.jit
        def copy_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, tl.load(x_ptr + offs))

        def make_inputs(shape, dtype, device):
            return torch.empty(shape["n"], dtype=dtype, device=device), torch.empty(shape["n"], dtype=dtype, device=device)

        def launch(x, y, config):
            if config["BLOCK"] == 1:
                os._exit(3)
            if config["BLOCK"] == 2:
                time.sleep(600)
            copy_kernel[(1,)](x, y, **config)
            return y
        """))
    return root


def crashy_request(root: Path, block: int) -> CompileRequest:
    return CompileRequest(kernel="crashy", root=str(root), kernel_ref="kernels.crashy:copy_kernel",
                          launch_ref="kernels.crashy:launch", inputs_ref="kernels.crashy:make_inputs",
                          config={"BLOCK": block}, target="sm90", shapes=({"n": 64},), dtypes=("float16",))


def test_a_compile_far_slower_than_its_peers_is_given_up_at_the_deadline(tmp_path):
    """Past the deadline relative to the run's valid compiles, a compile is recorded as timeout
    at once; its worker is left to it (the pool stays), the next compile runs on another worker,
    and closing does not wait for the abandoned one."""
    from aot_tune.build.deadline import CompileDeadline

    root = crashing_project(tmp_path / "project")
    executors = Executors(INTERPRETER_DEVICE, tmp_path / "cache", compile_jobs=2,
                          deadline=CompileDeadline(factor=3, min_s=2, peers=2))
    try:
        executors.start_compiles()
        assert all(executors.compile(crashy_request(root, block), str(block)).valid for block in (64, 128))
        pool, began = executors._pool(), time.monotonic()
        slow = executors.compile(crashy_request(root, 2), "slow")
        assert slow.status == "timeout" and slow.message.startswith("compile deadline: over 2 s")
        assert time.monotonic() - began < 30 and executors._pool() is pool
        assert executors.compile(crashy_request(root, 32), "32").valid
    finally:
        began = time.monotonic()
        executors.close()
        assert time.monotonic() - began < 30


def test_the_deadline_gives_up_only_a_compile_no_bench_may_still_pick(tmp_path):
    """Past the deadline, a compile some bench may still pick runs on (here until the absolute
    limit); once no bench may, it is given up at the next look, and says why."""
    from aot_tune.build.deadline import CompileDeadline

    root = crashing_project(tmp_path / "project")
    executors = Executors(INTERPRETER_DEVICE, tmp_path / "cache", compile_jobs=2, compile_timeout_s=8,
                          deadline=CompileDeadline(factor=3, min_s=2, peers=2))
    try:
        executors.start_compiles()
        assert all(executors.compile(crashy_request(root, block), str(block)).valid for block in (64, 128))
        began = time.monotonic()
        kept = executors.compile(crashy_request(root, 2), "wanted", may_win=lambda: True)
        assert (kept.status, kept.message) == ("timeout", "compile exceeded 8 s") and time.monotonic() - began >= 7
        asked = []
        began = time.monotonic()
        dropped = executors.compile(crashy_request(root, 2), "unwanted",
                                    may_win=lambda: asked.append(time.monotonic() - began) or len(asked) < 3)
        assert dropped.status == "timeout" and dropped.message.endswith(
            "; no bench of this run could still pick it; --compile-deadline 0 turns it off")
        assert len(asked) == 3 and 3.5 < time.monotonic() - began < 8  # asked at the deadline, then about once a second
    finally:
        executors.close()


def test_a_compile_every_bench_gave_up_is_abandoned_before_the_deadline(tmp_path):
    """Once every bench that uses it has given a straggler up, nothing reads its compile: it is
    given up at the next look (about once a second), long before the deadline, says why, and
    closing does not wait for it."""
    root = crashing_project(tmp_path / "project")
    executors = Executors(INTERPRETER_DEVICE, tmp_path / "cache", compile_jobs=2, compile_timeout_s=60)
    try:
        executors.start_compiles()
        assert executors.compile(crashy_request(root, 64), "64").valid
        looks = []
        began = time.monotonic()
        dropped = executors.compile(crashy_request(root, 2), "lost", may_win=lambda: True,
                                    lost=lambda: looks.append(time.monotonic() - began) or len(looks) >= 3)
        assert dropped.status == "timeout" and dropped.message.startswith("given up after ")
        assert dropped.message.endswith("every bench of this run that uses it judged it a straggler that cannot win")
        assert len(looks) == 3 and time.monotonic() - began < 10 and dropped.seconds < 10
    finally:
        began = time.monotonic()
        executors.close()
        assert time.monotonic() - began < 30


def test_with_the_deadline_off_a_compile_every_bench_gave_up_runs_to_its_end(tmp_path):
    """``--compile-deadline 0`` waits for every compile: one the benches gave up is not asked
    about, and runs on (here, a hang, until the absolute limit)."""
    from aot_tune.build.deadline import CompileDeadline

    root = crashing_project(tmp_path / "project")
    executors = Executors(INTERPRETER_DEVICE, tmp_path / "cache", compile_jobs=2, compile_timeout_s=4,
                          deadline=CompileDeadline(factor=0))
    try:
        executors.start_compiles()
        looks = []
        kept = executors.compile(crashy_request(root, 2), "lost", lost=lambda: looks.append(1) or True)
        assert (kept.status, kept.message, looks) == ("timeout", "compile exceeded 4 s", [])
    finally:
        executors.close()


def test_a_crash_or_a_hang_renews_the_compile_pool(tmp_path):
    """A worker that dies (twice: the config is retried once, alone on a worker of its own) is
    recorded as crashed, one that hangs as timeout; each time the pool is replaced, and the next
    compile runs in a new worker."""
    root = crashing_project(tmp_path / "project")
    executors = Executors(INTERPRETER_DEVICE, tmp_path / "cache", compile_jobs=2, compile_timeout_s=8)
    try:
        executors.start_compiles()
        pool = executors._pool()
        crashed = executors.compile(crashy_request(root, 1), "crash")
        assert (crashed.status, crashed.message) == ("crashed", "the compiler process died (alone on its worker)")
        assert executors._pool() is not pool
        pool = executors._pool()
        ok = executors.compile(crashy_request(root, 64), "ok")
        assert ok.status == "ok" and len(ok.specializations) == 1, ok.message
        hung = executors.compile(crashy_request(root, 2), "hang")
        assert hung.status == "timeout" and executors._pool() is not pool
        again = executors.compile(crashy_request(root, 64), "ok")
        assert again.status == "ok" and again.cache_hits == 1  # same cache, new worker
    finally:
        executors.close()


def run_python(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` as a script in a folder of its own (first on its path), in ``cwd``."""
    script = cwd.parent / f"{cwd.name}-script" / "main.py"
    script.parent.mkdir()
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], cwd=cwd, env={**subprocess_env(), **env},
                          capture_output=True, text=True, timeout=300)


CHECK_WORKERS = """\
    if __name__ == "__main__":  # (a worker runs this file too, as its main module: it imports nothing)
        import json
        from pathlib import Path
        from aot_tune.workers.pools import Executors, worker_state
        from aot_tune.bench.runner import INTERPRETER_DEVICE

        executors = Executors(INTERPRETER_DEVICE, Path("cache"), compile_jobs=1)
        state = executors._pool().submit(worker_state).result()
        executors.close()
        print(json.dumps({"forked": state["forked"], "torch_preloaded": state["torch_preloaded"],
                          "cache": state["TRITON_CACHE_DIR"]}))
    """


STOP_AND_START_AGAIN = """\
    if __name__ == "__main__":
        import json, os, time
        from multiprocessing import forkserver
        from pathlib import Path
        from aot_tune import forking
        from aot_tune.workers.pools import Executors, worker_state
        from aot_tune.bench.runner import INTERPRETER_DEVICE

        assert forking.start_server()
        first = forkserver._forkserver._forkserver_pid
        time.sleep(0.2)  # mid-import: the server imports torch and triton for about 2 s here
        began = time.perf_counter()
        forking.stop_server()
        stop_s = time.perf_counter() - began
        try:
            os.kill(first, 0)
            gone = False
        except ProcessLookupError:
            gone = True
        executors = Executors(INTERPRETER_DEVICE, Path("cache"), compile_jobs=1)
        state = executors._pool().submit(worker_state).result()
        executors.close()
        forking.stop_server()  # a worker was forked from this one: it stays
        print(json.dumps({"gone": gone, "stop_s": stop_s, "forked": state["forked"],
                          "fresh": forkserver._forkserver._forkserver_pid not in (None, first)}))
    """


@needs_forkserver
def test_a_server_no_worker_used_stops_at_once_and_a_later_start_is_a_fresh_one(tmp_path):
    """A run starts the fork server before it plans; one that then finds nothing to do stops it
    mid-import (its imports would go on after the run, holding the run's output open). A start
    after that is a fresh server, whose forked workers work; one that forked a worker stays."""
    proc = run_python(STOP_AND_START_AGAIN, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["gone"] and result["stop_s"] < 1.0 and result["forked"] and result["fresh"], result


def test_workers_are_spawned_when_switched_off(tmp_path):
    proc = run_python(CHECK_WORKERS, tmp_path, AOT_TUNE_FORKSERVER="0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith('{"forked": false, "torch_preloaded": false, "cache": "cache"}')


@needs_forkserver
def test_a_server_that_finds_another_aot_tune_is_not_used(tmp_path):
    """The server imports from its own path, where the working folder comes first: here it holds
    another aot_tune (as a second checkout would). A forked worker would run that code, so the
    check sends the workers to spawn, and says why."""
    work = tmp_path / "work"
    (work / "aot_tune").mkdir(parents=True)
    (work / "aot_tune" / "__init__.py").write_text("")
    proc = run_python(CHECK_WORKERS, work)  # the script's folder, not the working one, is on its path
    assert proc.returncode == 0, proc.stderr
    assert "starting workers the slow way (spawn): a worker forked from the fork server finds aot_tune at " \
           f"{work / 'aot_tune' / '__init__.py'}" in proc.stderr
    assert proc.stdout.strip().endswith('{"forked": false, "torch_preloaded": false, "cache": "cache"}')


#: Stand-ins for the CUDA driver, preloaded into every process: cuDeviceGetCount answers as the
#: real one does before cuInit (3, CUDA_ERROR_NOT_INITIALIZED) or after it (0), or is missing.
STAND_IN_DRIVERS = {
    "loaded, not initialized": "int cuDeviceGetCount(unsigned *count) { *count = 0; return 3; }",
    "initialized": "int cuDeviceGetCount(unsigned *count) { *count = 1; return 0; }",
    "loaded, its state unreadable": "int cuGetProcAddress(void) { return 0; }",
}


@needs_forkserver
@pytest.mark.skipif(torch.version.cuda is not None, reason="the stand-in would replace this torch's CUDA driver")
@pytest.mark.skipif(shutil.which("cc") is None, reason="builds a stand-in libcuda with the C compiler")
@pytest.mark.parametrize("driver", list(STAND_IN_DRIVERS))
def test_a_gpu_worker_is_forked_only_if_the_fork_server_left_the_cuda_driver_uninitialized(tmp_path, driver):
    """A loaded but uninitialized driver (what importing a CUDA build of torch leaves) is safe to
    fork: the worker is forked. An initialized one, or one whose state the server could not read,
    sends the pool to spawn the worker instead, saying why. Either way the worker then fails to
    open its device, as there is no GPU here."""
    source = tmp_path / "cuda.c"
    source.write_text(STAND_IN_DRIVERS[driver] + "\n")
    library = tmp_path / "libcuda.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    code = """\
        from aot_tune.bench.local.pool import DevicePool

        if __name__ == "__main__":
            pool = DevicePool("cuda", 1, "cache")
            try:
                pool.worker(0)
            except RuntimeError as exc:
                print("failed:", exc)
            pool.close()
        """
    proc = run_python(code, tmp_path, LD_PRELOAD=str(library))
    assert proc.returncode == 0, proc.stderr
    assert "failed: cuda device worker 0 failed to start" in proc.stdout
    if driver == "loaded, not initialized":
        assert "spawning" not in proc.stderr, proc.stderr
    else:
        assert f"spawning cuda device workers: libcuda.so in the fork server: {driver}" in proc.stderr


def test_a_gpu_worker_asked_for_while_the_server_imports_torch_is_spawned(monkeypatch):
    """A run's first GPU worker is asked for with the captures, while a server started for torch
    still imports (10-13 s on a GPU host): it is spawned and imports torch beside it. A server of
    Triton alone, or one a worker was forked from already, forks it."""
    from aot_tune.bench.local.pool import DevicePool

    forked = object()
    monkeypatch.setattr(forking, "context", lambda: forked)
    monkeypatch.setattr(forking, "_server_started", True)
    monkeypatch.setattr(forking, "_method", None)
    monkeypatch.setenv(forking.TORCH_ENV, "1")
    gpu, cpu = DevicePool("cuda", 1, "cache"), DevicePool("interpreter", 1, "cache")
    assert forking.importing_torch() and gpu._fresh_context().get_start_method() == "spawn"
    assert cpu._fresh_context() is forked  # a GPU worker only (the interpreter's are always spawned)
    monkeypatch.setenv(forking.TORCH_ENV, "0")
    assert not forking.importing_torch() and gpu._fresh_context() is forked
    monkeypatch.setenv(forking.TORCH_ENV, "1")
    monkeypatch.setattr(forking, "_method", "forkserver")
    assert not forking.importing_torch() and gpu._fresh_context() is forked
    monkeypatch.setattr(forking, "_method", None)
    monkeypatch.setattr(forking, "_server_started", False)
    assert not forking.importing_torch() and gpu._fresh_context() is forked


# -- in a run --------------------------------------------------------------------------------------
RUN_MANIFEST = vector_add_manifest("""\
    space:
      BLOCK_SIZE: [256, 512]
      num_warps: [4]
    shapes:
      - {n: 4096}
    dtypes: [float16]
""")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> list[tuple[Path, subprocess.Popen, tuple[str, str]]]:
    """Two cold `doit tune` of RUN_MANIFEST started at once in two trees: each tree, its run, and
    the run's stdout and stderr."""
    root = tmp_path_factory.mktemp("two-runs")
    projects = [make_project(root / name, RUN_MANIFEST) for name in ("one", "two")]
    procs = [subprocess.Popen(doit_command("tune", "--bench-backend", "interpreter"), cwd=p, env=subprocess_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in projects]
    return list(zip(projects, procs, [proc.communicate(timeout=600) for proc in procs]))


def test_two_runs_at_once_each_with_its_own_workers(two_runs):
    """Two cold `doit tune` in two trees at the same time: each process has its own fork server
    and workers, compiling into its own tree's Triton cache; both finish, and the summary gives
    the device workers' start-up (they started before the bench stage)."""
    for project, proc, (out, err) in two_runs:
        assert proc.returncode == 0, out + err
        assert "compile: 2 compiled, 2 valid" in err and "bench: 2 config measurements, 2 ok" in err
        assert "after the device workers were up (start-up" in err
        assert (project / "generated" / "vector_add.py").exists()
        assert any((project / ".aot_tune" / "triton-cache").rglob("add_kernel.cubin"))


def test_a_run_with_nothing_to_do_and_doit_list_start_no_worker(two_runs, tmp_path, monkeypatch):
    """After a run (a copy of a tree of two_runs), a no-op run starts neither compile nor device
    workers, and stops the fork server it started before planning as soon as it knows; `doit
    list` in a tree with everything stale starts nothing (run in this process, counting)."""
    (tuned, proc, _), _ = two_runs
    assert proc.returncode == 0
    done = Path(shutil.copytree(tuned, tmp_path / "done"))
    fresh = make_project(tmp_path / "fresh", RUN_MANIFEST)
    (fresh / "pyproject.toml").write_text('[tool.doit]\nloader = "aot_tune"\n')  # for `doit list`
    from doit.doit_cmd import DoitMain

    from aot_tune.bench.local.pool import DevicePool

    started = []
    monkeypatch.setattr(forking, "start_server", lambda torch=True: started.append("server"))
    monkeypatch.setattr(forking, "stop_server", lambda: started.append("stopped"))
    monkeypatch.setattr(Executors, "start_compiles", lambda self: started.append("compiles"))
    monkeypatch.setattr(DevicePool, "start", lambda self: started.append("devices"))
    for project, args in ((done, ["tune", "--bench-backend", "interpreter"]), (fresh, ["list", "--all"])):
        monkeypatch.chdir(project)
        database = str(project / ".aot_tune" / "doit.db")  # absolute: doit closes it from the original folder
        assert DoitMain().run([args[0], "--db-file", database, *args[1:]]) == 0
    assert started == ["server", "stopped"]  # started before the planning, stopped once it found no work
