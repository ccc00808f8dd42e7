"""``doit record -- COMMAND ...``: run a workload with its autotuned launches recorded into tuning.yaml."""
from __future__ import annotations

from doit.cmd_base import Command
from doit.exceptions import InvalidCommand

from aot_tune.commands.options import HelpOption, opt_manifest
from aot_tune.errors import TuneError, program


class RecordCommand(HelpOption, Command):
    """Run the command with every Triton autotuner recorded, then fold its launches into the manifest."""

    name = "record"
    doc_purpose = "record a workload's autotuned kernel launches into tuning.yaml entries"
    doc_usage = "[--manifest tuning.yaml] -- COMMAND [ARG ...]"
    doc_description = ("Runs COMMAND (e.g. python train_step.py) with every Triton autotuner in its Python\n"
                       "processes watched: each distinct launch (kernel, key, arguments) is recorded once, and\n"
                       "launched with the library's cached config or its first one, never benchmarked. The\n"
                       "launches become tuning.yaml entries (the manifest is created if missing) and\n"
                       "recordings/<entry>.json beside it; `doit tune` then tunes them, and\n"
                       "aot_tune.use_tables('generated') gives the tables to the library's autotuners\n"
                       "(docs/recording.md).")
    cmd_options = (opt_manifest,)

    def execute(self, params, args):
        from aot_tune.record.run import main_lines, record

        command = list(args)
        if command and command[0] == "--":
            command = command[1:]
        if not command:
            raise InvalidCommand(f"record needs the command to run after '--', e.g. "
                                 f"{program()} record -- python train_step.py")
        try:
            result = record(command, params["manifest"])
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        print("\n".join(main_lines(result, params["manifest"])), flush=True)
        return result.returncode
