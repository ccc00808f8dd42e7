"""``doit merge-caches`` and ``doit drop-device``: the two ways tables change without a measurement,
both explicit: folding in caches tuned elsewhere, and removing a device's tables."""
from __future__ import annotations

from pathlib import Path

from doit.cmd_base import Command
from doit.exceptions import InvalidCommand

from aot_tune.commands.options import HelpOption, exclusive_run, opt_manifest
from aot_tune.errors import TuneError, program
from aot_tune.runs import WORK_DIR


class MergeCachesCommand(HelpOption, Command):
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
            with exclusive_run(manifest_path.parent / WORK_DIR):
                summary = merge_into_project(load_manifest(manifest_path), cache_files(args))
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        print(summary.render())
        return 0


opt_kernels = {
    "name": "kernels", "long": "kernel", "type": str, "default": "",
    "help": "comma-separated kernels whose tables to drop (default: every kernel of the manifest)",
}


class DropDeviceCommand(HelpOption, Command):
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
            raise InvalidCommand(f"drop-device needs the device key(s) to drop, e.g. `{program()} drop-device h200`")
        misplaced = [arg for arg in args if arg.startswith("-")]
        if misplaced:  # doit reads options only before the positional arguments
            raise InvalidCommand(f"{misplaced[0]} came after a device key; fix: put options first, e.g. "
                                 f"`{program()} drop-device --kernel gemm h200`")
        manifest_path = Path(params["manifest"]).resolve()
        try:
            manifest = load_manifest(manifest_path)
            kernels = manifest.select([k.strip() for k in params["kernels"].split(",") if k.strip()])
            with exclusive_run(manifest_path.parent / WORK_DIR):
                summary = drop_devices(manifest, args, kernels)
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        print(summary.render())
        return 0
