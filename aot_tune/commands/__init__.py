"""The doit commands: the only modules that import doit.

``loader`` reads tuning.yaml into the stage tasks of rules/; ``tune`` (``dry_run`` is its
``--dry-run``), ``check``, ``export``, ``merge_caches`` (merge-caches, drop-device), ``report``
(report, subset), ``adopt`` and ``record`` are the commands, registered as doit plugins in pyproject.toml;
``options`` holds what they share; ``cli`` is ``aot_tune <command>``.

They need the tuning pipeline, the ``aot-tune[tune]`` extra (doit, pyyaml, jinja2, protobuf); a
plain ``pip install aot-tune`` is the runtime alone. Without the extra, ``main`` (``aot_tune`` and
``python -m aot_tune``) says in one line what to install, and so does every command doit reaches
through the entry points, which pip registers with or without the extra: ``stand_ins`` puts a
stand-in for each plugin module in its place, so doit never fails to load a plugin (``doit list``
and ``doit help`` keep working in other doit projects).
"""
from __future__ import annotations

import sys
from importlib.util import find_spec

#: The aot_tune commands, as pyproject.toml's ``doit.COMMAND`` entry points name them (a test
#: keeps the two equal); ``aot_tune.commands.cli`` registers them where nothing is installed.
COMMANDS = {
    "tune": "aot_tune.commands.tune:TuneCommand",
    "check": "aot_tune.commands.check:CheckCommand",
    "export": "aot_tune.commands.export:ExportCommand",
    "merge-caches": "aot_tune.commands.merge_caches:MergeCachesCommand",
    "drop-device": "aot_tune.commands.merge_caches:DropDeviceCommand",
    "report": "aot_tune.commands.report:ReportCommand",
    "subset": "aot_tune.commands.report:SubsetCommand",
    "adopt": "aot_tune.commands.adopt:AdoptCommand",
    "record": "aot_tune.commands.record:RecordCommand",
    "list": "aot_tune.commands.listing:StageList",
}
#: The task loader, as pyproject.toml's ``doit.LOADER`` entry point names it.
LOADER = "aot_tune.commands.loader:ManifestLoader"

#: What the commands import that the runtime does not: the ``tune`` extra's packages.
PIPELINE_MODULES = ("doit", "yaml", "jinja2", "google.protobuf")
INSTALL = "pip install 'aot-tune[tune]'"


def _importable(name: str) -> bool:
    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):  # a missing parent package, or a module blocked in sys.modules
        return False


def missing_pipeline() -> list[str]:
    """The pipeline's modules that cannot be imported here (found without importing them)."""
    return [name for name in PIPELINE_MODULES if not _importable(name)]


def not_installed(command: str, missing: list[str]) -> str:
    """The one line a command prints where the ``tune`` extra is not installed."""
    return (f"{command} needs aot_tune's tuning pipeline, which is not installed here (no module "
            f"{', '.join(missing)}): `pip install aot-tune` is the runtime only; fix: {INSTALL}")


def main(argv: list[str] | None = None, program: str = "aot_tune") -> int:
    """``aot_tune <command>``: the commands, or one line saying what to install (exit 3, as doit's errors)."""
    args = sys.argv[1:] if argv is None else argv
    missing = missing_pipeline()
    if missing:
        command = f"{program} {args[0]}" if args and not args[0].startswith("-") else program
        print(f"ERROR: {not_installed(command, missing)}", file=sys.stderr)
        return 3
    from aot_tune.commands.cli import main as run

    return run(args, program)


if "doit" in sys.modules and missing_pipeline():  # imported by doit, as a plugin, without the extra
    from aot_tune.commands.stand_ins import install

    install(COMMANDS, LOADER)
