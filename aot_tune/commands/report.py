"""``doit report`` and ``doit subset``: what tuning bought, read from the caches (no GPU needed)."""
from __future__ import annotations

import sys
from pathlib import Path

from doit.cmd_base import Command
from doit.exceptions import InvalidCommand

from aot_tune.commands.options import HelpOption, opt_manifest
from aot_tune.errors import TuneError, program

opt_output = {
    "name": "output", "long": "output", "short": "o", "type": str, "default": "report",
    "help": "folder to write index.html and summary.md into [default: %(default)s]",
}


class ReportCommand(HelpOption, Command):
    """Render what tuning bought as a self-contained HTML page and a markdown summary."""

    name = "report"
    doc_purpose = "write an HTML report and a markdown summary of the tuning results (no GPU needed)"
    doc_usage = "[KERNEL ...]"
    doc_description = ("Per kernel and device: tuned vs default config vs vendor per shape (with rates and\n"
                       "floors), tuning time, a heatmap of config parameters against performance, failures by\n"
                       "reason and coverage, from the caches and this tree's .aot_tune/ outputs. Plots need\n"
                       "matplotlib (pip install 'aot-tune[report]').")
    cmd_options = (opt_manifest, opt_output)

    def execute(self, params, args):
        from aot_tune.manifest import load_manifest
        from aot_tune.reports.report import write_report

        try:
            manifest = load_manifest(params["manifest"])
            paths = write_report(manifest, Path(params["output"]), manifest.select(args))
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        except OSError as err:
            raise InvalidCommand(f"cannot write the report into {params['output']}: {err.strerror or err}; "
                                 f"fix: pass a writable folder with --output") from None
        print(f"wrote {paths.html} and {paths.markdown}")
        return 0


opt_tolerance = {
    "name": "tolerance", "long": "tolerance", "type": float, "default": 0.05,
    "help": "how far from its best each entry may end up, e.g. 0.05 for 5%% [default: %(default)s]",
}
opt_devices = {
    "name": "devices", "long": "device", "type": str, "default": "",
    "help": "comma-separated device keys to cover, e.g. h100-sxm,h200 (default: every GPU device with "
            "records; the interpreter only when no GPU has any)",
}
opt_triton = {
    "name": "triton", "long": "triton", "type": bool, "default": False,
    "help": "print the subset as a triton.Config list for @triton.autotune",
}


class SubsetCommand(HelpOption, Command):
    """The fewest configs keeping every tuned entry near its best: a candidate list for @triton.autotune."""

    name = "subset"
    doc_purpose = "pick a small config list that keeps every tuned shape within 5% of its best"
    doc_usage = "[KERNEL ...]"
    doc_description = ("Greedy set cover over the kernel's cache: configs are added until every tuned\n"
                       "(device, dtype, shape) has one within --tolerance of its fastest measured config.\n"
                       "--triton prints them as a triton.Config list for users who keep Triton's autotuner.\n"
                       "With no KERNEL, a kernel without records (for --device) is skipped with a note.")
    cmd_options = (opt_manifest, opt_tolerance, opt_devices, opt_triton)

    def execute(self, params, args):
        from aot_tune.manifest import load_manifest
        from aot_tune.reports.subset import render_report, render_triton

        if not params["tolerance"] >= 0:
            raise InvalidCommand(f"--tolerance must be >= 0 (e.g. 0.05 for 5%), got {params['tolerance']}")
        subsets = []
        try:
            manifest = load_manifest(params["manifest"])
            for spec in manifest.select(args):
                try:
                    subsets.append((spec, _subset(manifest, spec, params["tolerance"], params["devices"])))
                except NoRecords as err:
                    if args:  # named on the command line: the user asked for it
                        raise
                    print(f"skipped: {err}", file=sys.stderr)
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        if not subsets:
            raise InvalidCommand(f"no kernel has tuned records to choose a subset from; fix: run `{program()} tune` first"
                                 + (" on the devices passed to --device" if params["devices"] else ""))
        for spec, subset in subsets:
            if params["triton"]:
                print(render_triton(subset, [name for name, _ in spec.space.params]))
            else:
                print(render_report(subset))
        return 0


class NoRecords(TuneError):
    """A kernel has no records (for the devices asked): an error when it was named, else a note."""


def _subset(manifest, spec, tolerance: float, devices: str):
    from aot_tune import cache as cache_io
    from aot_tune.pipeline.staleness import manifest_changes
    from aot_tune.runtime.devices import INTERPRETER
    from aot_tune.reports.subset import select_subset

    checked = cache_io.read_checked(manifest.root / spec.cache, spec)
    for change in manifest_changes(spec, checked.stale_records(), manifest.path.name):
        print(f"note: stale records left out: {change.line()}", file=sys.stderr)
    records = [r for r, stale in zip(checked.cache.records, checked.stale) if stale is None]
    present = sorted({r.device.key for r in records})
    if not present:
        current = " current" if checked.stale_records() else ""
        raise NoRecords(f"{spec.name} has no{current} tuned records in {spec.cache}; fix: run "
                        f"`{program()} tune {spec.name}` first")
    wanted = [d.strip() for d in devices.split(",") if d.strip()]
    unknown = [d for d in wanted if d not in present]
    if unknown:
        raise NoRecords(f"{spec.name}: no records for device {', '.join(unknown)} in {spec.cache} "
                        f"(it has: {', '.join(present)}); fix: pass --device with one of those")
    if not wanted:
        wanted = [d for d in present if d != INTERPRETER] or present
    return select_subset(spec.name, [r for r in records if r.device.key in wanted], tolerance,
                         spec.space.size())
