"""``doit tune --dry-run`` in a fresh project: the plan and the predicted time, with nothing
written, no torch import and no worker process; then the real run records the same prediction
beside its wall time and prints it."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tunerun import doit, make_project, subprocess_env, tune, vector_add_manifest

MANIFEST = vector_add_manifest("""\
    space: {BLOCK_SIZE: [128, 256], num_warps: [4]}
    shapes: [{n: 4096}]
    interpreter_shapes: [{n: 300}, {n: 500}]
    dtypes: [float32]
""")
PARTS = ("start-up", "compile", "bench", "rest")

#: aot_tune's own command line in-process, then what the process imported and started.
IN_PROCESS = """\
import multiprocessing, sys
from aot_tune.commands.cli import main
code = main(sys.argv[1:])
print("imported:", sorted({"torch", "triton"} & set(sys.modules)), "children:", len(multiprocessing.active_children()))
raise SystemExit(code)
"""


def tree_digest(root: Path) -> dict[str, str]:
    """Every file and folder under ``root`` with a digest of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
            for p in sorted(root.rglob("*"))}


def dry_run(project: Path, *args: str) -> subprocess.CompletedProcess:
    return doit(project, "tune", "--dry-run", "--bench-backend", "interpreter", "-n", "2", *args)


def predicted_seconds(stdout: str) -> float:
    last = stdout.splitlines()[-1]
    match = re.match(r"predicted (\d+\.\d) s", last)
    assert match, last
    return float(match.group(1))


def launch_seconds(stdout: str) -> float:
    """The command's own start, as the dry run measured it in itself (its rest line)."""
    match = re.search(r"^rest +\d+\.\d s  the command's start \((\d+\.\d) s, as this one's\)", stdout, re.M)
    assert match, stdout
    return float(match.group(1))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("dry-run"), MANIFEST)


def test_the_dry_run_prints_the_plan_and_changes_nothing(project):
    before = tree_digest(project)
    proc = dry_run(project)
    assert proc.returncode == 0, proc.stderr
    assert tree_digest(project) == before and not (project / ".aot_tune").exists()
    lines = proc.stdout.splitlines()
    # 2 configs x 1 target; n=300 and n=500 specialize alike, so one compile per config
    assert "  compile  2 of about 2 stale (sm90); 2 guessed: launches not captured yet" in lines
    assert "  capture  4 launches' specializations (estimated here)" in lines
    assert "  bench    2 of 2 tasks on interpreter, 4 measurements (2 configs x 2 shapes)" in lines
    parts = {m.group(1): float(m.group(2)) for m in (re.match(r"(\S+) +(\d+\.\d) s  ", line) for line in lines) if m}
    assert list(parts) == list(PARTS) and all(parts[p] > 0 for p in PARTS), lines
    assert predicted_seconds(proc.stdout) == pytest.approx(sum(parts.values()), abs=0.25)
    assert "uncalibrated" in lines[-1]


def test_aot_tune_dry_runs_without_torch_or_workers(project):
    proc = subprocess.run([sys.executable, "-c", IN_PROCESS, "tune", "--dry-run", "--bench-backend", "interpreter"],
                          cwd=project, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "imported: [] children: 0"
    assert re.match(r"predicted \d+\.\d s", proc.stdout.splitlines()[-2])
    assert not (project / ".aot_tune").exists()


def test_a_dry_run_of_a_bad_manifest_or_kernel_is_one_line(project, tmp_path):
    (tmp_path / "bad.yaml").write_text("version: 1\nkernels:\n  gemm: 3\n")
    for args in (("--manifest", str(tmp_path / "bad.yaml")), ("nosuchkernel",)):
        proc = dry_run(project, *args)
        assert proc.returncode != 0 and proc.stdout == "", proc.stdout
        (line,) = proc.stderr.splitlines()
        assert line.startswith("ERROR: ") and ("bad.yaml" in line or "nosuchkernel" in line), line
    assert not (project / ".aot_tune").exists() and not (tmp_path / ".aot_tune").exists()


@pytest.fixture(scope="module")
def real_run(project: Path, tmp_path_factory) -> tuple[str, subprocess.CompletedProcess, Path]:
    """The project's dry run, then its real run, which writes the machine's history to a file of
    its own (the history is off for every other run of the session): what the dry run printed,
    the run, the history's file."""
    printed = dry_run(project).stdout
    history = tmp_path_factory.mktemp("machine") / "history.json"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AOT_TUNE_HISTORY", str(history))
        proc = tune(project, "-n", "2")
    return printed, proc, history


def test_the_real_run_records_the_prediction_the_dry_run_printed(project, real_run):
    """The same prediction, but for the command's own start, which each measures in itself."""
    printed, proc, _ = real_run
    predicted, launched = predicted_seconds(printed), launch_seconds(printed)
    (run,) = json.loads((project / ".aot_tune" / "runs.json").read_text())
    assert run["predicted_s"] - run["launch_s"] == pytest.approx(predicted - launched, abs=0.11)  # each printed to 0.1
    # the total and each of the four parts are kept to 3 decimals: their sum may be 0.002 apart
    assert set(run["predicted"]) == set(PARTS)
    assert run["predicted_s"] == pytest.approx(sum(run["predicted"].values()), abs=0.0025)
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("end to end: ")]
    assert f"; predicted {run['predicted_s']:.1f} s (start-up " in line

    idle = dry_run(project)  # nothing stale now
    assert idle.returncode == 0 and idle.stdout.splitlines()[-2:] == [
        "nothing to do: every compile and bench is up to date", "predicted 0.0 s"]
    manifest = project / "tuning.yaml"
    manifest.write_text(manifest.read_text().replace("{n: 500}]", "{n: 500}, {n: 704}]"))
    grown = dry_run(project)  # a new specialization class: its compiles, its bench, from the run's calibration
    assert "  bench    1 of 3 tasks on interpreter, 2 measurements (2 configs x 1 shape)" in grown.stdout
    assert "  compile  2 of about 4 stale (sm90); 2 guessed: launches not captured yet" in grown.stdout
    assert grown.stdout.splitlines()[-1].endswith("(calibrated from 1 earlier run on interpreter in .aot_tune/runs.json)")


def test_a_real_run_joins_the_machines_history_which_forecasts_a_fresh_project(real_run, tmp_path, monkeypatch):
    from aot_tune.runs.history import read_history

    _, _, history = real_run
    monkeypatch.setenv("AOT_TUNE_HISTORY", str(history))
    (entry,) = read_history(history)
    assert (entry.key.backend, entry.key.device, entry.key.jobs) == ("interpreter", "interpreter", 2)
    assert entry.observed["startup_s"] > 0 and entry.observed["compile_s"] > 0 and entry.predicted["wall_s"] > 0
    fresh = make_project(tmp_path / "fresh", MANIFEST)  # no .aot_tune/: only the machine's history tells
    assert dry_run(fresh).stdout.splitlines()[-1].endswith(
        "(calibrated from 1 run in the machine's history (this machine, device, toolchain and -n))")
    monkeypatch.setenv("AOT_TUNE_HISTORY", "off")
    assert "uncalibrated" in dry_run(fresh).stdout.splitlines()[-1]
