"""A Dask scheduler and bench workers on this machine, as subprocesses: to try ``--executor dask``
on one host, and for the tests and tools.bench.bench_distributed.

    with LocalCluster(folder, gpus=["0", "1"]) as cluster:   # or interpreter=2 on a CPU
        ... doit tune --executor dask --scheduler {cluster.scheduler_file}

Everything listens on loopback only, with no dashboard (anyone reaching a Dask scheduler or
worker can run code in it); given ``tls`` certificates, the cluster speaks TLS only.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from aot_tune.bench.dask.security import TlsFiles

LOOPBACK = "127.0.0.1"


class LocalCluster:
    def __init__(self, folder: Path, *, gpus: list[str] | None = None, interpreter: int = 0,
                 env: dict[str, str] | None = None, name: str = "local", tls: TlsFiles | None = None) -> None:
        self.folder = Path(folder)
        self.scheduler_file = self.folder / "scheduler.json"
        self.scheduler_log = self.folder / "scheduler.log"
        self.workers_log = self.folder / "workers.log"
        self.expected = interpreter or len(gpus or [])
        self._selection = ["--interpreter", str(interpreter)] if interpreter else ["--gpus", *(gpus or [])]
        self._env = env if env is not None else dict(os.environ)
        self._name = name
        self.tls = tls
        self.scheduler: subprocess.Popen | None = None
        self.launcher: subprocess.Popen | None = None

    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the scheduler, then the workers, and wait until every worker has registered."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.scheduler_file.unlink(missing_ok=True)
        env = {**self._env, "PYTHONUNBUFFERED": "1"}
        with open(self.scheduler_log, "w") as log:
            self.scheduler = subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", LOOPBACK, "--port", "0",
                 "--no-dashboard", "--dashboard-address", f"{LOOPBACK}:0", *self._tls_args(scheduler=True),
                 "--scheduler-file", str(self.scheduler_file)],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while not self.scheduler_file.exists():
            if self.scheduler.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Dask scheduler did not start; see {self.scheduler_log}")
            time.sleep(0.1)
        with open(self.workers_log, "w") as log:
            self.launcher = subprocess.Popen(
                [sys.executable, "-m", "aot_tune.bench.dask", "worker", str(self.scheduler_file), *self._selection,
                 "--name", self._name, "--death-timeout", "30", "--host", LOOPBACK, *self._tls_args()],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_for_workers(self.expected, deadline - time.monotonic())

    def _tls_args(self, scheduler: bool = False) -> list[str]:
        if self.tls is None:
            return []
        return (["--protocol", "tls"] if scheduler else []) + self.tls.cli_args()

    def client(self, timeout_s: float = 20.0):
        """A Dask client of this cluster (with its certificates when it speaks TLS)."""
        from distributed import Client

        security = {} if self.tls is None else {"security": self.tls.security("client")}
        return Client(scheduler_file=str(self.scheduler_file), timeout=max(timeout_s, 1.0), **security)

    def wait_for_workers(self, count: int, timeout_s: float) -> None:
        with self.client(timeout_s) as client:
            client.wait_for_workers(count, timeout=max(timeout_s, 1.0))

    def worker_pids(self) -> dict[str, int]:
        """Worker name -> process id, from the launcher's log."""
        text = self.workers_log.read_text() if self.workers_log.exists() else ""
        return {name: int(pid) for name, pid in re.findall(r"worker (\S+) \(\S+\) starting, pid (\d+)", text)}

    def batches_started(self) -> list[tuple[str, str]]:
        """(worker name, batch label) of every bench batch the workers logged, in order."""
        text = self.workers_log.read_text() if self.workers_log.exists() else ""
        return re.findall(r"^\[aot_tune (\S+)\] (.+?): \d+ configs", text, flags=re.MULTILINE)

    def stop(self) -> None:
        """Stop the workers (the launcher stops its children), then the scheduler."""
        if self.launcher is not None and self.launcher.poll() is None:
            self.launcher.send_signal(signal.SIGTERM)
            try:
                self.launcher.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.launcher.pid, signal.SIGKILL)
                self.launcher.wait()
        if self.scheduler is not None and self.scheduler.poll() is None:
            self.scheduler.send_signal(signal.SIGTERM)
            try:
                self.scheduler.wait(10)
            except subprocess.TimeoutExpired:
                self.scheduler.kill()
                self.scheduler.wait()
