"""On a CUDA GPU: a ranked retune screens (aot_tune.search.ranked.SCREEN_SHARE of rep_ms), and its
fastest screened configs are timed again in full in the finals, which hold the pick. Run with
`python -m pytest -m gpu` on a GPU machine."""
from __future__ import annotations

import pytest
from test_gpu import MANIFEST
from tunerun import make_project, tune

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_a_ranked_retune_screens_and_its_finals_time_the_fastest_in_full(tmp_path):
    from aot_tune.cache import read_record
    from aot_tune.search.ranked import SCREEN_SHARE
    from aot_tune.select import FINALS_MAX

    project = make_project(tmp_path, MANIFEST)
    tune(project, "gemm", backend="cuda")  # exhaustive: the ranked search's source
    manifest = project / "tuning.yaml"
    manifest.write_text(manifest.read_text().replace("  bench: {warmup_ms: 2, rep_ms: 5}\n",
                                                     "  bench: {warmup_ms: 2, rep_ms: 5}\n  search: {strategy: ranked}\n"))
    proc = tune(project, "gemm", backend="cuda")
    assert "ranked from" in proc.stderr, proc.stderr
    records = [read_record(path) for path in (project / ".aot_tune" / "bench").rglob("gemm/*.pb")]
    assert len(records) == 2
    for record in records:
        assert record.search.strategy == "ranked" and record.search.sources
        passing = [m for m in record.measurements if m.status == "ok"]
        final = [m for m in passing if m.finalist]
        screened = [m for m in passing if not m.finalist]
        assert all(m.short_rep_ms == pytest.approx(5 * SCREEN_SHARE) for m in screened), screened
        assert all(not m.short_rep_ms and m.runs > 0 for m in final)
        if final:  # two or more within the band: the pick is among the finals, timed in full
            assert 2 <= len(final) <= FINALS_MAX and record.best.id in {m.config.id for m in final}
        else:  # one clear winner: no finals, the pick is the fastest screening timing
            assert record.best.id == min(passing, key=lambda m: m.median_ms).config.id
