"""The command list has one source: what aot_tune.commands names and aot_tune.commands.cli registers
(for `python -m aot_tune`, no install needed) is what pyproject.toml's entry points register (for
`doit <command>`)."""
from __future__ import annotations

import importlib

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from tunerun import REPO

import aot_tune.commands
from aot_tune.commands import cli
from aot_tune.commands.loader import ManifestLoader
from aot_tune.commands.options import HelpOption


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_the_entry_points_and_the_programmatic_registration_agree():
    project = _pyproject()["project"]
    assert project["entry-points"]["doit.COMMAND"] == cli.COMMANDS
    assert project["entry-points"]["doit.LOADER"] == {
        "aot_tune": f"{ManifestLoader.__module__}:{ManifestLoader.__name__}"} == {"aot_tune": aot_tune.commands.LOADER}
    assert project["scripts"] == {"aot_tune": f"{aot_tune.commands.__name__}:{aot_tune.commands.main.__name__}"}


def test_every_command_is_named_as_registered_and_takes_help():
    for name, location in cli.COMMANDS.items():
        module, attr = location.split(":")
        command = getattr(importlib.import_module(module), attr)
        assert command.get_name() == name
        assert issubclass(command, HelpOption), name


def test_no_command_and_an_unknown_one(capsys):
    assert cli.main([]) == 0
    listed = capsys.readouterr().out
    assert all(f"aot_tune {name} " in listed for name in cli.COMMANDS)
    assert "aot_tune run " not in listed  # tune runs the tasks, with its lock and summary
    assert cli.main(["retune"]) == 3
    assert "unknown command 'retune'" in capsys.readouterr().err
