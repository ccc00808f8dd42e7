"""The task loader: reads tuning.yaml, plans the run, and hands doit the stage tasks (rules/).

Stage actions (aot_tune.pipeline.session) know nothing of doit: a stage that fails returns a
``StageFailure``, which ``stage_action`` turns into doit's ``TaskFailed`` here.
"""
from __future__ import annotations

import os
from pathlib import Path

from doit.cmd_base import TaskLoader2, opt_depfile
from doit.exceptions import InvalidDodoFile, TaskFailed
from doit.loader import generate_tasks

from aot_tune import forking
from aot_tune.bench.local.detect import detect
from aot_tune.build.deadline import CompileDeadline
from aot_tune.commands.options import (DOIT_DB, EXECUTORS, opt_backend, opt_compile_deadline, opt_executor,
                                       opt_insecure_tcp, opt_manifest, opt_scheduler, opt_tls_ca_file, opt_tls_cert,
                                       opt_tls_key, opt_worker_wait)
from aot_tune.errors import StageFailure, TuneError
from aot_tune.pipeline.forecast import forecast, import_walk, may_have_work
from aot_tune.bench.local import early as early_worker
from aot_tune.pipeline.plan import Plan, build_plan, compiles_need_torch
from aot_tune.runs.history import read_history
from aot_tune.runs.log import read_runs
from aot_tune.pipeline.session import TuneSession
from aot_tune.pipeline.streaming import waiting_benches
from aot_tune.runs.progress import eprint
from aot_tune.pipeline.staleness import Staleness
from aot_tune.pipeline.guard import entries_missing_from_cache, lost_tables_message
from aot_tune.triton_compat import versions
from aot_tune.workers.pools import Executors


def stage_action(action, args: tuple):
    """Run one stage action for doit: a returned ``StageFailure`` fails the task with its message."""
    outcome = action(*args)
    return TaskFailed(outcome.message) if isinstance(outcome, StageFailure) else outcome


def _adapted(tasks):
    """The rule's task dicts, each action run through ``stage_action`` (doit wants a generator)."""
    for task in tasks:
        if "actions" in task:
            task = {**task, "actions": [(stage_action, action) for action in task["actions"]]}
        yield task


def set_aside_broken_database(path: Path) -> None:
    """doit's database is a cache of what ran (the durable files decide what is stale): one that
    does not open as doit's sqlite table is moved aside, with a note, and doit starts a new one."""
    import sqlite3
    from contextlib import closing

    if not path.is_file():
        return
    try:
        with closing(sqlite3.connect(path)) as conn:
            conn.execute("SELECT task_id, task_data FROM doit LIMIT 1").fetchall()
        return
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return  # an empty database: doit creates its table
        problem = exc
    except sqlite3.DatabaseError as exc:
        problem = exc
    aside = path.with_name(f"{path.name}.broken")
    os.replace(path, aside)
    eprint(f"aot_tune: {path} was not a usable doit database ({problem}); moved it to {aside.name} and "
           f"started a new one (what is done is read from the task outputs, so nothing reruns for it)")


def guard_tables(plan: Plan, staleness: Staleness) -> None:
    """Refuse to run when a generated module holds entries its cache lacks: rendering it again
    would drop those tables without anyone asking (a deleted, emptied or truncated cache). Tables
    made stale by a manifest edit are not lost: the generate stage guards those."""
    for kp in plan.kernels:
        missing = entries_missing_from_cache(kp.generated_path, staleness.cache(kp), kp.spec)
        if missing:
            raise TuneError(lost_tables_message(kp.spec, missing))


#: The most bench tasks given a doit thread of their own to wait for their compiles on.
MAX_WAITING_BENCHES = 256


class ManifestLoader(TaskLoader2):
    """Builds the stage tasks from the manifest; kernels named on the command line narrow it."""

    cmd_options = (opt_manifest, opt_backend, opt_executor, opt_scheduler, opt_tls_ca_file, opt_tls_cert,
                   opt_tls_key, opt_insecure_tcp, opt_worker_wait, opt_compile_deadline)

    def __init__(self) -> None:
        super().__init__()
        self.session: TuneSession | None = None
        self.manifest = None  # read by load_doit_config, which doit calls first
        self.kernel_names: tuple[str, ...] = ()
        self.jobs = os.cpu_count() or 1
        self.requested_jobs: int | None = None  # -n as given (or the cores)
        self.launch_s = 0.0  # the command's own start before it began the run (the forecast's)

    def setup(self, opt_values: dict) -> None:
        self.options = opt_values

    def read_manifest(self, write_caches: bool = True):
        """The manifest --manifest names (tuning.yaml by default); its mistakes are doit's one-line error."""
        from aot_tune.manifest import load_manifest

        try:
            return load_manifest(self.options.get("manifest") or "tuning.yaml", write_caches=write_caches)
        except TuneError as err:
            raise InvalidDodoFile(str(err)) from None

    def load_doit_config(self) -> dict:
        """doit's database goes under the manifest's .aot_tune/, never into the project root,
        unless --db-file or the project's doit settings name another place. The manifest is read
        first: a folder without one gets its error, and no .aot_tune/."""
        self.manifest = self.read_manifest()
        config = {}
        dep_file = self.options.get("dep_file")
        if dep_file in (None, opt_depfile["default"], DOIT_DB):
            manifest = Path(self.options.get("manifest") or "tuning.yaml")
            dep_file = os.path.join(os.path.dirname(manifest), DOIT_DB)
            config = {"dep_file": dep_file, "backend": "sqlite3"}
        # doit opens its database before it loads tasks
        Path(dep_file).parent.mkdir(parents=True, exist_ok=True)
        set_aside_broken_database(Path(dep_file))
        return config

    def plan_run(self):
        """The plan of the kernels named (all by default) on the devices this run benches on,
        what of it is stale, and the Dask cluster (None: the local devices; the caller closes
        it). What a run would refuse is doit's one-line error; nothing is written."""
        cluster = None
        manifest = self.manifest
        try:
            kernels = manifest.select(self.kernel_names) if self.kernel_names else manifest.kernels
            cluster = self._cluster()
            if cluster is None:
                devices = (detect(self.options.get("bench_backend", "auto")),)
            else:
                devices = cluster.discover(versions(), self.options.get("bench_backend", "auto"))
                eprint(f"aot_tune: benchmarking on the Dask cluster at {cluster.address}: "
                       + ", ".join(f"{d.count} x {d.key}" for d in devices))
            plan = build_plan(manifest, devices, kernels)
            staleness = Staleness(plan)
            guard_tables(plan, staleness)
        except TuneError as err:
            if cluster is not None:
                cluster.close()
            raise InvalidDodoFile(str(err)) from None
        return plan, staleness, cluster

    def compile_jobs(self, cluster) -> int:
        """-n: the compile workers. On a cluster -n may exceed the local cores to keep its GPUs
        busy; the compile workers may not."""
        if self.requested_jobs is None:  # doit's thread count is raised once the tasks are known
            self.requested_jobs = int(self.options.get("num_process") or self.jobs)
        jobs = self.requested_jobs
        return min(jobs, self.jobs) if cluster is not None else jobs

    def task_threads(self, jobs: int, plan: Plan, staleness: Staleness) -> int:
        """doit's threads: the compile tasks' ``jobs``, and one more for each stale bench task that
        waits for the compile stage (up to ``MAX_WAITING_BENCHES``). A bench task holds its thread
        while it waits: with -n threads only, fla-core's 72 row-kernel benches ran 16 at a time, the
        first 16 waited up to 15 s for their kernels' slowest compiles, and the device was busy 3-51%
        of each 2 s of the compile stage's first 14 s while the compiles of shapes not started yet
        had landed (H200 host)."""
        return jobs + min(waiting_benches(plan, staleness), MAX_WAITING_BENCHES)

    def start_fork_server(self) -> None:
        """Start the fork server before planning: its imports (torch and triton, 5-8 s on a GPU
        host's cold disk) are what every capture and compile waits for first, and the planning
        before them (reading the recordings and caches, asking nvidia-smi for the GPUs: 1.3-2.0 s
        there) now runs beside them. Torch only where a compile needs it, which the manifest
        alone tells. A run that then finds nothing to do stops it (``forking.stop_server``)."""
        try:
            kernels = self.manifest.select(self.kernel_names)
        except TuneError:  # planning reports it
            return
        forking.start_server(torch=compiles_need_torch(self.manifest.root, kernels))
        if early_worker.likely_needed(self.options.get("bench_backend", "auto"), self.options.get("executor", "local")):
            early_worker.start()  # torch's import, beside the planning (aot_tune.bench.local.early)

    def compile_deadline(self) -> CompileDeadline:
        deadline = CompileDeadline(factor=float(self.options.get("compile_deadline", CompileDeadline.factor)))
        if deadline.factor < 0:
            raise InvalidDodoFile(f"--compile-deadline {deadline.factor:g}: a negative factor; fix: a factor over "
                                  f"the median compile time (e.g. 10), or 0 for no deadline")
        return deadline

    def load_tasks(self, cmd, pos_args) -> list:
        executing = getattr(cmd, "execute_tasks", False)  # False for `doit list`: it runs nothing
        if executing:
            self.start_fork_server()
        try:
            return self._tasks(executing)
        except BaseException:  # the run ends here: a server no worker used would import on after it
            forking.stop_server()
            early_worker.stop()
            raise

    def _tasks(self, executing: bool) -> list:
        from aot_tune import rules
        from aot_tune.rules import bench, compile, generate, merge

        deadline = self.compile_deadline()
        plan, staleness, cluster = self.plan_run()
        devices = plan.devices
        if cluster is not None:
            try:
                refs = [ref for kp in plan.kernels for ref in plan.worker_refs(kp)]
                cluster.use_project(plan.manifest.root, refs, plan.triton_cache_dir)
            except TuneError as err:
                cluster.close()
                raise InvalidDodoFile(str(err)) from None
        plan.work_dir.mkdir(parents=True, exist_ok=True)
        jobs = self.compile_jobs(cluster)
        self.session = TuneSession(plan, Executors(devices[0], plan.triton_cache_dir, jobs, cluster=cluster,
                                                   deadline=deadline), staleness)
        if executing:
            note = plan.compile_only_note()
            if note:
                eprint(f"aot_tune: {note}")
            for line in plan.stale_sources_note():
                eprint(f"aot_tune: note: {line}")
            for change in (c for kp in plan.kernels for c in staleness.manifest_changes(kp)):
                eprint(f"aot_tune: {change.line(plan.device_keys)}")
            working = may_have_work(plan, staleness)  # a no-op run predicts nothing, and starts no worker
            if not (working and cluster is None and plan.device.backend == "cuda"
                    and any(staleness.benches_stale(kp) for kp in plan.kernels)):
                early_worker.stop()  # no local GPU bench to take it
            if working:
                walk = start_walk(plan, staleness)  # a library's import tree is read while the captures run
            else:
                forking.stop_server()  # a no-op run forks no worker: it ends now, not after the imports
            try:
                self.session.specialize()
            except TuneError as err:
                raise InvalidDodoFile(str(err)) from None
            if working:  # before the tasks: their order and progress lines use it
                predicted = predict(plan, staleness, jobs, deadline, walk, self.launch_s)
                self.session.forecast = None if predicted is None or predicted.idle else predicted
            self.options["num_process"] = self.task_threads(jobs, plan, staleness)  # doit reads it after this
        task_list = []
        for stage in (compile, bench, merge, generate):
            task_list.extend(generate_tasks(stage.__name__, _adapted(stage.tasks(self.session)), stage.__doc__))
        assert rules.STAGES == ("compile", "bench", "merge", "generate")
        if self.options.get("always"):  # -a runs the up-to-date tasks too: progress counts them from the start
            for stage, progress in self.session.progress.items():
                progress.total = sum(1 for task in task_list if task.name.startswith(f"{stage}:"))
        if executing:
            if self.session.progress["bench"].total:  # where the benches run matters only when they do
                for device in devices:
                    if device.notice:
                        eprint(f"aot_tune: {device.notice}")
            self.session.start_workers()  # while doit prepares to run the tasks
        return task_list

    def _cluster(self):
        """The Dask cluster to bench on, or None for the local devices."""
        executor = self.options.get("executor", "local")
        if executor not in EXECUTORS:
            raise TuneError(f"unknown executor '{executor}'; fix: use --executor with one of {', '.join(EXECUTORS)}")
        scheduler = self.options.get("scheduler", "")
        if executor == "local":
            if scheduler:
                raise TuneError("--scheduler is only used with --executor dask; fix: add --executor dask, "
                                "or drop --scheduler")
            return None
        if not scheduler:
            raise TuneError("--executor dask needs the scheduler's address; fix: add --scheduler tls://host:8786 "
                            "(or set scheduler under [tool.doit.commands.tune] in pyproject.toml)")
        from aot_tune.bench.dask.client import ClusterDevices
        from aot_tune.bench.dask.security import TlsFiles

        tls = TlsFiles.of(*(self.options.get(k, "") for k in ("tls_ca_file", "tls_cert", "tls_key")))
        return ClusterDevices(scheduler, float(self.options.get("worker_wait", 60.0)), log=eprint, tls=tls,
                              insecure_tcp=bool(self.options.get("insecure_tcp", False)))


def start_walk(plan: Plan, staleness: Staleness):
    """The forecast's import walk, started now (None where it could not start: ``predict`` then
    makes its own, and says what failed)."""
    try:
        return import_walk(plan, staleness)
    except Exception:  # noqa: BLE001 - predict() meets it again and reports it
        return None


def predict(plan: Plan, staleness: Staleness, jobs: int, deadline: CompileDeadline, walk=None, launch_s: float = 0.0):
    """The run's forecast, or None where making it failed: an estimate must not stop a release
    build (a library laid out in a way the import walk does not know, say), so the run says so in
    one line and goes on without one (no progress estimate, bench tasks by config count)."""
    try:
        return forecast(plan, staleness, jobs, read_runs(plan.work_dir), deadline, read_history(), walk, launch_s)
    except Exception as exc:  # noqa: BLE001 - any fault of the estimate: the run itself is unaffected
        eprint(f"aot_tune: no estimate of this run ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
               "it runs without one (please report it)")
        return None
