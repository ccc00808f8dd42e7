"""tools.studies.whole_benchmark on the CPU: the oracle in two slices (the second reusing the
first's compiles), folded with `doit merge-caches`, a budgeted run after its dry run, judged
against the oracle, and the report's replays, all under the Triton interpreter on tiny shapes."""
from __future__ import annotations

import json
import subprocess
import sys

from tunerun import REPO, subprocess_env

from aot_tune import cache as cache_io

TOOL = [sys.executable, "-m", "tools.studies.whole_benchmark"]
SIZES = ["--sizes", "16", "32", "--backend", "interpreter"]


def run(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([*TOOL, *args], cwd=REPO, env=subprocess_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_slices_merge_and_a_budgeted_run_is_judged_against_them(tmp_path):
    out = tmp_path / "out"
    first = run("oracle", "--m", "16", "--project", str(tmp_path / "a"), "--out", str(out), *SIZES)
    assert "4 of 4 shapes" in first.stdout and "finished" in first.stdout
    second = run("oracle", "--m", "32", "--project", str(tmp_path / "b"), "--compiles-from", str(tmp_path / "a"),
                 "--out", str(out), *SIZES)
    assert "compile:" not in second.stdout  # the first slice's compiles were reused
    slices = [out / "oracle-m16.tuning.pb", out / "oracle-m32.tuning.pb"]
    samples = [m.times_ms for p in slices for r in cache_io.read_cache(p).records for m in r.measurements]
    assert samples and all(samples)  # the slices keep every sample: what the replays need

    merged = run("merge", "--out", str(out), *map(str, slices))
    assert "8 records added" in merged.stdout
    reference = cache_io.read_cache(out / "oracle.tuning.pb").records
    assert len(reference) == 8 and not any(m.times_ms for r in reference for m in r.measurements)

    budgeted = run("budgeted", "--search", "{strategy: surrogate, budget: {configs: 2}}", "--label", "s2",
                   "--project", str(tmp_path / "run"), "--out", str(out), "--oracle", str(out / "oracle.tuning.pb.xz"),
                   *SIZES)
    assert "predicted" in budgeted.stdout and "geomean pick / oracle pick" in budgeted.stdout
    result = json.loads((out / "budgeted-s2.json").read_text())
    assert result["predicted_s"] > 0 and result["wall_s"] > 0 and result["search"]["strategy"] == "surrogate"

    judged = run("judge", "--oracle", *map(str, slices), "--run", str(out / "budgeted-s2.json")).stdout
    assert "same pick on" in judged and "of 8" not in judged and "/8" in judged
    # each differing pick timed again side by side with the oracle's (the interpreter here)
    retimed = run("judge", "--oracle", *map(str, slices), "--run", str(out / "budgeted-s2.json"),
                  "--retime", str(tmp_path / "run"), "--backend", "interpreter").stdout
    assert "re-timed side by side (" in retimed and "pairs): geomean" in retimed, retimed

    report = run("report", "--oracle", *map(str, slices), "--real", str(out / "budgeted-s2.json"),
                 "--budgets", "1", "2", "--seeds", "2", "--jobs", "1", "--out", str(out / "report"))
    table = (out / "report" / "whole_benchmark.md").read_text()
    assert "| random | 1 |" in table and "| surrogate | 2 |" in table and "- real: s2:" in table
    assert "whole_benchmark.png" in report.stdout or "matplotlib is not installed" in report.stdout


def test_a_budgeted_run_past_its_deadline_is_stopped_with_its_workers(tmp_path):
    proc = subprocess.run([*TOOL, "budgeted", "--search", "{strategy: surrogate, budget: {configs: 2}}",
                           "--project", str(tmp_path / "run"), "--out", str(tmp_path / "out"), "--deadline-s", "2",
                           *SIZES], cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "past --deadline-s" in proc.stdout, proc.stdout + proc.stderr
    assert "stopped at the 2 s deadline" in (tmp_path / "out" / next(
        p.name for p in (tmp_path / "out").glob("budgeted-*.log"))).read_text()
