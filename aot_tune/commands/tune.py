"""``doit tune [KERNEL...]``: a command (not a task) so that ``doit tune -n 8`` and
``[tool.doit.commands.tune]`` work. It runs doit's parallel runner on threads: task actions only
hand work to the worker pools (aot_tune.workers.pools), which do the heavy lifting in processes.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from doit.cmd_base import opt_backend, opt_depfile
from doit.cmd_run import Run, opt_always, opt_num_process, opt_parallel_type
from doit.exceptions import InvalidCommand
from doit.reporter import ConsoleReporter

from aot_tune.bench.local.worker import PROFILE_ENV
from aot_tune.commands.dry_run import dry_run
from aot_tune.commands.loader import ManifestLoader
from aot_tune.commands.options import DOIT_DB, HelpOption, exclusive_run
from aot_tune.errors import program
from aot_tune.pipeline.calibration import remember
from aot_tune.runs import WORK_DIR
from aot_tune.runs.log import append_run
from aot_tune.runs.progress import eprint
from aot_tune.runs.sampler import sampled
from aot_tune.runs.stats import process_age_s
from aot_tune.runs.summary import end_to_end, run_record, run_summary

#: doit's options, as tune means them (the help text matches the README).
TUNE_OPTIONS = {
    opt_num_process["name"]: {
        "default": os.cpu_count() or 1,
        "help": "compile workers and parallel tasks, and a thread more for each bench task that waits "
                "for its compiles [default: %(default)s, the CPU cores]"},
    opt_parallel_type["name"]: {
        "default": "thread",
        "help": "thread only: the tasks hand work to aot_tune's own worker processes (-P process is "
                "refused) [default: %(default)s]"},
    opt_always["name"]: {
        "help": "run every task, up to date or not; work whose inputs did not change leaves its "
                "outputs (caches, generated modules) untouched [default: %(default)s]"},
    opt_depfile["name"]: {"default": DOIT_DB, "help": "doit's record of finished tasks [default: "
                          "%(default)s, next to the manifest]"},
    opt_backend["name"]: {"default": "sqlite3"},
}


opt_dry_run = {
    "name": "dry_run", "long": "dry-run", "type": bool, "default": False,
    "help": "print the plan (compiles, captures, bench tasks and measurements per kernel and device) and the "
            "predicted wall time, and stop: nothing is compiled, measured or written",
}


class TuneReporter(ConsoleReporter):
    """doit's console output without a line per up-to-date task; counts what ran."""

    def __init__(self, outstream, options) -> None:
        super().__init__(outstream, options)
        self.ran = 0

    def execute_task(self, task):
        self.ran += bool(task.actions)  # a stage's group task has none, and always "runs"
        super().execute_task(task)

    def skip_uptodate(self, task):
        pass


class TuneCommand(HelpOption, Run):
    """Run the tuning pipeline: compile, bench, merge, generate."""

    name = "tune"
    doc_purpose = "tune the kernels of tuning.yaml ahead of time (all, or those named)"
    doc_usage = "[KERNEL ...]"
    doc_description = ("Compiles every candidate config on all CPU cores, benchmarks each shape on the local GPUs "
                       "(or the Triton interpreter), merges the results into the protobuf caches and writes "
                       "generated/<kernel>.py. Only stale work runs; a run with nothing stale says so in one line.")
    cmd_options = (*({**opt, **TUNE_OPTIONS.get(opt["name"], {})} for opt in Run.cmd_options), opt_dry_run)
    base_options = tuple({**opt, **TUNE_OPTIONS.get(opt["name"], {})} for opt in Run.base_options)

    def __init__(self, task_loader=None, **kwargs) -> None:
        if not isinstance(task_loader, ManifestLoader):
            task_loader = ManifestLoader()
        super().__init__(task_loader=task_loader, **kwargs)

    def execute(self, params, args):
        if params.get("par_type") == "process":
            raise InvalidCommand(f"{program()} tune runs its own worker processes; -P process is not supported, "
                                 "drop the option (threads are the default)")
        started, result = time.time(), None
        launched = self.loader.launch_s = process_age_s()  # the forecast's, as the dry run's is the run's
        if params.get("dry_run"):
            self.loader.setup(params)
            return dry_run(self.loader, args)
        self.loader.kernel_names = tuple(args)
        work_dir = Path(params.get("manifest") or "tuning.yaml").resolve().parent / WORK_DIR
        reporter = None
        if params["reporter"] == "console" and not isinstance(params["outfile"], str):
            reporter = params["reporter"] = TuneReporter(params["outfile"],
                                                         {"failure_verbosity": params["failure_verbosity"]})
        with exclusive_run(work_dir), sampled(os.environ.get(PROFILE_ENV, "")):
            try:
                result = super().execute(params, [])
                if self.loader.session is not None:  # the compiles no bench needed end with the run
                    failed = self.loader.session.finish_compiles()
                    if failed:
                        eprint(f"aot_tune: compile tasks failed: {failed}")
                        result = result or 1
            finally:
                session = self.loader.session
                if session is not None:
                    session.stop_compiles()
                    session.executors.close()
                    stats = session.ended()
                    stats.launch_s = launched
                    summary = run_summary(stats)
                    if summary:
                        eprint(summary + "\n" + end_to_end(stats, time.time() - started))
                    if result == 0 and reporter is not None and not reporter.ran:
                        print(nothing_to_do(session.plan, program()), file=reporter.outstream, flush=True)
                    run = run_record(stats, started, time.time(), ok=result == 0)
                    if run is not None:
                        append_run(work_dir, run)
                        remember(run)  # the machine's history, which forecasts other projects' runs
        return result


def nothing_to_do(plan, program: str = "doit") -> str:
    """The one line of a run that found every table up to date."""
    kernels = len(plan.kernels)
    tables = {(kp.spec.name, unit.device) for kp in plan.kernels for unit in kp.bench_units}
    entries = len({(kp.spec.name, u.device, u.dtype, kp.spec.key_of(u.shape))  # shapes of one key: one entry
                   for kp in plan.kernels for u in kp.bench_units})
    return (f"nothing to do: {len(tables)} table{'s' * (len(tables) != 1)} up to date ({kernels} "
            f"kernel{'s' * (kernels != 1)}, {entries} entr{'ies' if entries != 1 else 'y'} on "
            f"{', '.join(sorted(plan.device_keys))}; {program} tune -a runs every task again)")
