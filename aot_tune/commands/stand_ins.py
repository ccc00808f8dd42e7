"""Stand-ins for the plugin modules doit loads through aot_tune's entry points, where aot-tune is
installed without its ``tune`` extra (and doit came from elsewhere).

Entry points are registered whatever extras were installed, and doit loads plugins it lists
(``doit help`` loads every command; ``list`` is aot_tune's) without catching their import errors:
the real modules, which import the pipeline, would break doit in every other project. Each
stand-in command says in one line what to install; ``list`` stays doit's own outside a folder
with a tuning.yaml and no dodo.py.
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

from doit.cmd_base import Command, TaskLoader2
from doit.cmd_list import List
from doit.exceptions import InvalidCommand, InvalidDodoFile


def _line(bin_name: str, name: str) -> str:
    from aot_tune.commands import missing_pipeline, not_installed

    program = bin_name if bin_name.replace("_", "").isalnum() else "doit"  # `python -m doit` names itself -m
    return not_installed(f"{program} {name}", missing_pipeline())


class NeedsPipeline(Command):
    """Any aot_tune command without the pipeline: parses nothing, runs nothing, says what to install."""

    doc_usage = ""
    doc_description = None
    cmd_options = ()

    def parse_execute(self, in_args):
        raise InvalidCommand(_line(self.bin_name, self.name))


class ListOrNeedsPipeline(List):
    """doit's own ``list``, except in a tuning.yaml project (the one aot_tune's list is for)."""

    name = "list"

    def execute(self, params, args):
        if Path("tuning.yaml").is_file() and not Path("dodo.py").exists():
            raise InvalidCommand(_line(self.bin_name, self.name))
        return super().execute(params, args)


class LoaderNeedsPipeline(TaskLoader2):
    """The ``[tool.doit] loader = "aot_tune"`` loader without the pipeline."""

    def setup(self, opt_values):
        pass

    def load_doit_config(self):
        raise InvalidDodoFile(_line("doit", "(loader aot_tune)"))

    def load_tasks(self, cmd, pos_args):
        raise InvalidDodoFile(_line("doit", "(loader aot_tune)"))


def _command(name: str, attr: str) -> type:
    from aot_tune.commands import INSTALL

    if name == "list":
        return ListOrNeedsPipeline
    return type(attr, (NeedsPipeline,), {"name": name, "doc_purpose": f"(not installed: {INSTALL})",
                                         "__module__": __name__})


def install(commands: dict[str, str], loader: str) -> None:
    """Put a stand-in module for each plugin module in ``sys.modules`` (none is imported)."""
    classes: dict[str, dict[str, object]] = {}
    for name, location in commands.items():
        module, attr = location.split(":")
        classes.setdefault(module, {})[attr] = _command(name, attr)
    module, attr = loader.split(":")
    classes.setdefault(module, {})[attr] = LoaderNeedsPipeline
    for module, attrs in classes.items():
        if module not in sys.modules:
            stand_in = types.ModuleType(module, "stand-in: aot-tune's [tune] extra is not installed")
            stand_in.__dict__.update(attrs)
            sys.modules[module] = stand_in
