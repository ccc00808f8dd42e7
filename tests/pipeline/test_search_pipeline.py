"""A budgeted search strategy through `doit tune` on the CPU (cross-compiles and the interpreter):
anchors first, records that say how they were made, no-ops, space changes and `doit check`."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import tunerun
from tunerun import doit, executed, make_project, vector_add_manifest

from aot_tune.search import strategies as search
from aot_tune.cache import read_cache, read_record

MANIFEST = vector_add_manifest("""\
    space:
      BLOCK_SIZE: [128, 256, 512, 1024]
      num_warps: [1, 2, 4]
    shapes:
      - grid: {n: [1000, 2002, 4004, 8008, 16002]}
    search: {strategy: surrogate, budget: {configs: 4}}
""")
ANCHORS = {"4004", "1000"}  # the medoid, then the farthest (ties: the smaller)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("search-project"), MANIFEST)


@pytest.fixture(scope="module")
def first_run(project: Path) -> subprocess.CompletedProcess:
    return tune(project)


def tune(project: Path, *args: str) -> subprocess.CompletedProcess:
    return tunerun.tune(project, "-n", "2", *args)


def records(project: Path) -> dict[str, object]:
    folder = project / ".aot_tune" / "bench" / "interpreter" / "vector_add"
    return {p.stem.split("-")[1]: read_record(p) for p in folder.glob("*.pb")}


def test_anchor_shapes_are_searched_first_and_seed_the_others(project, first_run):
    benches = [n.rsplit(":", 1)[1] for n in executed(first_run) if n.startswith("bench:")]
    assert set(benches[:2]) == ANCHORS and len(benches) == 5
    assert "search: surrogate, 4 configs per shape: 5 shapes, 20 of 60 candidate configs measured" in first_run.stderr
    for n, record in records(project).items():
        assert record.search.strategy == "surrogate" and record.search.budget_configs == 4
        assert record.search.configs_measured == 4 and record.search.candidate_count == 12
        assert sum(m.status == "ok" for m in record.measurements) == 4 and record.search.seconds > 0
        full = [m for m in record.measurements if m.status == "ok" and not m.short_rep_ms]
        assert len(full) == search.FINALISTS and record.best.id in {m.config.id for m in full}
        seeds = {str(s.shape[0]) for s in record.search.sources}
        assert seeds == (set() if n in ANCHORS else ANCHORS)
        if n not in ANCHORS:  # the nearest anchor's pick was tried first
            nearest = min(ANCHORS, key=lambda a: (abs(int(a).bit_length() - int(n).bit_length()), int(a)))
            assert records(project)[nearest].best.id in {c for s in record.search.sources for c in s.config_ids}


def test_a_second_run_does_nothing_and_the_tables_are_in_sync(project, first_run):
    assert executed(tune(project)) == []
    check = doit(project, "check")
    assert check.returncode == 0, check.stdout
    cache = read_cache(project / "generated" / "vector_add.tuning.pb")
    assert all(r.HasField("search") and not any(m.times_ms for m in r.measurements) for r in cache.records)


def test_a_space_change_reruns_the_searches_and_measures_only_new_probes(project, first_run):
    manifest = project / "tuning.yaml"
    original = manifest.read_text()
    manifest.write_text(original.replace("BLOCK_SIZE: [128, 256, 512, 1024]", "BLOCK_SIZE: [128, 256, 512, 1024, 2048]"))
    try:
        stale = doit(project, "check")
        assert stale.returncode == 1 and "(config space changed)" in stale.stdout
        rerun = tune(project)
        assert sum(n.startswith("bench:") for n in executed(rerun)) == 5
        found = re.search(r"^bench: (\d+) config measurements", rerun.stderr, re.M)
        measured = int(found.group(1)) if found else 0
        reused = sum(r.search.reused for r in records(project).values())
        probes = 5 * (4 + search.FINALISTS)  # 4 screened per shape, the finalists timed again in full
        assert measured + reused == probes and reused > 0  # probes the earlier records answered cost nothing
        assert doit(project, "check").returncode == 0
        manifest.write_text(original.replace("configs: 4", "configs: 5"))
        settings = doit(project, "check")
        assert settings.returncode == 1 and "search settings changed (record: surrogate budget={\"configs\":4}" \
            in settings.stdout
    finally:
        manifest.write_text(original)
