"""``doit check``: exit 1 when a checked-in table is stale, incomplete or out of step with its cache,
or when a device the manifest declares, or this machine's GPU, has no table."""
from __future__ import annotations

from doit.cmd_base import Command
from doit.exceptions import InvalidCommand

from aot_tune.commands.options import HelpOption, opt_manifest
from aot_tune.errors import TuneError

opt_toolchain = {
    "name": "toolchain", "long": "toolchain", "type": str, "default": "recorded",
    "help": "recorded: judge each record with the triton/torch it was measured with; installed: also flag "
            "records measured with other versions than the installed ones [default: %(default)s]",
}


class CheckCommand(HelpOption, Command):
    """Exit 1 when a checked-in table is stale or incomplete; for CI machines without a GPU."""

    name = "check"
    doc_purpose = "check that generated tables are in sync with kernels, manifest and toolchain"
    doc_usage = ""
    doc_description = ("Prints tuned/stale/missing per kernel and device; exits 1 and names the kernels\n"
                       "to retune when anything is stale or missing, or when a device listed under\n"
                       "devices: in tuning.yaml, or this machine's GPU, has no table. Needs no GPU.")
    cmd_options = (opt_manifest, opt_toolchain)

    def execute(self, params, args):
        from aot_tune.bench.local.detect import detect
        from aot_tune.tables.check import TOOLCHAIN_MODES, check
        from aot_tune.manifest import load_manifest

        if params["toolchain"] not in TOOLCHAIN_MODES:
            raise InvalidCommand(f"--toolchain must be one of {', '.join(TOOLCHAIN_MODES)}")
        try:
            manifest = load_manifest(params["manifest"])
            local = detect("auto")  # what `doit tune` would bench on here; the interpreter is not required
            report = check(manifest, params["toolchain"], local.key if local.backend == "cuda" else None)
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        print(report.render())
        return 0 if report.ok else 1
