"""``doit adopt MODULE:KERNEL``: a starting tuning.yaml entry for a ``@triton.autotune`` kernel."""
from __future__ import annotations

from pathlib import Path

from doit.cmd_base import Command
from doit.exceptions import InvalidCommand

from aot_tune.commands.options import HelpOption, opt_manifest
from aot_tune.errors import TuneError, program

opt_write = {
    "name": "write", "long": "write", "type": bool, "default": False,
    "help": "append the entry to the manifest (created if missing), and a launch function written for a kernel "
            "of an installed package to tuning_launch.py beside it, instead of printing them",
}


class AdoptCommand(HelpOption, Command):
    """Print (or append) the entry aot_tune.adopt.adopt writes."""

    name = "adopt"
    doc_purpose = "write a starting tuning.yaml entry for an existing @triton.autotune kernel"
    doc_usage = "MODULE:KERNEL"
    doc_description = ("Takes the kernel's configs and key from its decorator; inputs and shapes are left as\n"
                       "FILL_IN placeholders, and so is the launch of a kernel of this project. For a kernel of\n"
                       "an installed package, the launch is a copy of the package's own wrapper in\n"
                       "tuning_launch.py, launching through aot_tune.untuned (docs/adopting.md).")
    cmd_options = (opt_manifest, opt_write)

    def execute(self, params, args):
        from aot_tune.adopt import adopt, write_adoption

        if len(args) != 1:
            raise InvalidCommand(f"adopt takes one MODULE:KERNEL, e.g. {program()} adopt mylib.ops:my_kernel")
        try:
            adoption = adopt(args[0], Path(params["manifest"]).parent)
            if params["write"]:
                launch = write_adoption(params["manifest"], adoption)
                also = f", and {adoption.launch.function} to {launch}" if launch is not None else ""
                print(f"aot_tune: kernels.{adoption.name} appended to {params['manifest']}{also}; "
                      f"fill in its FILL_IN values")
            else:
                print(adoption.printed(), end="")
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        return 0
