"""Running ``doit`` in a scratch project from the study tools, as a user's shell would, but with
this repository first on PYTHONPATH (its kernels and aot_tune need not be installed)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_doit(project: Path, argv: list[str], timeout_s: float | None = None
             ) -> tuple[float, subprocess.CompletedProcess, bool]:
    """``doit ARGV`` in the project, this repository first on PYTHONPATH and no interpreter switch:
    (wall seconds, the process, finished). Past ``timeout_s`` the run and its workers are killed;
    the process keeps what it printed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("TRITON_INTERPRET", None)
    command = [sys.executable, "-m", "doit", *argv]
    began = time.perf_counter()
    child = subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    finished = True
    try:
        stdout, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        stdout, stderr = child.communicate()
        finished = False
    return time.perf_counter() - began, subprocess.CompletedProcess(command, child.returncode, stdout, stderr), finished
