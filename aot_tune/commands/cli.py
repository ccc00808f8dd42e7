"""``aot_tune <command>`` and ``python -m aot_tune <command>``: doit with aot_tune's loader, commands
and defaults, in any folder with a tuning.yaml. It needs no ``[tool.doit]`` settings and no
install (a checkout on PYTHONPATH is enough), so the commands (``aot_tune.commands.COMMANDS``)
are registered here as well as through the entry points in pyproject.toml (a test keeps the two
lists equal). The console script is ``aot_tune.commands:main``, which comes here once it knows
the pipeline is installed.
"""
from __future__ import annotations

import sys

from doit.cmd_help import Help
from doit.cmd_info import Info
from doit.doit_cmd import DoitMain
from doit.plugin import PluginDict, PluginEntry

from aot_tune.commands import COMMANDS
from aot_tune.commands.loader import ManifestLoader


class AotTuneHelp(Help):
    """doit's ``help``, introduced as aot_tune (it is doit's own under ``doit help``)."""

    name = "help"

    def print_usage(self, cmds):
        print(f"{self.bin_name} -- ahead-of-time tuning of Triton kernels (tuning.yaml -> generated/<kernel>.py)")
        print("")
        print("Commands")
        for cmd_name in sorted(cmds):
            print(f"  {self.bin_name} {cmd_name:16s}  {cmds[cmd_name].doc_purpose}")
        print("")
        print(f"  {self.bin_name} help <command>     a command's options (also: {self.bin_name} <command> --help)")


class AotTuneMain(DoitMain):
    """doit's command line with the manifest loader, and of doit's own commands only those that
    read the tasks without running them (``tune`` runs them)."""

    BIN_NAME = "aot_tune"
    DOIT_CMDS = (AotTuneHelp, Info)

    def run(self, all_args):
        args = list(all_args)
        if not args or args[0] in ("--help", "-h"):
            args = ["help"]
        elif "--help" in args[1:args.index("--") if "--" in args else None] and not args[0].startswith("-"):
            args = ["help", args[0]]  # `aot_tune list --help` as `aot_tune help list`, for every command
        known = self.get_cmds()
        if not args[0].startswith("-") and args[0] not in known:
            print(f"ERROR: unknown command '{args[0]}'; fix: use one of {', '.join(sorted(known))} "
                  f"(`{self.BIN_NAME} help` describes them)", file=sys.stderr)
            return 3
        return super().run(args)

    def get_cmds(self):
        """These commands only: not the entry points of whatever aot_tune is installed besides
        the one running (a checkout on PYTHONPATH may differ from it), nor other doit plugins."""
        cmds = PluginDict({cls.get_name(): cls for cls in self.DOIT_CMDS})
        cmds.update((name, PluginEntry("COMMAND", name, location)) for name, location in COMMANDS.items())
        return cmds


def main(argv: list[str] | None = None, program: str = "aot_tune") -> int:
    """The commands; ``program`` is what the user typed (``python -m aot_tune``), for help and errors.
    A project's pyproject.toml or doit.cfg may still set options."""
    cli = AotTuneMain(task_loader=ManifestLoader())
    cli.BIN_NAME = program
    return cli.run(sys.argv[1:] if argv is None else argv)
