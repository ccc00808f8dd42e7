"""The GPU worker a run spawns before its planning (aot_tune.bench.local.early): what happens
to it when no pool takes it. Its life as the pool's first GPU worker is a GPU test
(tests/gpu/test_gpu.py)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tunerun import subprocess_env


def _run(code: str, tmp_path) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True,
                          text=True, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_an_early_worker_no_pool_takes_is_stopped_or_leaves_with_the_run(tmp_path):
    """``stop`` kills one still importing; one whose run ends without taking it sees its pipe
    close and exits on its own, with status 0; either way ``take`` has nothing to hand out after."""
    assert _run("""
        from aot_tune.bench.local import early
        early.start()
        process = early._early[0]
        early.stop()
        print(process.exitcode is not None and not process.is_alive(), early.take() is None)
    """, tmp_path) == "True True"
    assert _run("""
        from aot_tune.bench.local import early
        early.start()
        process, conn = early.take()
        conn.close()  # what the end of the run does to the pipe
        process.join(120)
        print(process.exitcode)
    """, tmp_path) == "0"


def test_only_a_run_that_may_bench_on_a_local_gpu_starts_one(monkeypatch):
    from aot_tune.bench.local import early

    monkeypatch.setattr(early.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    assert early.likely_needed("auto", "local") and early.likely_needed("cuda", "local")
    assert not early.likely_needed("interpreter", "local") and not early.likely_needed("auto", "dask")
    monkeypatch.setattr(early.shutil, "which", lambda name: None)
    assert not early.likely_needed("auto", "local")
