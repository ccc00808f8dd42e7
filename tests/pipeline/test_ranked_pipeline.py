"""The ranked strategy through `doit tune` on the CPU (cross-compiles and the interpreter): an
exhaustive tune, then "an upgrade" (the cache's records rewritten as if measured under an older
Triton) retuned with `search: {strategy: ranked}` from those records; a new shape without a
source is measured exhaustively."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import tunerun
from tunerun import doit, executed, make_project, vector_add_manifest

from aot_tune.cache import read_cache, read_record, record_full_shape, write_cache

# Time under the interpreter grows with the programs a launch runs, so BLOCK_SIZE ranks the
# configs; the constraints keep one block spanning the whole vector and then only blocks of a
# quarter of it or less. The leaders still swap places: over 30 launches on a 2-core CPU, one
# block of 32768 took 3.5-73.5 ms (median 5.5), 8 blocks of 4096 8.5-15.6 ms, and 16 of 2048
# 14.9-27.0 ms, so a median of the 3 runs the interpreter times read 28 ms for the first on a
# busy host. The retune's pick is judged by the exhaustive run's times, within PICK_TOLERANCE of
# its best: one of the leaders, not a config of 32 blocks or more (2.4x the best and slower).
MANIFEST = vector_add_manifest("""\
    space:
      BLOCK_SIZE: [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    constraints:
      - "BLOCK_SIZE <= next_pow2(n)"
      - "BLOCK_SIZE == next_pow2(n) or 4 * BLOCK_SIZE <= n"
    shapes:
      - grid: {n: [16002, 32000]}
    bench: {rep_ms: 20}
""")
RANKED = MANIFEST + "    search: {strategy: ranked}\n"
OLD_TRITON = "3.0.0"
CONFIGS = {1000: 5, 16002: 9, 32000: 10}  # the constraints' candidates per shape
PICK_TOLERANCE = 2.0


def tune(project: Path) -> subprocess.CompletedProcess:
    return tunerun.tune(project, "-n", "2")


def cache_path(project: Path) -> Path:
    return project / "generated" / "vector_add.tuning.pb"


def records(project: Path) -> dict[int, object]:
    folder = project / ".aot_tune" / "bench" / "interpreter" / "vector_add"
    return {int(p.stem.split("-")[1]): read_record(p) for p in folder.glob("*.pb")}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """Tuned exhaustively, then its records made stale as an upgrade of Triton would: measured
    under an older version, with a fingerprint the manifest no longer computes."""
    root = make_project(tmp_path_factory.mktemp("ranked-project"), MANIFEST)
    tune(root)
    cache = read_cache(cache_path(root))
    for record in cache.records:
        record.toolchain.triton = OLD_TRITON
        record.fingerprint = "before-the-upgrade-" + record.fingerprint[:16]
    write_cache(cache, cache_path(root))
    return root


@pytest.fixture(scope="module")
def exhaustive_times(project: Path) -> dict[int, dict[str, float]]:
    """Per shape, the exhaustive run's median of each config, read before the retune replaces them."""
    return {record_full_shape(r)[0]: {m.config.id: m.median_ms for m in r.measurements if m.status == "ok"}
            for r in read_cache(cache_path(project)).records}


@pytest.fixture(scope="module")
def exhaustive_picks(project: Path) -> dict[int, str]:
    return {record_full_shape(r)[0]: r.best.id for r in read_cache(cache_path(project)).records}


@pytest.fixture(scope="module")
def ranked_run(project: Path, exhaustive_picks, exhaustive_times) -> subprocess.CompletedProcess:
    (project / "tuning.yaml").write_text(RANKED)
    return tune(project)


def test_the_retune_ranks_from_the_stale_records_and_measures_fewer_configs(project, exhaustive_picks, exhaustive_times,
                                                                             ranked_run):
    origin = f"ranked from interpreter (triton {OLD_TRITON})"
    summary = re.search(rf"^search: {re.escape(origin)}: 2 shapes, (\d+) of 19 candidate configs measured",
                        ranked_run.stderr, re.M)
    assert summary, ranked_run.stderr
    assert int(summary.group(1)) < 19
    for n in (16002, 32000):
        assert re.search(rf"float16 \({n},\) best \w+ \({re.escape(origin)}: \d+ of {CONFIGS[n]} configs",
                         ranked_run.stderr), n
    for n, record in records(project).items():
        assert record.search.strategy == "ranked" and record.search.configs_measured < CONFIGS[n]
        assert record.search.candidate_count == CONFIGS[n] and not any(m.short_rep_ms for m in record.measurements)
        same_shape = [s for s in record.search.sources if list(s.shape) == [n]]
        assert [(s.device, s.triton) for s in same_shape] == [("interpreter", OLD_TRITON)]
        assert same_shape[0].config_ids[0] == exhaustive_picks[n]  # its best was measured first
        times = exhaustive_times[n]  # the sources rank correctly: the same pick, or its tie
        assert times[record.best.id] <= PICK_TOLERANCE * min(times.values()), (n, record.best.id, times)


def test_after_the_retune_nothing_is_stale_and_a_new_shape_has_no_source(project, ranked_run):
    assert executed(tune(project)) == []
    assert doit(project, "check").returncode == 0
    (project / "tuning.yaml").write_text(RANKED.replace("n: [16002, 32000]", "n: [1000, 16002, 32000]"))
    grown = tune(project)
    assert [t for t in executed(grown) if t.startswith("bench:")] == ["bench:vector_add:interpreter:float16:1000"]
    assert "search: ranked without a source, as exhaustive: 1 shapes, 5 of 5 candidate configs measured" in grown.stderr
    record = records(project)[1000]
    assert record.search.strategy == "ranked" and record.search.configs_measured == CONFIGS[1000]
    assert not record.search.sources
