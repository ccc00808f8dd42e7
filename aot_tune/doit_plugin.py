"""doit integration: a task loader that reads tuning.yaml, and the ``tune`` command.

``doit tune [KERNEL...]`` is a command (not a task) so that ``doit tune -n 8`` and
``[tool.doit.commands.tune]`` work. It runs doit's parallel runner on threads: task actions only
hand work to the worker pools (aot_tune.executors), which do the heavy lifting in processes.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from doit.cmd_base import Command, TaskLoader2
from doit.cmd_run import Run, opt_num_process, opt_parallel_type
from doit.exceptions import InvalidCommand, InvalidDodoFile
from doit.loader import generate_tasks

from .errors import TuneError
from .executors import Executors
from .hardware import BACKENDS, detect
from .plan import WORK_DIR, build_plan
from .stages import TuneSession, eprint

opt_manifest = {
    "name": "manifest", "long": "manifest", "type": str, "default": "tuning.yaml",
    "help": "path of the tuning manifest [default: %(default)s]",
}
opt_backend = {
    "name": "bench_backend", "long": "bench-backend", "type": str, "default": "auto",
    "help": f"where to benchmark: {', '.join(BACKENDS)} (auto: cuda when a GPU is visible) [default: %(default)s]",
}


class ManifestLoader(TaskLoader2):
    """Builds the stage tasks from the manifest; kernels named on the command line narrow it."""

    cmd_options = (opt_manifest, opt_backend)

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
        from . import rules
        from .manifest import load_manifest
        from .rules import bench, compile, generate, merge

        try:
            manifest = load_manifest(self.options.get("manifest", "tuning.yaml"))
            device = detect(self.options.get("bench_backend", "auto"))
            kernels = manifest.select(self.kernel_names) if self.kernel_names else manifest.kernels
            plan = build_plan(manifest, device, kernels)
        except TuneError as err:
            raise InvalidDodoFile(str(err)) from None
        if device.notice:
            eprint(f"aot_tune: {device.notice}")
        plan.work_dir.mkdir(parents=True, exist_ok=True)
        jobs = int(self.options.get("num_process") or self.jobs)
        self.session = TuneSession(plan, Executors(device, plan.triton_cache_dir, jobs))
        if getattr(cmd, "execute_tasks", False):  # `doit list` shows what is known, and runs nothing
            try:
                self.session.specialize()
            except TuneError as err:
                raise InvalidDodoFile(str(err)) from None
        task_list = []
        for stage in (compile, bench, merge, generate):
            task_list.extend(generate_tasks(stage.__name__, stage.tasks(self.session), stage.__doc__))
        assert rules.STAGES == ("compile", "bench", "merge", "generate")
        return task_list


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
        with _exclusive_run(Path(params.get("manifest") or "tuning.yaml").resolve().parent / WORK_DIR):
            try:
                result = super().execute(params, [])
            finally:
                session = self.loader.session
                if session is not None:
                    session.executors.close()
                    summary = session.summary()
                    if summary:
                        eprint(summary)
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
        from .check import TOOLCHAIN_MODES, check
        from .manifest import load_manifest

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
        from .manifest import load_manifest
        from .merge import cache_files, merge_into_project

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
        from .manifest import load_manifest
        from .subset import render_report, render_triton

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
    from . import cache as cache_io
    from .devices import INTERPRETER
    from .subset import select_subset

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
