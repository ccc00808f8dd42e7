"""``doit adopt MODULE:KERNEL``: a starting tuning.yaml entry for a ``@triton.autotune`` kernel."""
from __future__ import annotations

from doit.cmd_base import Command
from doit.exceptions import InvalidCommand

from aot_tune.commands.options import HelpOption, opt_manifest
from aot_tune.errors import TuneError, program

opt_write = {
    "name": "write", "long": "write", "type": bool, "default": False,
    "help": "append the entry to the manifest (created if missing) instead of printing it",
}


class AdoptCommand(HelpOption, Command):
    """Print (or append) the entry aot_tune.adopt.starting_entry writes."""

    name = "adopt"
    doc_purpose = "write a starting tuning.yaml entry for an existing @triton.autotune kernel"
    doc_usage = "MODULE:KERNEL"
    doc_description = ("Takes the kernel's configs and key from its decorator; launch, inputs and shapes\n"
                       "are left as FILL_IN placeholders (docs/adopting.md).")
    cmd_options = (opt_manifest, opt_write)

    def execute(self, params, args):
        from aot_tune.adopt import starting_entry, write_entry

        if len(args) != 1:
            raise InvalidCommand(f"adopt takes one MODULE:KERNEL, e.g. {program()} adopt mylib.ops:my_kernel")
        try:
            name, entry = starting_entry(args[0])
            if params["write"]:
                write_entry(params["manifest"], name, entry)
                print(f"aot_tune: kernels.{name} appended to {params['manifest']}; fill in its FILL_IN values")
            else:
                print(entry, end="")
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        return 0
