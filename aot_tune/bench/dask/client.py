"""The planning machine's side of a cluster run: find the cluster's device models, and run each
bench task's configs as one Dask task on a worker of its model.

Failure semantics:

* A worker that dies mid-batch loses that batch only: Dask reschedules it on another worker of
  the same model (its resource), after at most ``allowed-failures`` deaths it gives up
  (KilledWorker) and the bench task fails with that reason.
* When no worker of the model is left for ``worker_wait_s``, the bench task fails with a reason
  naming the model; other models go on.
* When the scheduler goes away, every bench task in flight fails at once with one line; bench
  tasks that finished wrote their outputs already, and merge/generate of a kernel run only when
  all its bench tasks succeeded, so the tables stay as they were.

Bench outputs, caches and tables are written here, by the bench task, exactly as on a local run.

Each bench task holds one worker of its model at a time (aot_tune.bench.seats), as it holds one
GPU on a local run: its batches go to that worker, which keeps the shape's input sets and
references between them and is told the shape to build next; a worker is sent each Triton cache
entry once. A batch whose worker died runs on another (Dask's retry); that one compiles what it
was not sent.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
import re
import uuid
import zlib
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from aot_tune.bench.runner import BenchRequest, ConfigMeasurement, DeviceInfo, DeviceLease, MoreRequests, Runner
from aot_tune.bench.seats import Seats
from aot_tune.runtime.devices import INTERPRETER
from aot_tune.errors import BenchUnavailable, TuneError, program
from aot_tune.bench.runner import INTERPRETER_DEVICE, DeviceModel
from aot_tune.triton_compat import pack_cache_entry
from aot_tune.bench.dask import declared_kinds, resource_name
from aot_tune.bench.dask.remote import BatchResult, RemoteBatch, WorkerDescription, describe, run_batch, warm
from aot_tune.bench.dask.sources import SourceBundle, project_sources
from aot_tune.bench.dask.security import TLS_OPTIONS, TlsFiles, check_transport, warn_if_plain

CONNECT_TIMEOUT_S = 20.0
#: How often a waiting bench task looks at the cluster's workers.
POLL_S = 1.0
DEFAULT_WORKER_WAIT_S = 60.0


class ClusterLost(BenchUnavailable):
    """The scheduler went away: nothing more can run on the cluster in this run."""


class ClusterDevices(Runner):
    """The bench devices of a Dask cluster, one device model per declared kind."""

    #: The cluster's workers were up before the run: no start-up to report.
    started_at = ready_at = None

    def __init__(self, address: str, worker_wait_s: float = DEFAULT_WORKER_WAIT_S, log=print, *,
                 tls: TlsFiles | None = None, insecure_tcp: bool = False) -> None:
        # Judged before anything is contacted: plain TCP lets others run code here.
        resolved = check_transport(address, tls, insecure_tcp, fix_tls=TLS_OPTIONS)
        try:
            from distributed import Client
        except ImportError:
            raise TuneError("--executor dask needs Dask's distributed package; fix: pip install "
                            "'aot-tune[distributed]' (dask and distributed) here and on the workers") from None
        # Dask logs its reconnection attempts with tracebacks; what they mean for the run is
        # reported here, one line per bench task.
        for name in ["distributed", *logging.root.manager.loggerDict]:
            if name.startswith("distributed"):
                logging.getLogger(name).setLevel(logging.CRITICAL)
        import dask

        # A batch carries its Triton cache entries (a few MB for a big GEMM space): on purpose.
        dask.config.set({"distributed.admin.large-graph-warning-threshold": "256MB"})
        self.address = address
        self.worker_wait_s = worker_wait_s
        self._log = log
        target = {"scheduler_file": address} if os.path.isfile(address) else {"address": address}
        if tls is not None:
            target["security"] = tls.security("client")
        warn_if_plain(resolved)
        try:
            self.client = Client(**target, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError, asyncio.TimeoutError) as exc:
            raise TuneError(f"cannot reach the Dask scheduler at {address} ({type(exc).__name__}: {exc}); fix: start "
                            f"it (`dask scheduler`) or pass its address with --scheduler") from None
        self.devices: tuple[DeviceModel, ...] = ()
        self._sources: SourceBundle | None = None
        self._triton_cache_dir = ""
        self._packed: dict[str, dict[str, bytes] | None] = {}
        self._packed_lock = threading.Lock()  # also guards _shipped
        self._members: dict[str, tuple[str, str]] = {}  # address -> (name, kind), as last seen
        self._members_seen = 0.0
        self._members_lock = threading.Lock()
        self._seats: dict[str, Seats] = {}  # device model -> its workers, each held by one bench task at a time
        self._shipped: dict[str, set[str]] = {}  # worker address -> the Triton cache entries sent there
        self._started = False

    # -- planning --------------------------------------------------------------------------
    def discover(self, toolchain: dict[str, str], backend: str = "auto") -> tuple[DeviceModel, ...]:
        """The device models of the cluster's bench workers (waiting up to ``worker_wait_s`` for
        the first), checked to match this machine's triton and torch and their declared model."""
        workers = self._bench_workers()
        deadline = time.monotonic() + self.worker_wait_s
        while not workers and time.monotonic() < deadline:
            time.sleep(POLL_S)
            workers = self._bench_workers()
        if not workers:
            raise TuneError(f"the Dask cluster at {self.address} has no aot_tune bench worker (none declares an "
                            f"'aot_tune:<device>' resource); fix: start one per GPU with "
                            f"`python -m aot_tune.bench.dask worker {self.address}` on each GPU host")
        found = self.client.run(describe, workers=list(workers))
        by_kind: dict[str, list[WorkerDescription]] = {}
        for description in found.values():
            by_kind.setdefault(self._check(description, toolchain), []).append(description)
        devices = []
        for kind, members in sorted(by_kind.items()):
            if kind == INTERPRETER:
                device = DeviceModel(**{**INTERPRETER_DEVICE.__dict__, "count": len(members)})
            else:
                name, capability = members[0].gpus[0]
                device = DeviceModel("cuda", kind, name, capability, len(members))
            if backend == "auto" or backend == device.backend:
                devices.append(device)
        if not devices:
            raise TuneError(f"the Dask cluster at {self.address} has no {backend} bench worker (it has "
                            f"{', '.join(sorted(by_kind))}); fix: drop --bench-backend {backend} or start such workers")
        self.devices = tuple(devices)
        with self._members_lock:
            self._members = {a: (str(w.name), w.kinds[0]) for a, w in found.items()}
        self._seats = {d.key: Seats(sorted(a for a, w in found.items() if w.kinds[0] == d.key)) for d in devices}
        return self.devices

    def _check(self, worker: WorkerDescription, toolchain: dict[str, str]) -> str:
        where = f"Dask worker {worker.name} ({worker.address})"
        if len(worker.kinds) != 1:
            raise TuneError(f"{where} declares the device models {', '.join(worker.kinds)}; fix: start one worker "
                            f"per GPU, each with one 'aot_tune:<device>=1' resource")
        kind = worker.kinds[0]
        if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", kind):
            raise TuneError(f"{where} declares the device model {kind[:80]!r}, not a device key (it names folders "
                            f"of this project); fix: declare a key such as h100-sxm (aot_tune.runtime.devices.device_key)")
        if (worker.triton, worker.torch) != (toolchain["triton"], toolchain["torch"]):
            raise TuneError(f"{where} has triton {worker.triton} and torch {worker.torch}, this machine triton "
                            f"{toolchain['triton']} and torch {toolchain['torch']}; fix: install the same versions "
                            f"on both (records and Triton's cache are keyed by them)")
        if worker.daemonic:
            raise TuneError(f"{where} runs as a daemonic process (a nanny's child) and cannot start its device "
                            f"process; fix: start it with `python -m aot_tune.bench.dask worker` or `dask worker --no-nanny`")
        if kind != INTERPRETER:
            from aot_tune.runtime.devices import device_key

            models = sorted({device_key(name) for name, _ in worker.gpus})
            if len(worker.gpus) != 1 or models != [kind]:
                raise TuneError(f"{where} declares one {kind} GPU but sees {len(worker.gpus)} GPU(s) "
                                f"({', '.join(models) or 'none'}); fix: give each worker one GPU through "
                                f"CUDA_VISIBLE_DEVICES, as `python -m aot_tune.bench.dask worker` does")
        return kind

    def use_project(self, root: Path, refs: Iterable[str], triton_cache_dir: Path) -> None:
        """The project files the workers import, and the Triton cache the compiles fill here."""
        self._sources = project_sources(root, refs)
        self._triton_cache_dir = str(triton_cache_dir)

    def _bench_workers(self) -> dict[str, tuple[str, list[str]]]:
        """Address -> (name, declared kinds) of the workers that declare a device model."""
        info = self.client.scheduler_info(n_workers=-1)
        found = {}
        for address, worker in info.get("workers", {}).items():
            kinds = declared_kinds(worker.get("resources") or {})
            if kinds:
                found[address] = (str(worker.get("name", address)), kinds)
        return found

    # -- the bench-devices interface (Runner, as aot_tune.bench.local.pool.DevicePool) ---------
    def start(self) -> None:
        """Start every bench worker's device process in the background (while the compiles run)."""
        if self._started or self._sources is None:
            return
        self._started = True
        backends = {d.key: d.backend for d in self.devices}
        with self._members_lock:
            members = dict(self._members)
        for address, (_, kind) in members.items():
            if kind in backends:
                threading.Thread(target=self._warm, args=(address, backends[kind]), daemon=True,
                                 name="aot_tune-cluster-warm").start()

    def _warm(self, address: str, backend: str) -> None:
        try:
            self.client.run(warm, backend, self._sources, workers=[address])
        except Exception:  # warming is an optimization; the batch reports a real failure
            pass

    def lease(self, device: DeviceModel, upcoming: BenchRequest | None = None) -> "ClusterLease":
        """A worker of this model, held until the block ends (``upcoming``: the first request the
        bench task will send, so that a busy worker builds its shape while the task waits)."""
        return ClusterLease(self, device, upcoming)

    def take(self, kind: str, upcoming: BenchRequest | None) -> str | None:
        """A free worker of model ``kind`` (waiting for one), or None when none is left."""
        seats = self._seats.get(kind)
        if seats is None:
            return None
        return seats.take(upcoming, poll_s=POLL_S, refresh=lambda: self._count_of(kind))

    def give_back(self, kind: str, address: str) -> None:
        self._seats[kind].give_back(address)

    def holds(self, kind: str, address: str) -> bool:
        """Whether ``address`` is still one of the model's workers."""
        return address in self._seats[kind].members()

    def next_for(self, kind: str, address: str, sending: BenchRequest) -> BenchRequest | None:
        return self._seats[kind].next_for(address, sending)

    def close(self) -> None:
        try:
            self.client.close(timeout=5)
        except Exception:  # the scheduler may be gone already
            pass

    # -- used by leases --------------------------------------------------------------------
    def cache_entries(self, requests: Sequence[BenchRequest], address: str | None = None) -> dict[str, dict[str, bytes]]:
        """Triton cache entries of every compile the requests' launches use, each file compressed
        (a cubin to about a third); packed once per run. With ``address``, only those not yet sent
        to that worker (``shipped`` records what arrived)."""
        entries = {}
        with self._packed_lock:
            sent = set(self._shipped.get(address, ())) if address is not None else set()
        for kernel_hash in sorted({h for r in requests for h in r.kernel_hashes} - sent):
            with self._packed_lock:
                if kernel_hash not in self._packed:
                    files = pack_cache_entry(self._triton_cache_dir, kernel_hash)
                    self._packed[kernel_hash] = None if files is None else \
                        {name: zlib.compress(data, 1) for name, data in files.items()}
                packed = self._packed[kernel_hash]
            if packed is not None:
                entries[kernel_hash] = packed
        return entries

    def shipped(self, address: str, batch: RemoteBatch, result: BatchResult) -> None:
        """Note the batch's entries as installed on ``address``, if it ran there."""
        with self._members_lock:
            ran_there = self._members.get(address, ("",))[0] == result.worker
        if ran_there:
            with self._packed_lock:
                self._shipped.setdefault(address, set()).update(batch.cache_entries)

    def run(self, batch: RemoteBatch, address: str | None = None) -> BatchResult:
        """Run a batch on a worker of its model (``address``'s while it is up); wait while
        workers come and go."""
        from distributed import KilledWorker

        self._ensure_connected()
        where = {"workers": [address], "allow_other_workers": True} if address is not None else {}
        future = self.client.submit(run_batch, batch, resources={resource_name(batch.kind): 1}, pure=False,
                                    key=f"aot_tune-{batch.label.replace(' ', '-')}-{uuid.uuid4().hex[:8]}", **where)
        alone_since = None
        while True:
            try:
                return future.result(timeout=POLL_S)
            except (TimeoutError, asyncio.TimeoutError):
                pass
            except KilledWorker as exc:
                raise BenchUnavailable(f"Dask workers died {exc.allowed_failures + 1} times while running it "
                                       f"(last {exc.last_worker.name}); fix: read that worker's log") from None
            except (concurrent.futures.CancelledError, asyncio.CancelledError):
                self._ensure_connected()
                raise BenchUnavailable("its Dask task was cancelled") from None
            except Exception as exc:
                self._ensure_connected()
                text = " ".join(str(exc).split())[:400]
                raise BenchUnavailable(f"it failed on a Dask worker: {type(exc).__name__}: {text}") from None
            self._ensure_connected()
            if self._count_of(batch.kind) > 0:
                alone_since = None
            elif alone_since is None:
                alone_since = time.monotonic()
            elif time.monotonic() - alone_since > self.worker_wait_s:
                future.cancel()
                raise BenchUnavailable(f"no Dask worker of device model {batch.kind} is left in the cluster at "
                                       f"{self.address} (waited {self.worker_wait_s:.0f} s); fix: start one with "
                                       f"`python -m aot_tune.bench.dask worker {self.address}` and run {program()} tune "
                                       f"again (finished shapes are kept)")

    def _ensure_connected(self) -> None:
        if self.client.status != "running":
            raise ClusterLost(f"lost the Dask scheduler at {self.address}; finished shapes are kept in .aot_tune/bench "
                              f"and the tables are unchanged; fix: restart the scheduler and its workers, then run "
                              f"{program()} tune again (only unfinished shapes run)")

    def _count_of(self, kind: str) -> int:
        """Bench workers of this model now; prints who left and who joined since the last look."""
        with self._members_lock:
            if time.monotonic() - self._members_seen >= POLL_S:
                self._members_seen = time.monotonic()
                try:
                    now = {a: (name, kinds[0]) for a, (name, kinds) in self._bench_workers().items()}
                except Exception:  # the scheduler is going away; the next look says so
                    now = self._members
                for address in sorted(self._members.keys() - now.keys()):
                    name, left_kind = self._members[address]
                    if left_kind in self._seats:
                        self._seats[left_kind].leave(address)
                    with self._packed_lock:
                        self._shipped.pop(address, None)
                    remaining = sum(k == left_kind for _, k in now.values())
                    self._log(f"[cluster] worker {name} ({left_kind}) left; {remaining} {left_kind} worker(s) "
                              f"remain; a bench task it was running is retried on another")
                for address in sorted(now.keys() - self._members.keys()):
                    self._log(f"[cluster] worker {now[address][0]} ({now[address][1]}) joined")
                    if now[address][1] in self._seats:
                        self._seats[now[address][1]].join(address)
                self._members = now
            return sum(kind == k for _, k in self._members.values())


class ClusterLease(DeviceLease):
    """A bench task's hold on one worker of a device model; each ``measure_all`` is one Dask task
    sent to that worker (to another when it left)."""

    def __init__(self, cluster: ClusterDevices, device: DeviceModel, upcoming: BenchRequest | None = None) -> None:
        self._cluster = cluster
        self._device = device
        self._upcoming = upcoming
        self._address: str | None = None
        self.cache_hits = 0
        self.cache_misses = 0
        self.seconds: Counter[str] = Counter()
        self.workers: list[str] = []
        self._info: DeviceInfo | None = None

    def __enter__(self) -> "ClusterLease":
        self._address = self._cluster.take(self._device.key, self._upcoming)
        return self

    def __exit__(self, *exc) -> bool:
        if self._address is not None:
            self._cluster.give_back(self._device.key, self._address)
            self._address = None
        return False

    def ready(self) -> None:
        """Cluster workers are up before a run uses them (planning checked each one)."""

    @property
    def info(self) -> DeviceInfo:
        if self._info is None:  # nothing ran yet: an empty batch reports the device
            self.measure_all([], 0.0)
        assert self._info is not None
        return self._info

    def measure_all(self, requests: Sequence[BenchRequest], timeout_s: float,
                    more: MoreRequests | None = None) -> list[ConfigMeasurement]:
        """The batch as one task on the cluster; ``more`` is not asked (a batch is shipped whole)."""
        first = requests[0] if requests else None
        label = f"{first.kernel} {first.dtype} {'x'.join(str(v) for _, v in first.shape)}" if first else "device"
        kind = self._device.key
        if self._address is not None and not self._cluster.holds(kind, self._address):  # it left
            self._address = self._cluster.take(kind, first)
        address = self._address
        batch = RemoteBatch(
            label=f"{label} on {kind}", kind=kind, backend=self._device.backend,
            sources=self._cluster._sources, requests=tuple(requests),
            cache_entries=self._cluster.cache_entries(requests, address) if self._device.backend == "cuda" else {},
            timeout_s=timeout_s,
            ahead=self._cluster.next_for(kind, address, first) if address is not None and first is not None else None,
        )
        result = self._cluster.run(batch, address)
        if address is not None:
            self._cluster.shipped(address, batch, result)
        self._info = result.info
        self.cache_hits += result.cache_hits
        self.cache_misses += result.cache_misses
        self.seconds.update(result.seconds)
        self.workers.append(result.worker)
        return result.measurements
