"""``doit tune [KERNEL...]``: a command (not a task) so that ``doit tune -n 8`` and
``[tool.doit.commands.tune]`` work. It runs doit's parallel runner on threads: task actions only
hand work to the worker pools (aot_tune.workers.pools), which do the heavy lifting in processes.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from doit.cmd_run import Run, opt_num_process, opt_parallel_type
from doit.exceptions import InvalidCommand

from aot_tune.commands.loader import ManifestLoader
from aot_tune.commands.options import exclusive_run, with_default
from aot_tune.pipeline.plan import WORK_DIR
from aot_tune.pipeline.runlog import append_run
from aot_tune.pipeline.session import eprint


class TuneCommand(Run):
    """Run the tuning pipeline: compile, bench, merge, generate."""

    name = "tune"
    doc_purpose = "tune the kernels of tuning.yaml ahead of time (all, or those named)"
    doc_usage = "[KERNEL ...]"
    doc_description = ("Compiles every candidate config on all CPU cores, benchmarks each shape on the\n"
                       "local GPUs (or the Triton interpreter), merges the results into the protobuf\n"
                       "caches and writes generated/<kernel>.py. Only stale work runs.")
    cmd_options = tuple(
        with_default(opt, os.cpu_count() or 1) if opt is opt_num_process
        else with_default(opt, "thread") if opt is opt_parallel_type
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
        with exclusive_run(work_dir):
            try:
                result = super().execute(params, [])
            finally:
                session = self.loader.session
                if session is not None:
                    session.stop_compiles()
                    session.executors.close()
                    summary = session.summary()
                    if summary:
                        eprint(summary)
                    run = session.run_record(started, time.time(), ok=result == 0)
                    if run is not None:
                        append_run(work_dir, run)
        return result
