"""Bad manifests, bad inputs and broken local state: one line (what, where, fix) and a non-zero
exit within seconds, never a hang or a traceback, and nothing already tuned lost."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from tunerun import REPO, alias_bomb, doit, make_project, tune, vector_add_manifest

import aot_tune
from aot_tune.manifest import load_manifest
from aot_tune.errors import ManifestError

VECTOR_ADD = vector_add_manifest("""\
    space: {BLOCK_SIZE: [256, 1024], num_warps: [4]}
    constraints:
      - "BLOCK_SIZE >= 32 * num_warps"
    shapes: [{n: 4096}]
    dtypes: [float32]
""")


CASES = {
    "alias bomb": (lambda m: alias_bomb() + m, "expands to more than"),
    "power that never ends": (lambda m: m.replace('"BLOCK_SIZE >= 32 * num_warps"', '"9 ** 9 ** 9 > BLOCK_SIZE"'),
                              "too large"),
    "grid of a million shapes": (lambda m: m.replace("key: [n]", "key: [m, n]").replace(
        "shapes: [{n: 4096}]", "shapes:\n      - grid: {m: [" + ", ".join(str(i) for i in range(1, 1001))
        + "], n: [" + ", ".join(str(i) for i in range(1, 1001)) + "]}"), "1,000,000 shapes"),
    "space of a million combinations": (lambda m: m.replace(
        "space: {BLOCK_SIZE: [256, 1024], num_warps: [4]}",
        "space: {BLOCK_SIZE: [" + ", ".join(str(i) for i in range(1, 1001)) + "], num_warps: [4], num_stages: ["
        + ", ".join(str(i) for i in range(1, 1001)) + "]}"), "combinations"),
    "a huge module:attr value": (lambda m: m.replace("kernels.vector_add:add_kernel", "kernels.vector_add:" + "x" * 2_000_000 + "!"),
                                 "characters)"),
    "a shape dim beyond any GPU": (lambda m: m.replace("{n: 4096}", "{n: 1000000000000000000000000000000}"), "2**40"),
    "a shape-dependent constraint that raises": (lambda m: m.replace('"BLOCK_SIZE >= 32 * num_warps"',
                                                                     '"BLOCK_SIZE / (n - 4096) > 0"'), "ZeroDivisionError"),
    "a constraint that empties one shape": (lambda m: m.replace('"BLOCK_SIZE >= 32 * num_warps"', '"BLOCK_SIZE > n"'),
                                            "no config of the space passes"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_manifest_is_one_line_within_a_second(tmp_path, case):
    mutate, expected = CASES[case]
    text = mutate(VECTOR_ADD)
    root = make_project(tmp_path, text)
    began = time.perf_counter()
    with pytest.raises(ManifestError) as info:
        load_manifest(root / "tuning.yaml")
    assert time.perf_counter() - began < 5
    message = str(info.value)
    assert expected in message and "\n" not in message and "; fix: " in message
    assert len(message) < 1000
    assert re.match(r".*tuning\.yaml:\d+: ", message), message  # the line, as every manifest error


@pytest.mark.parametrize("ref, expected", [
    ("kernels.vector_add:" + "a" * 10_000_000, "has no top-level 'aaaa"),  # a 10 MB attribute name
    ("kernels.does_not_exist:add_kernel", "cannot find module 'kernels.does_not_exist'"),
], ids=["a 10 MB attribute name", "a module that is not there"])
def test_a_reference_that_is_not_there_is_one_short_line_at_its_manifest_line(tmp_path, ref, expected):
    root = make_project(tmp_path, VECTOR_ADD)
    text = (root / "tuning.yaml").read_text()
    line = text.splitlines().index("    kernel: kernels.vector_add:add_kernel") + 1
    (root / "tuning.yaml").write_text(text.replace("kernels.vector_add:add_kernel", ref))
    for args in (("check",), ("tune", "--bench-backend", "interpreter")):
        proc = doit(root, *args)
        assert proc.returncode == 3 and proc.stdout == "", (proc.stdout + proc.stderr)[:2000]
        error, = proc.stderr.splitlines()
        assert error.startswith(f"ERROR: tuning.yaml:{line}: kernels.vector_add.kernel: ") and expected in error
        assert len(error) < 500 and error.endswith(("check the module path in the manifest",
                                                    "name a function defined in that module"))


def test_the_repositorys_manifest_is_within_every_limit():
    load_manifest(REPO / "tuning.yaml")


# --------------------------------------------------------------------------- through doit tune

BROKEN_INPUTS = {
    "raises": 'raise RuntimeError("no inputs for you")',
    "reads tensor data": 'x = torch.randn(shape["n"], dtype=dtype, device=device)\n    x.item()',
    "asks for a key dim the manifest lacks": 'n = shape["m"]',
}


@pytest.mark.parametrize("fault", sorted(BROKEN_INPUTS))
def test_a_broken_input_builder_is_one_line(tmp_path, fault):
    root = make_project(tmp_path, VECTOR_ADD)
    source = (root / "kernels" / "vector_add.py").read_text()
    body = '    """Two random vectors of length ``shape["n"]``."""\n'
    assert body in source
    source = source.replace(body, body + "    " + BROKEN_INPUTS[fault] + "\n", 1)
    (root / "kernels" / "vector_add.py").write_text(source)
    proc = tune(root, check=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and "input builder kernels.vector_add:make_inputs failed" in errors[0]


@pytest.mark.parametrize("damage, expected", [(b"\ndef broken(:\n", "fix: correct the syntax"),
                                              (b"\n# caf\xe9 in latin-1\n", "not UTF-8 text")])
def test_a_kernel_module_that_does_not_parse_is_one_line(tmp_path, damage, expected):
    root = make_project(tmp_path, VECTOR_ADD)
    path = root / "kernels" / "vector_add.py"
    path.write_bytes(path.read_bytes() + damage)
    proc = tune(root, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "kernels/vector_add.py" in proc.stderr and expected in proc.stderr


def test_a_corrupt_cache_stops_tune_with_one_line(tmp_path):
    root = make_project(tmp_path / "project", (REPO / "tuning.yaml").read_text())
    shutil.copytree(REPO / "generated", root / "generated")
    cache = root / "generated" / "softmax.tuning.pb"
    cache.write_bytes(b"\x0a\xff\xff" + cache.read_bytes())  # a field whose length runs past the end
    proc = tune(root, "softmax", check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "not a valid tuning cache" in proc.stderr and "git checkout" in proc.stderr


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """VECTOR_ADD tuned once under the interpreter (each test below breaks a copy of it)."""
    root = make_project(tmp_path_factory.mktemp("tuned"), VECTOR_ADD)
    tune(root)
    return root


@pytest.fixture
def root(tuned, tmp_path) -> Path:
    return Path(shutil.copytree(tuned, tmp_path / "project"))


def test_malformed_outputs_under_aot_tune_are_recomputed(root):
    work = root / ".aot_tune"
    ours = [*(work / "compile").rglob("*.json"), *(work / "specialize").glob("*.json")]
    assert ours
    for path in ours:
        path.write_text(json.dumps(["not", "a", "record"]))
    for path in (work / "bench").rglob("*.pb"):
        path.write_bytes(b"\xff\xff not a record")
    (root / "generated" / "vector_add.py").unlink()
    (root / "generated" / "vector_add.tuning.pb").unlink()
    proc = tune(root)
    assert "Traceback" not in proc.stderr
    assert (root / "generated" / "vector_add.py").exists()


def test_a_broken_doit_database_is_set_aside_and_rebuilt(root):
    import sqlite3

    (root / "pyproject.toml").write_text('[tool.doit]\nloader = "aot_tune"\nbackend = "sqlite3"\n'
                                         'dep_file = ".aot_tune/doit.sqlite3"\n')  # where the run wrote it
    database = root / ".aot_tune" / "doit.sqlite3"
    assert database.is_file()
    with sqlite3.connect(database) as conn:  # what an older or foreign tool leaves: another schema
        conn.execute("DROP TABLE doit")
        conn.execute("CREATE TABLE doit (other text)")
    proc = tune(root)
    assert "Traceback" not in proc.stderr and "not a usable doit database" in proc.stderr
    assert (root / ".aot_tune" / "doit.sqlite3.broken").is_file()
    assert not [line for line in proc.stdout.splitlines() if line.startswith(".  bench:")], "nothing reran"


def git(root, *args: str) -> str:
    proc = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, capture_output=True,
                          text=True, timeout=60)
    return proc.stdout + proc.stderr


def test_a_generated_module_left_in_a_merge_conflict_is_rewritten_from_its_cache(root):
    """git last committed it as aot_tune wrote it: ours to rewrite, with a note; a file aot_tune
    never wrote keeps the refusal."""
    module = root / "generated" / "vector_add.py"
    tuned = module.read_text()
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "tuning.yaml", "generated")
    git(root, "commit", "-q", "-m", "tuned")
    for branch, version in (("other", "0.0.9"), ("main", "0.1.1")):  # tuned on each by another aot_tune
        git(root, "checkout", "-q", "-B", branch) if branch == "other" else git(root, "checkout", "-q", "main")
        module.write_text(tuned.replace(f"aot_tune {aot_tune.__version__} ", f"aot_tune {version} ", 1))
        git(root, "commit", "-q", "-am", f"tuned on {branch}")
    assert "CONFLICT" in git(root, "merge", "other")
    assert module.read_text().startswith("<<<<<<< ")
    checked = doit(root, "check")
    assert checked.returncode == 1 and "git's HEAD holds it as aot_tune wrote it; fix: run `doit tune vector_add`" \
        in checked.stdout, checked.stdout + checked.stderr
    proc = tune(root)
    assert "lost its '# Generated by aot_tune' first line" in proc.stderr and "rewriting it from the cache" in proc.stderr
    assert module.read_text() == tuned
    module.write_text("VALUE = 1\n")  # a file of someone's at that path (git's HEAD holds ours, so: not committed)
    git(root, "rm", "-q", "--cached", "generated/vector_add.py")
    git(root, "commit", "-q", "-m", "not ours any more")
    proc = tune(root, check=False)
    assert proc.returncode != 0 and "was not written by aot_tune" in proc.stdout + proc.stderr
    assert module.read_text() == "VALUE = 1\n"


def test_temp_files_of_a_killed_write_are_cleaned_up(tmp_path):
    import os

    from aot_tune.fileio import remove_stale_temps, write_atomic

    target = tmp_path / "index.json"
    stale, fresh = tmp_path / ".index.json.abc123.tmp", tmp_path / ".index.json.def456.tmp"
    stale.write_text("torn")
    fresh.write_text("another process is writing this one")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    write_atomic(target, "{}")
    assert remove_stale_temps(target) == 1
    assert not stale.exists() and fresh.exists() and target.read_text() == "{}"


_HOLD_WORKERS = """
import json, sys, time
from pathlib import Path
from aot_tune.bench.runner import INTERPRETER_DEVICE
from aot_tune import forking
from aot_tune.workers.pools import Executors, worker_state

executors = Executors(INTERPRETER_DEVICE, Path(sys.argv[1]), compile_jobs=2)
states = [f.result(timeout=300) for f in [executors._pool().submit(worker_state, 1.0) for _ in range(2)]]
pool = executors.devices
with pool.lease() as lease:
    lease.ready()
    device = pool.worker(lease.index).process.pid
print(json.dumps({"compile": [s["pid"] for s in states], "device": device}), flush=True)
time.sleep(120)
"""


def test_workers_exit_when_the_tuning_process_is_killed(tmp_path):
    """SIGKILL to the tuning process alone (not its group): its compile and device workers go too."""
    import os
    import signal
    import subprocess
    import sys

    from tunerun import subprocess_env

    proc = subprocess.Popen([sys.executable, "-c", _HOLD_WORKERS, str(tmp_path / "cache")], stdout=subprocess.PIPE,
                            env=subprocess_env(), text=True, start_new_session=True)
    try:
        pids = json.loads(proc.stdout.readline())
        workers = [*pids["compile"], pids["device"]]
        assert all(_alive(pid) for pid in workers)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        deadline = time.time() + 15
        while time.time() < deadline and any(_alive(pid) for pid in workers):
            time.sleep(0.2)
        assert not [pid for pid in workers if _alive(pid)], "workers outlived the tuning process"
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None


def _alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_launch_that_kills_its_process_costs_only_its_config(tmp_path):
    """os._exit in the launch function for one config, even on meta tensors: that config is recorded
    as crashed, the others are measured, and the run succeeds."""
    root = make_project(tmp_path, VECTOR_ADD)
    path = root / "kernels" / "vector_add.py"
    source = path.read_text()
    old = "def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:\n"
    assert old in source
    source = source.replace(old, "def add(x: torch.Tensor, y: torch.Tensor, config=None) -> torch.Tensor:\n"
                                 "    if config and config.get(\"BLOCK_SIZE\") == 1024:\n"
                                 "        import os\n        os._exit(3)\n", 1)
    path.write_text(source)
    proc = tune(root)
    assert "Traceback" not in proc.stderr
    from aot_tune.cache import read_cache

    (record,) = read_cache(root / "generated" / "vector_add.tuning.pb").records
    statuses = {dict((p.name, p.int_value) for p in m.config.params)["BLOCK_SIZE"]: (m.status, m.reason)
                for m in record.measurements}
    assert statuses[256][0] == "ok"
    assert statuses[1024][0] == "invalid" and "crashed" in statuses[1024][1]


def test_the_bench_timeout_is_a_setting_outside_every_fingerprint(tmp_path):
    from aot_tune.fingerprint import MeasuredOn, bench_fingerprint, measured_code
    from aot_tune.sources import SourceIndex
    from aot_tune.pipeline.streaming import bench_timeout
    from aot_tune.tuning_schema import TuningRecord

    plain = load_manifest(make_project(tmp_path / "a", VECTOR_ADD) / "tuning.yaml").kernel("vector_add")
    timed = load_manifest(make_project(tmp_path / "b", VECTOR_ADD.replace("bench: {warmup_ms: 1, rep_ms: 1}",
                                       "bench: {warmup_ms: 1, rep_ms: 1, timeout_s: 30}")) / "tuning.yaml"
                          ).kernel("vector_add")
    on = MeasuredOn("h100-sxm", "NVIDIA H100 80GB HBM3", "9.0", "cuda", "3.6.0", "2.11.0")
    fingerprints = [bench_fingerprint(spec, measured_code(SourceIndex(tmp_path / name), spec), (4096,), "float32", on)
                    for spec, name in ((plain, "a"), (timed, "b"))]
    assert fingerprints[0] == fingerprints[1]
    assert bench_timeout(timed.bench, "cuda") == 30
    assert bench_timeout(plain.bench, "cuda") == 120 and bench_timeout(plain.bench, "interpreter") == 600
    slow = TuningRecord()
    slow.measurements.add(seconds=40.0)
    assert bench_timeout(plain.bench, "cuda", slow) == 400  # ten times the slowest measurement so far
