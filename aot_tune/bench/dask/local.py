"""A Dask scheduler and bench workers on this machine, as subprocesses: to try ``--executor dask``
on one host, and for the tests and tools.bench.bench_distributed.

    with LocalCluster(folder, gpus=["0", "1"]) as cluster:   # or interpreter=2 on a CPU
        ... doit tune --executor dask {" ".join(cluster.tune_args())}

Everything listens on loopback only, with no dashboard, and speaks TLS only: anyone reaching a
Dask scheduler or worker can run code in it, and on a shared host every local user reaches
loopback. Without ``tls`` certificates the cluster makes throwaway ones in ``folder/tls``
(aot_tune.bench.dask.credentials), which its clients, and ``doit tune`` given ``tune_args()``,
present; they are removed on stop.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from aot_tune.bench.dask.credentials import make_credentials
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
        self._own_tls = self.folder / "tls" if tls is None else None
        self.scheduler: subprocess.Popen | None = None
        self.launcher: subprocess.Popen | None = None

    def __enter__(self) -> "LocalCluster":
        try:
            self.start()
        except BaseException:
            self.stop()  # what did start, and the credentials
            raise
        return self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the scheduler, then the workers, and wait until every worker has registered."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.scheduler_file.unlink(missing_ok=True)
        if self._own_tls is not None:
            self.tls = make_credentials(self._own_tls)
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
        return (["--protocol", "tls"] if scheduler else []) + self.tls.cli_args()

    def tune_args(self) -> list[str]:
        """The options of ``doit tune --executor dask`` that reach this cluster: its scheduler
        file and certificates."""
        return ["--scheduler", str(self.scheduler_file), *self.tls.cli_args()]

    def client(self, timeout_s: float = 20.0):
        """A Dask client of this cluster, presenting its certificates."""
        from distributed import Client

        return Client(scheduler_file=str(self.scheduler_file), timeout=max(timeout_s, 1.0),
                      security=self.tls.security("client"))

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
        """Stop the workers (the launcher stops its children), then the scheduler, and remove the
        throwaway credentials."""
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
        if self._own_tls is not None:
            shutil.rmtree(self._own_tls, ignore_errors=True)
