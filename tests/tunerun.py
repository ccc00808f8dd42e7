"""Running `doit tune` in a scratch project the way a user does: a subprocess per run."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def make_project(root: Path, manifest: str) -> Path:
    """A project folder holding a copy of this repo's kernels and the given manifest."""
    shutil.copytree(REPO / "kernels", root / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "tuning.yaml").write_text(manifest)
    return root


def tune(project: Path, *args: str, backend: str = "interpreter", check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run(
        [sys.executable, "-m", "doit", "tune", "--bench-backend", backend, *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=600,
    )
    if check and proc.returncode != 0:
        pytest.fail(f"doit tune failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def executed(proc: subprocess.CompletedProcess) -> list[str]:
    """Task names doit ran (it prints '.  name' for a run task and '-- name' for an up-to-date one)."""
    return [line[3:] for line in proc.stdout.splitlines() if line.startswith(".  ")]
