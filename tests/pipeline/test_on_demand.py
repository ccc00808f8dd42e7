"""An adaptive budgeted search through `doit tune` on the CPU compiles on demand: only the configs
it reaches, a config that fails to compile is a free invalid measurement, and a second run does
nothing. BLOCK_SIZE 384 and 768 are not powers of two: they fail at compile (tl.arange)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import tunerun
from tunerun import doit, executed, make_project, vector_add_manifest

from aot_tune.build.compile import CompileRecord
from aot_tune.cache import read_record

MANIFEST = vector_add_manifest("""\
    space:
      BLOCK_SIZE: [128, 256, 384, 512, 768, 1024]
      num_warps: [1, 2, 4]
    shapes:
      - {n: 1000}
      - {n: 3000}
    search: {strategy: surrogate, budget: {configs: 4}, seed: 1}  # its design reaches a 384 or 768
""")
CANDIDATES = 18


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("on-demand-project"), MANIFEST)


@pytest.fixture(scope="module")
def first_run(project: Path) -> subprocess.CompletedProcess:
    return tunerun.tune(project, "-n", "2")


def records(project: Path) -> list:
    return [read_record(p) for p in sorted((project / ".aot_tune" / "bench" / "interpreter" / "vector_add").glob("*.pb"))]


def compiled(project: Path) -> dict[str, CompileRecord]:
    """The compile records under .aot_tune/ (n=1000 and n=3000 specialize alike: one per config)."""
    return {p.stem: CompileRecord.read(p) for p in (project / ".aot_tune" / "compile" / "vector_add").rglob("*.json")}


def test_only_the_configs_the_searches_reached_are_compiled(project, first_run):
    assert not [n for n in executed(first_run) if n.startswith("compile:")]  # the compile stage built nothing
    reached = {m.config.id for r in records(project) for m in r.measurements}
    outputs = compiled(project)
    assert set(outputs) == reached and len(reached) < CANDIDATES
    found = re.search(r"^compile on demand: (\d+) compiled as the budgeted searches reached their configs; "
                      r"(\d+) of the (\d+) compiles of their candidates never needed$", first_run.stderr, re.M)
    assert found, first_run.stderr[-3000:]
    assert [int(g) for g in found.groups()] == [len(outputs), CANDIDATES - len(outputs), CANDIDATES]
    assert f"compile: {len(outputs)} compiled" in first_run.stderr


def test_a_reached_config_that_fails_to_compile_is_invalid_and_free(project, first_run):
    outputs = compiled(project)
    for record in records(project):
        invalid = [m for m in record.measurements if m.status == "invalid"]
        valid = [m for m in record.measurements if m.status != "invalid"]
        assert record.search.configs_measured == 4 == len(valid)  # the budget is of configs that compiled
        assert all(m.reason.startswith("compile_error") for m in invalid)
        assert all(not outputs[m.config.id].result.valid for m in invalid)
        assert {m.config.id for m in valid} <= {cid for cid, r in outputs.items() if r.result.valid}
        assert record.best.id in {m.config.id for m in valid}
    # the surrogate's design spreads over BLOCK_SIZE: it reaches failing configs and carries on past them
    assert any(m.status == "invalid" for r in records(project) for m in r.measurements)


def test_a_second_run_does_nothing(project, first_run):
    assert executed(tunerun.tune(project, "-n", "2")) == []
    assert doit(project, "check").returncode == 0


def test_the_dry_run_predicts_the_compiles_on_demand(tmp_path):
    project = make_project(tmp_path, MANIFEST)
    proc = doit(project, "tune", "--bench-backend", "interpreter", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # 2 shapes x 4 configs expected, of 18 candidates, as if drawn at random: 18 (1 - (14/18)^2)
    # distinct ones, about 7; none up front
    assert "  compile  0 of about 18 stale (sm90); 18 guessed: launches not captured yet" in lines
    assert f"  compile  about 7 more on demand, as the budgeted searches reach their configs " \
           f"(of {CANDIDATES} candidate compiles not made yet)" in lines
    assert lines[-1].startswith("predicted ")
