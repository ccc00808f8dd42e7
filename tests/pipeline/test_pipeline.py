"""End to end on the CPU: `doit tune` in a scratch project, through real cross-compiles for
sm80/sm90 and the Triton interpreter, exactly as a user runs it (a subprocess per run)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import tunerun
from tunerun import doit, doit_command, executed, make_project, subprocess_env, vector_add_manifest

MANIFEST = vector_add_manifest("""\
    space:
      BLOCK_SIZE: [128, 384, 1024]
      num_warps: [4]
    shapes:
      - {n: 1000}
      - {n: 3000}
    dtypes: [float16, float32]
  softmax:
    kernel: kernels.softmax:softmax_kernel
    launch: kernels.softmax:softmax
    inputs: kernels.softmax:make_inputs
    reference: kernels.softmax:reference
    key: [M, N]
    space:
      BLOCK_N: [128, 256]
      num_warps: [1, 2]
    constraints: ["BLOCK_N == max(128, next_pow2(N))"]
    shapes:
      - {M: 4, N: 100}
""", targets="[sm80, sm90]")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("project"), MANIFEST)


@pytest.fixture(scope="module")
def first_run(project: Path) -> subprocess.CompletedProcess:
    return tune(project)


def tune(project: Path, *args: str, check: bool = True):
    return tunerun.tune(project, "-n", "2", *args, check=check)


def test_first_run_compiles_benches_merges_and_generates(project, first_run):
    names = executed(first_run)
    # 3 configs x 2 dtypes x 2 targets: n=1000 and n=3000 specialize alike (neither divisible by 16)
    assert sum(n.startswith("compile:vector_add:") for n in names) == 12
    assert sum(n.startswith("bench:vector_add:interpreter:") for n in names) == 4  # 2 shapes x 2 dtypes
    assert {"merge:vector_add", "generate:vector_add", "generate:softmax"} <= set(names)
    assert (project / "generated" / "vector_add.tuning.pb").exists()
    assert "[bench] 5/5 done" in first_run.stderr  # progress lines
    assert "compile: 16 compiled, 12 valid, 4 invalid (compile_error 4)" in first_run.stderr
    # the bench stage's share of device time is reported with the device workers' start-up
    # (the timed kernel share follows on a GPU; the interpreter's wall-clock runs are not kernel time)
    assert re.search(r"bench stage: [\d.]+s on 1 device\(s\), [\d.]+s of it after the device workers were up "
                     r"\(start-up [\d.]+s, [\d.]+s of it waited for\), [\d.]+s from its first batch to its end",
                     first_run.stderr), first_run.stderr[-2000:]


def test_invalid_config_is_recorded_and_never_chosen(project, first_run):
    from aot_tune.cache import config_from_proto, read_cache

    cache = read_cache(project / "generated" / "vector_add.tuning.pb")
    assert len(cache.records) == 4
    for record in cache.records:
        statuses = {config_from_proto(m.config)["BLOCK_SIZE"]: m.status for m in record.measurements}
        assert statuses[384] == "invalid"  # tl.arange needs a power of two: a compile error
        assert statuses[128] == statuses[1024] == "ok"
        assert config_from_proto(record.best)["BLOCK_SIZE"] in (128, 1024)
        assert all(m.median_ms > 0 for m in record.measurements if m.status == "ok")


def test_generated_module_imports_without_torch_and_returns_configs(project, first_run):
    code = textwrap.dedent("""
        import sys
        from generated import vector_add
        exact = vector_add.lookup("interpreter", "float16", n=1000)
        near = vector_add.lookup("interpreter", "float32", n=2900)
        print(sorted(exact), near["BLOCK_SIZE"] in (128, 1024), "torch" in sys.modules, "triton" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True,
                         env=subprocess_env(project), check=True).stdout
    assert out.split() == ["['BLOCK_SIZE',", "'num_warps']", "True", "False", "False"]


def test_the_decorated_kernel_launches_the_configs_the_run_chose(project, first_run):
    """vector_add is an @aot_tune.autotune kernel: the tuner forced each candidate through it
    (384 failed to compile, so the forcing reached Triton), and the table it wrote is what a
    plain launch in a fresh process now runs, with no fallback warning."""
    code = textwrap.dedent("""
        import json, warnings
        import torch
        from aot_tune.runtime import TuningWarning
        from generated import vector_add as table
        from kernels import vector_add
        warnings.simplefilter("error", TuningWarning)
        result = []
        for (n, dtype), config in sorted(table.TABLES["interpreter"].items()):
            x, y = vector_add.make_inputs({"n": n}, getattr(torch, dtype), "cpu")
            ok = torch.equal(vector_add.add(x, y), x + y)
            result.append([ok, vector_add.add_kernel.config_for(x, y, x, n) == config])
        print(json.dumps(result))
    """)
    env = {**subprocess_env(project), "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[True, True]] * 4


def test_generated_module_is_deterministic(project, first_run):
    text = (project / "generated" / "vector_add.py").read_text()
    assert "TABLES" in text and "'interpreter'" in text
    assert "20" + "26-" not in text.split('"""', 1)[1]  # no timestamps in the body


def test_second_run_executes_nothing(project, first_run):
    start = time.monotonic()
    proc = tune(project)
    assert executed(proc) == [] and "[specialize]" not in proc.stderr
    assert time.monotonic() - start < 10  # no worker was started: a no-op is cheap


def test_new_shapes_bench_only_those_and_compile_only_a_new_specialization(project, first_run):
    """N=120 specializes as N=100 does (not divisible by 16): its launches reuse those compiles.
    N=112 is divisible by 16: a new specialization, compiled once per config and target."""
    manifest = project / "tuning.yaml"
    original = manifest.read_text()
    manifest.write_text(original.replace("      - {M: 4, N: 100}",
                                         "      - {M: 4, N: 100}\n      - {M: 2, N: 120}\n      - {M: 2, N: 112}"))
    try:
        proc = tune(project, "softmax")
    finally:
        manifest.write_text(original)
    names = executed(proc)
    assert sorted(n for n in names if n.startswith("bench:")) == \
        ["bench:softmax:interpreter:float16:2x112", "bench:softmax:interpreter:float16:2x120"]
    compiles = [n for n in names if n.startswith("compile:")]
    assert len(compiles) == 4 and len({n.split(":")[3] for n in compiles}) == 1  # 2 configs x 2 targets
    assert "[specialize] 8 launches of softmax" in proc.stderr  # only the new shapes' launches
    assert not any("vector_add" in n for n in names)


def test_bad_manifest_gives_one_line_and_nonzero_exit(tmp_path):
    (tmp_path / "tuning.yaml").write_text("version: 1\nkernels:\n  k:\n    kernel: nope\n")
    proc = tune(tmp_path, check=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "tuning.yaml:" in proc.stderr


def test_unknown_kernel_name_is_refused(project, first_run):
    proc = tune(project, "nosuchkernel", check=False)
    assert proc.returncode != 0
    assert "nosuchkernel" in proc.stderr and "Traceback" not in proc.stderr


def test_two_concurrent_runs_one_refuses_the_other_finishes(tmp_path):
    project = make_project(tmp_path, MANIFEST)
    first = subprocess.Popen(doit_command("tune", "--bench-backend", "interpreter"), cwd=project,
                             env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = project / ".aot_tune" / "run.lock"
    deadline = time.monotonic() + 60
    while not (lock.exists() and lock.read_text().startswith("pid")) and time.monotonic() < deadline:
        time.sleep(0.02)
    second = tune(project, check=False)
    out, err = first.communicate(timeout=600)
    assert second.returncode != 0
    assert "another doit tune is running in this tree" in second.stderr
    assert first.returncode == 0, out + err
    assert executed(tune(project)) == []  # the first run finished everything, untouched by the second


@pytest.mark.parametrize("kill_at", ["after-two-shapes", "mid-compile", "random-1"])
def test_killed_run_keeps_every_file_parseable_and_resumes(tmp_path, kill_at):
    """SIGKILL the whole run (mid-bench, or at a seeded random moment); every durable file still
    parses, and the next run completes without redoing the shapes that had finished."""
    import random
    import signal

    from aot_tune.cache import read_cache, read_record

    project = make_project(tmp_path, MANIFEST.replace("      - {n: 3000}\n", "".join(
        f"      - {{n: {n}}}\n" for n in (3000, 5000, 7000, 9000, 11000, 13000))))
    run = subprocess.Popen(doit_command("tune", "--bench-backend", "interpreter", "-n", "2"), cwd=project,
                           env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    bench_dir = project / ".aot_tune" / "bench"
    compile_dir = project / ".aot_tune" / "compile"
    if kill_at in ("after-two-shapes", "mid-compile"):
        done = (lambda: len(list(bench_dir.rglob("*.pb"))) >= 2) if kill_at == "after-two-shapes" else \
            (lambda: len(list(compile_dir.rglob("*.json"))) >= 3)
        deadline = time.monotonic() + 300
        while not done() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    else:
        time.sleep(random.Random(kill_at).uniform(0.5, 12.0))
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    compiled = {"compile:" + ":".join(p.relative_to(compile_dir).with_suffix("").parts)
                for p in compile_dir.rglob("*.json")} if compile_dir.exists() else set()
    specialized = all((project / ".aot_tune" / "specialize" / f"{k}.json").exists() for k in ("vector_add", "softmax"))
    finished = sorted(p.name for p in bench_dir.rglob("*.pb")) if bench_dir.exists() else []
    if kill_at == "after-two-shapes":
        assert len(finished) >= 2, "the run ended before it could be killed mid-way"
    for path in bench_dir.rglob("*.pb") if bench_dir.exists() else ():
        read_record(path)  # every durable output parses: written atomically or not at all
    for cache in (project / "generated").glob("*.pb") if (project / "generated").exists() else ():
        read_cache(cache)
    if kill_at == "mid-compile":
        assert specialized and len(compiled) >= 3 and not finished, "the run was not killed among its compiles"
    resumed = tune(project)
    names = executed(resumed)
    rerun = {n.rsplit(":", 2)[-2] + "-" + n.rsplit(":", 1)[-1] + ".pb" for n in names if n.startswith("bench:")}
    assert not rerun & set(finished), "finished shapes were benchmarked again"
    assert not compiled & set(names), "finished compiles ran again"
    if specialized:
        assert "[specialize]" not in resumed.stderr, "launches were specialized again"
    assert (project / "generated" / "vector_add.py").exists()
    assert doit_check(project).returncode == 0


def doit_check(project: Path, *args: str) -> subprocess.CompletedProcess:
    return doit(project, "check", *args)


def test_check_passes_in_sync_and_names_the_edited_kernel(project, first_run, tmp_path):
    in_sync = doit_check(project)
    assert in_sync.returncode == 0, in_sync.stdout + in_sync.stderr
    assert "2 tables in sync with the sources, the manifest and the toolchain; devices covered: interpreter" \
        in in_sync.stdout
    edited = Path(shutil.copytree(project, tmp_path / "project"))  # the tuned project, its kernel edited
    kernel_file = edited / "kernels" / "softmax.py"
    kernel_file.write_text(kernel_file.read_text().replace("tl.max(", "tl.max(  ", 1))  # a change inside the body
    stale = doit_check(edited)
    assert stale.returncode == 1
    assert "stale: softmax on interpreter" in stale.stdout
    assert "vector_add on interpreter" not in stale.stdout.replace("vector_add      interpreter", "")
    names = executed(tune(edited))
    assert names and all(":softmax" in n or n.startswith(("bench:softmax", "compile:softmax")) for n in names)
    assert doit_check(edited).returncode == 0


def test_adding_a_config_compiles_and_measures_only_that_config(project, first_run):
    manifest = project / "tuning.yaml"
    original = manifest.read_text()
    manifest.write_text(original.replace("BLOCK_SIZE: [128, 384, 1024]", "BLOCK_SIZE: [128, 384, 1024, 2048]"))
    try:
        added = tune(project, "vector_add")
        compiles = [n for n in executed(added) if n.startswith("compile:")]
        assert len(compiles) == 4  # the new config, for its 2 specializations (dtypes) and 2 targets
        assert "bench: 4 config measurements" in added.stderr  # one per shape x dtype, nothing re-measured
    finally:
        manifest.write_text(original)
    removed = tune(project, "vector_add")  # back to three configs: re-pick only, no measurement
    assert not any(n.startswith("compile:") for n in executed(removed))
    assert "config measurements" not in removed.stderr
    assert doit_check(project).returncode == 0


def test_a_run_where_no_config_passes_fails_and_keeps_the_good_table(project, first_run, tmp_path):
    copy = Path(shutil.copytree(project, tmp_path / "project"))  # the tuned project, to break
    module = copy / "generated" / "vector_add.py"
    good = module.read_text()
    kernel_file = copy / "kernels" / "vector_add.py"
    kernel_file.write_text(kernel_file.read_text().replace("(x.float() + y.float())", "(x.float() - y.float())", 1))
    failed = tune(copy, "vector_add", check=False)
    assert failed.returncode != 0
    output = failed.stdout + failed.stderr
    # the first bench to fail stops the run; which shape goes first follows the earlier run's timings
    assert re.search(r"vector_add float(16|32) (1000|3000): no config passed \(invalid 1, wrong_result 2\)", output), output
    assert "relative error" in output
    assert "Traceback" not in output
    assert module.read_text() == good  # merge and generate never ran
    assert doit_check(copy).returncode == 1  # and the check says the table is stale


def test_check_with_the_installed_toolchain_flags_other_versions(project, first_run):
    """Records made with the installed triton/torch pass either way; the repo's H200 tables
    (made with another triton than this machine's) would fail only the strict mode."""
    assert doit_check(project, "--toolchain", "installed").returncode == 0
    bogus = doit_check(project, "--toolchain", "newest")
    assert bogus.returncode != 0 and "--toolchain must be one of" in bogus.stderr


def test_process_parallelism_is_refused_with_a_reason(project, first_run):
    proc = tune(project, "-P", "process", check=False)
    assert proc.returncode != 0 and "-P process is not supported" in proc.stderr
