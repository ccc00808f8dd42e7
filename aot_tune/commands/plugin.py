"""doit integration: a task loader that reads tuning.yaml, and the ``tune``, ``check``,
``merge-caches`` and ``report`` commands.

``doit tune [KERNEL...]`` is a command (not a task) so that ``doit tune -n 8`` and
``[tool.doit.commands.tune]`` work. It runs doit's parallel runner on threads: task actions only
hand work to the worker pools (aot_tune.workers.pools), which do the heavy lifting in processes.
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from doit.cmd_base import Command, TaskLoader2
from doit.cmd_run import Run, opt_num_process, opt_parallel_type
from doit.exceptions import InvalidCommand, InvalidDodoFile
from doit.loader import generate_tasks

from aot_tune.errors import TuneError
from aot_tune.workers.pools import Executors
from aot_tune.bench.local.detect import BACKENDS, detect
from aot_tune.pipeline.plan import WORK_DIR, Staleness, build_plan, guard_tables
from aot_tune.pipeline.runlog import append_run
from aot_tune.triton_compat import versions
from aot_tune.pipeline.session import TuneSession, eprint

opt_manifest = {
    "name": "manifest", "long": "manifest", "type": str, "default": "tuning.yaml",
    "help": "path of the tuning manifest [default: %(default)s]",
}
opt_backend = {
    "name": "bench_backend", "long": "bench-backend", "type": str, "default": "auto",
    "help": f"where to benchmark: {', '.join(BACKENDS)} (auto: cuda when a GPU is visible) [default: %(default)s]",
}
EXECUTORS = ("local", "dask")
opt_executor = {
    "name": "executor", "long": "executor", "type": str, "default": "local",
    "help": "where the bench stage runs: local (a worker per local GPU) or dask (the GPUs of the Dask "
            "cluster at --scheduler, every GPU model it has) [default: %(default)s]",
}
opt_scheduler = {
    "name": "scheduler", "long": "scheduler", "type": str, "default": "",
    "help": "with --executor dask: the scheduler's address (tcp://host:8786) or scheduler file",
}
opt_worker_wait = {
    "name": "worker_wait", "long": "worker-wait", "type": float, "default": 60.0,
    "help": "with --executor dask: seconds to wait for a bench worker of a device model before "
            "its bench tasks fail [default: %(default)s]",
}


class ManifestLoader(TaskLoader2):
    """Builds the stage tasks from the manifest; kernels named on the command line narrow it."""

    cmd_options = (opt_manifest, opt_backend, opt_executor, opt_scheduler, opt_worker_wait)

    def __init__(self) -> None:
        super().__init__()
        self.session: TuneSession | None = None
        self.kernel_names: tuple[str, ...] = ()
        self.jobs = os.cpu_count() or 1

    def setup(self, opt_values: dict) -> None:
        self.options = opt_values
        dep_file = opt_values.get("dep_file")
        if dep_file:  # doit opens its database before it loads tasks
            Path(dep_file).parent.mkdir(parents=True, exist_ok=True)

    def load_doit_config(self) -> dict:
        return {}

    def load_tasks(self, cmd, pos_args) -> list:
        from aot_tune import rules
        from aot_tune.manifest import load_manifest
        from aot_tune.rules import bench, compile, generate, merge

        cluster = None
        try:
            manifest = load_manifest(self.options.get("manifest", "tuning.yaml"))
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
            if cluster is not None:
                refs = [ref for k in kernels for ref in (k.kernel, k.launch, k.inputs, k.reference)]
                cluster.use_project(manifest.root, refs, plan.triton_cache_dir)
        except TuneError as err:
            if cluster is not None:
                cluster.close()
            raise InvalidDodoFile(str(err)) from None
        for device in devices:
            if device.notice:
                eprint(f"aot_tune: {device.notice}")
        plan.work_dir.mkdir(parents=True, exist_ok=True)
        jobs = int(self.options.get("num_process") or self.jobs)
        if cluster is not None:  # -n may exceed the local cores to keep a big cluster's GPUs busy; compiles may not
            jobs = min(jobs, self.jobs)
        self.session = TuneSession(plan, Executors(devices[0], plan.triton_cache_dir, jobs, cluster=cluster),
                                   staleness)
        if getattr(cmd, "execute_tasks", False):  # `doit list` shows what is known, and runs nothing
            try:
                self.session.specialize()
            except TuneError as err:
                raise InvalidDodoFile(str(err)) from None
        task_list = []
        for stage in (compile, bench, merge, generate):
            task_list.extend(generate_tasks(stage.__name__, stage.tasks(self.session), stage.__doc__))
        assert rules.STAGES == ("compile", "bench", "merge", "generate")
        if getattr(cmd, "execute_tasks", False):
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
            raise TuneError("--executor dask needs the scheduler's address; fix: add --scheduler tcp://host:8786 "
                            "(or set scheduler under [tool.doit.commands.tune] in pyproject.toml)")
        from aot_tune.bench.dask.client import ClusterDevices

        return ClusterDevices(scheduler, float(self.options.get("worker_wait", 60.0)), log=eprint)


def _with_default(option: dict, default) -> dict:
    return {**option, "default": default}


class TuneCommand(Run):
    """Run the tuning pipeline: compile, bench, merge, generate."""

    name = "tune"
    doc_purpose = "tune the kernels of tuning.yaml ahead of time (all, or those named)"
    doc_usage = "[KERNEL ...]"
    doc_description = ("Compiles every candidate config on all CPU cores, benchmarks each shape on the\n"
                       "local GPUs (or the Triton interpreter), merges the results into the protobuf\n"
                       "caches and writes generated/<kernel>.py. Only stale work runs.")
    cmd_options = tuple(
        _with_default(opt, os.cpu_count() or 1) if opt is opt_num_process
        else _with_default(opt, "thread") if opt is opt_parallel_type
        else opt
        for opt in Run.cmd_options
    )

    def __init__(self, task_loader=None, **kwargs) -> None:
        if not isinstance(task_loader, ManifestLoader):
            task_loader = ManifestLoader()
        super().__init__(task_loader=task_loader, **kwargs)

    def execute(self, params, args):
        if params.get("par_type") == "process":
            raise InvalidCommand("doit tune runs its own worker processes; -P process is not supported, "
                                 "drop the option (threads are the default)")
        self.loader.kernel_names = tuple(args)
        work_dir = Path(params.get("manifest") or "tuning.yaml").resolve().parent / WORK_DIR
        started, result = time.time(), None
        with _exclusive_run(work_dir):
            try:
                result = super().execute(params, [])
            finally:
                session = self.loader.session
                if session is not None:
                    session.executors.close()
                    summary = session.summary()
                    if summary:
                        eprint(summary)
                    run = session.run_record(started, time.time(), ok=result == 0)
                    if run is not None:
                        append_run(work_dir, run)
        return result


opt_toolchain = {
    "name": "toolchain", "long": "toolchain", "type": str, "default": "recorded",
    "help": "recorded: judge each record with the triton/torch it was measured with; installed: also flag "
            "records measured with other versions than the installed ones [default: %(default)s]",
}


class CheckCommand(Command):
    """Exit 1 when a checked-in table is stale or incomplete; for CI machines without a GPU."""

    name = "check"
    doc_purpose = "check that generated tables are in sync with kernels, manifest and toolchain"
    doc_usage = ""
    doc_description = ("Prints tuned/stale/missing per kernel and device; exits 1 and names the kernels\n"
                       "to retune when anything is stale or missing. Needs no GPU.")
    cmd_options = (opt_manifest, opt_toolchain)

    def execute(self, params, args):
        from aot_tune.tables.check import TOOLCHAIN_MODES, check
        from aot_tune.manifest import load_manifest

        if params["toolchain"] not in TOOLCHAIN_MODES:
            raise InvalidCommand(f"--toolchain must be one of {', '.join(TOOLCHAIN_MODES)}")
        try:
            report = check(load_manifest(params["manifest"]), params["toolchain"])
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        print(report.render())
        return 0 if report.ok else 1


class MergeCachesCommand(Command):
    """Merge tuning caches from other machines into this project's caches and generated modules."""

    name = "merge-caches"
    doc_purpose = "merge caches from other machines/GPUs into this project's caches"
    doc_usage = "PATH [PATH ...]"
    doc_description = ("Each PATH is a *.tuning.pb/.txtpb file or a folder holding them (e.g. another\n"
                       "checkout's generated/). Same fingerprint: the newer record wins; different\n"
                       "fingerprints: the one current for this checkout wins, else the newer.\n"
                       "Regenerates the affected generated/<kernel>.py with a table per device.")
    cmd_options = (opt_manifest,)

    def execute(self, params, args):
        from aot_tune.manifest import load_manifest
        from aot_tune.tables.exchange import cache_files, merge_into_project

        if not args:
            raise InvalidCommand("merge-caches needs at least one cache file or folder to merge")
        manifest_path = Path(params["manifest"]).resolve()
        try:
            with _exclusive_run(manifest_path.parent / WORK_DIR):
                summary = merge_into_project(load_manifest(manifest_path), cache_files(args))
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        print(summary.render())
        return 0


opt_kernels = {
    "name": "kernels", "long": "kernel", "type": str, "default": "",
    "help": "comma-separated kernels whose tables to drop (default: every kernel of the manifest)",
}


class DropDeviceCommand(Command):
    """Drop a device's tables on purpose: the one way a tuned table leaves a generated module."""

    name = "drop-device"
    doc_purpose = "remove a device's tables from the caches and generated modules (explicitly)"
    doc_usage = "[--kernel K1,K2] DEVICE [DEVICE ...]"
    doc_description = ("Removes every record of each DEVICE (a device key such as h200 or interpreter) from\n"
                       "the kernels' caches, and its table from generated/<kernel>.py. doit tune and\n"
                       "merge-caches never drop a table on their own; this is how you ask for it.")
    cmd_options = (opt_manifest, opt_kernels)

    def execute(self, params, args):
        from aot_tune.manifest import load_manifest
        from aot_tune.tables.exchange import drop_devices

        if not args:
            raise InvalidCommand("drop-device needs the device key(s) to drop, e.g. `doit drop-device h200`")
        misplaced = [arg for arg in args if arg.startswith("-")]
        if misplaced:  # doit reads options only before the positional arguments
            raise InvalidCommand(f"{misplaced[0]} came after a device key; fix: put options first, e.g. "
                                 f"`doit drop-device --kernel gemm h200`")
        manifest_path = Path(params["manifest"]).resolve()
        try:
            manifest = load_manifest(manifest_path)
            kernels = manifest.select([k.strip() for k in params["kernels"].split(",") if k.strip()])
            with _exclusive_run(manifest_path.parent / WORK_DIR):
                summary = drop_devices(manifest, args, kernels)
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        print(summary.render())
        return 0


opt_output = {
    "name": "output", "long": "output", "short": "o", "type": str, "default": "report",
    "help": "folder to write index.html and summary.md into [default: %(default)s]",
}


class ReportCommand(Command):
    """Render what tuning bought as a self-contained HTML page and a markdown summary."""

    name = "report"
    doc_purpose = "write an HTML report and a markdown summary of the tuning results (no GPU needed)"
    doc_usage = "[KERNEL ...]"
    doc_description = ("Per kernel and device: tuned vs default config vs vendor per shape (with rates and\n"
                       "floors), tuning time, a heatmap of config parameters against performance, failures by\n"
                       "reason and coverage, from the caches and this tree's .aot_tune/ outputs. Plots need\n"
                       "matplotlib (pip install 'aot-tune[report]').")
    cmd_options = (opt_manifest, opt_output)

    def execute(self, params, args):
        from aot_tune.manifest import load_manifest
        from aot_tune.reports.report import write_report

        try:
            manifest = load_manifest(params["manifest"])
            paths = write_report(manifest, Path(params["output"]), manifest.select(args))
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        except OSError as err:
            raise InvalidCommand(f"cannot write the report into {params['output']}: {err.strerror or err}; "
                                 f"fix: pass a writable folder with --output") from None
        print(f"wrote {paths.html} and {paths.markdown}")
        return 0


opt_tolerance = {
    "name": "tolerance", "long": "tolerance", "type": float, "default": 0.05,
    "help": "how far from its best each entry may end up, e.g. 0.05 for 5%% [default: %(default)s]",
}
opt_devices = {
    "name": "devices", "long": "device", "type": str, "default": "",
    "help": "comma-separated device keys to cover, e.g. h100-sxm,h200 (default: every GPU device with "
            "records; the interpreter only when no GPU has any)",
}
opt_triton = {
    "name": "triton", "long": "triton", "type": bool, "default": False,
    "help": "print the subset as a triton.Config list for @triton.autotune",
}


class SubsetCommand(Command):
    """The fewest configs keeping every tuned entry near its best: a candidate list for @triton.autotune."""

    name = "subset"
    doc_purpose = "pick a small config list that keeps every tuned shape within 5% of its best"
    doc_usage = "[KERNEL ...]"
    doc_description = ("Greedy set cover over the kernel's cache: configs are added until every tuned\n"
                       "(device, dtype, shape) has one within --tolerance of its fastest measured config.\n"
                       "--triton prints them as a triton.Config list for users who keep Triton's autotuner.")
    cmd_options = (opt_manifest, opt_tolerance, opt_devices, opt_triton)

    def execute(self, params, args):
        from aot_tune.manifest import load_manifest
        from aot_tune.reports.subset import render_report, render_triton

        if not params["tolerance"] >= 0:
            raise InvalidCommand(f"--tolerance must be >= 0 (e.g. 0.05 for 5%), got {params['tolerance']}")
        try:
            manifest = load_manifest(params["manifest"])
            subsets = [(spec, _subset(manifest, spec, params["tolerance"], params["devices"]))
                       for spec in manifest.select(args)]
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        for spec, subset in subsets:
            if params["triton"]:
                print(render_triton(subset, [name for name, _ in spec.space.params]))
            else:
                print(render_report(subset))
        return 0


def _subset(manifest, spec, tolerance: float, devices: str):
    from aot_tune import cache as cache_io
    from aot_tune.runtime.devices import INTERPRETER
    from aot_tune.reports.subset import select_subset

    records = cache_io.read_cache(manifest.root / spec.cache).records
    present = sorted({r.device.key for r in records})
    if not present:
        raise TuneError(f"{spec.name} has no tuned records in {spec.cache}; fix: run `doit tune {spec.name}` first")
    wanted = [d.strip() for d in devices.split(",") if d.strip()]
    unknown = [d for d in wanted if d not in present]
    if unknown:
        raise TuneError(f"{spec.name}: no records for device {', '.join(unknown)} in {spec.cache} "
                        f"(it has: {', '.join(present)}); fix: pass --device with one of those")
    if not wanted:
        wanted = [d for d in present if d != INTERPRETER] or present
    return select_subset(spec.name, [r for r in records if r.device.key in wanted], tolerance,
                         spec.space.size())


class _exclusive_run:
    """One ``doit tune`` per tree at a time: a second one refuses instead of racing the first."""

    def __init__(self, work_dir: Path) -> None:
        self.path = work_dir / "run.lock"
        self.handle = None

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.path, "a+")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.seek(0)
            holder = self.handle.read().strip() or "another process"
            self.handle.close()
            raise InvalidCommand(f"another doit tune is running in this tree ({holder}); "
                                 f"wait for it to finish, then run again") from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(f"pid {os.getpid()}")
        self.handle.flush()
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()
        return False
