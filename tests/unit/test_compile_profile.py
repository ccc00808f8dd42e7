"""tools.bench.compile_profile's summary: where the seconds go, what the early rejection skips and
what a compile deadline would drop, from per-config rows."""
from __future__ import annotations

from aot_tune.build.deadline import CompileDeadline
from tools.bench.compile_profile import early_verdict, summarize

LIMIT = 232448


def row(bm: int, seconds: float, shared: int, bound: int, stages: dict) -> dict:
    return {"config": {"BLOCK_M": bm, "BLOCK_N": 64, "BLOCK_K": 32, "num_stages": 3, "num_warps": 4},
            "seconds": seconds, "status": "ok" if shared <= LIMIT else "shared_memory", "shared_bytes": shared,
            "ttgir_shared_bound": bound, "stage_seconds": stages, "registers": 100, "spills": 0}


def test_the_summary_splits_stages_and_names_what_early_rejection_and_the_deadline_cut():
    fast = {"ttir": 0.01, "ttgir": 0.09, "llir": 0.6, "ptx": 0.1, "cubin": 0.2}
    rows = [row(32, 1.0, 40000, 40000, fast) for _ in range(8)]
    rows.append(row(256, 30.0, 300000, 300000, {"ttir": 0.01, "ttgir": 0.1, "llir": 25.0, "ptx": 2.0, "cubin": 2.89}))
    rows.append(row(128, 40.0, 100000, 100000, {"ttir": 0.01, "ttgir": 0.1, "llir": 35.0, "ptx": 2.0, "cubin": 2.89}))
    assert [early_verdict(r, LIMIT) for r in rows[-2:]] == ["ttgir", ""]
    lines = summarize(rows, LIMIT, CompileDeadline(factor=10, min_s=20, peers=8))
    assert lines[0].startswith("10 configs, 78.0 s of worker time: ") and "llir 64.8 s (83%)" in lines[0]
    assert "stopped early: 1 after ttgir, 0 after llir; 29.9 s of lowering skipped" in lines[1]
    assert "above the full compile's shared memory: 0 configs" in lines[2]
    assert lines[-1].startswith("deadline (10x the median valid compile") and "would drop 2 configs, 1 of them valid" in lines[-1]
