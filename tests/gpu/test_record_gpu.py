"""On a CUDA GPU: a workload over a pip-installed library (tests/fixtures/reclib) recorded with
its launches on the GPU (never benchmarking), tuned by `doit tune` on the GPU, and run again with
`aot_tune.use_tables`: zero autotuner benchmarks and the library's own outputs, where the library
autotuning at run time ran every config of every key."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from tunerun import REPO, doit_command, pip_installed, subprocess_env

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
FIXTURE = REPO / "tests" / "fixtures" / "reclib"


def run(cwd, *args, env):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_a_recorded_workload_runs_on_the_gpu_with_zero_autotuning(tmp_path):
    site = pip_installed(tmp_path, "reclib", {"ops.py": (FIXTURE / "ops.py").read_text()})
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(FIXTURE / "workload.py", project)
    env = subprocess_env(site)

    own = json.loads(run(project, sys.executable, "workload.py", env=env).stdout.splitlines()[-1])
    assert own["benchmarks"] == 18  # the library autotunes every config of every key at run time
    recorded = run(project, *doit_command("record", "--", sys.executable, "workload.py"), env=env)
    assert json.loads(recorded.stdout.splitlines()[0])["benchmarks"] == 0, recorded.stdout
    assert "targets: [sm" in (project / "tuning.yaml").read_text()  # the GPU it ran on
    tuned = run(project, *doit_command("tune"), env=env)
    assert "bench: 18 config measurements, 18 ok" in tuned.stdout + tuned.stderr, tuned.stderr

    tabled = json.loads(run(project, sys.executable, "workload.py", env={**env, "WORKLOAD_TABLES": "generated"})
                        .stdout.splitlines()[-1])
    assert tabled["benchmarks"] == 0
    for mine, theirs in zip(tabled["outputs"], own["outputs"]):
        assert mine[0] == theirs[0] and mine[1] == theirs[1]
        assert all(abs(a - b) < 1e-4 for a, b in zip(mine[2], theirs[2]))
