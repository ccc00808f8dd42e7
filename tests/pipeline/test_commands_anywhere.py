"""The commands in a project of someone else's: a folder with a tuning.yaml and no pyproject.toml,
run as ``python -m aot_tune`` (aot_tune on PYTHONPATH, nothing registered) and as ``doit``."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from tunerun import doit, make_project, subprocess_env, tune, vector_add_manifest

from aot_tune.bench.local.detect import detect

MANIFEST = vector_add_manifest("""\
    space: {BLOCK_SIZE: [256], num_warps: [4]}
    shapes: [{n: 4096}]
    interpreter_shapes: [{n: 300}, {n: 500}]
    dtypes: [float32]
""")
BANNER = "tuning under the Triton interpreter"

#: ``python -m aot_tune`` as on a machine where aot_tune is not installed: doit finds no
#: entry points, so the commands and the loader come from aot_tune.commands.cli alone.
NOT_INSTALLED = ("import runpy, doit.plugin; doit.plugin.entry_points_impl = lambda: lambda group: (); "
                 "runpy.run_module('aot_tune', run_name='__main__', alter_sys=True)")


def aot_tune(project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NOT_INSTALLED, *args], cwd=project, env=subprocess_env(),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = make_project(tmp_path_factory.mktemp("elsewhere"), MANIFEST)
    assert not (root / "pyproject.toml").exists()
    return root


def test_list_and_check_work_without_settings_or_install(tmp_path):
    project = make_project(tmp_path, MANIFEST)
    elsewhere = aot_tune(tmp_path / "kernels", "list")  # no manifest here: one line, and no .aot_tune/
    assert elsewhere.returncode == 3 and "tuning.yaml: file not found" in elsewhere.stderr, elsewhere.stderr
    assert not (tmp_path / "kernels" / ".aot_tune").exists()
    listed = aot_tune(project, "list")
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"^bench .*\(interpreter\)$", listed.stdout, re.M), listed.stdout
    assert BANNER not in listed.stderr
    checked = aot_tune(project, "check")  # nothing tuned yet: missing tables, exit 1, one table
    assert checked.returncode == 1 and "missing" in checked.stdout, checked.stdout + checked.stderr
    assert BANNER not in checked.stdout + checked.stderr and "Traceback" not in checked.stderr
    unknown = aot_tune(project, "tnue")
    assert unknown.returncode == 3 and "unknown command 'tnue'" in unknown.stderr


@pytest.mark.parametrize("command", ["tune", "check", "report", "subset", "merge-caches", "drop-device", "list"])
def test_help_works_on_every_command(project, command):
    by_option = aot_tune(project, command, "--help")
    assert by_option.returncode == 0, by_option.stderr
    assert by_option.stdout == aot_tune(project, "help", command).stdout
    assert f"aot_tune {command}" in by_option.stdout
    if command != "list":  # doit's own list keeps doit's own --help (none): `doit help list`
        through_doit = doit(project, command, "--help")
        assert through_doit.returncode == 0 and "PURPOSE" in through_doit.stdout, through_doit.stderr


def test_tune_help_says_what_the_readme_says(project):
    text = " ".join(aot_tune(project, "help", "tune").stdout.split())
    # README: `doit tune -n 16   # 16 compile workers and parallel tasks (default: all CPU cores)`
    assert "-n ARG, --process=ARG compile workers and parallel tasks, and a thread more for each bench task" in text
    assert "the CPU cores]" in text and "subprocesses" not in text
    assert "-P ARG, --parallel-type=ARG thread only" in text and "multiprocessing" not in text
    assert "[default: .aot_tune/doit.sqlite3, next to the manifest]" in text


def test_tune_then_nothing_to_do_then_all_again(project):
    first = tune(project)
    assert "-- " not in first.stdout
    assert set(re.findall(r"^\[bench\] \d+/(\d+) done", first.stderr, re.M)) == {"2"}, first.stderr
    assert {p.name for p in project.iterdir() if p.name.startswith(".doit")} == set()
    assert (project / ".aot_tune" / "doit.sqlite3").is_file()

    auto = detect("auto")
    if auto.backend != "interpreter":
        pytest.skip(f"the run with --bench-backend auto would tune {auto.key}")
    again = aot_tune(project, "tune")  # auto: the interpreter, with its notice only if a bench runs
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "nothing to do: 1 table up to date (1 kernel, 2 entries on interpreter; "
        "python -m aot_tune tune -a runs every task again)"]  # the program typed
    assert BANNER not in again.stderr and "[bench]" not in again.stderr

    outputs = sorted((project / "generated").iterdir())
    before = {p.name: p.stat().st_mtime_ns for p in outputs}
    forced = tune(project, "-a")
    assert ".  bench:" in forced.stdout
    assert {p.name: p.stat().st_mtime_ns for p in outputs} == before, "-a rewrote unchanged tables"
    totals = re.findall(r"^\[(\w+)\] \d+/(\d+) done", forced.stderr, re.M)
    assert ("bench", "2") in totals and all(total == "2" for stage, total in totals if stage == "bench"), totals
    compiles = {total for stage, total in totals if stage == "compile"}
    assert len(compiles) == 1, totals  # known from the start, not growing with each task
    assert {p.name for p in project.iterdir() if p.name.startswith(".doit")} == set()
