"""``doit export``: write the kernels' ``exports:`` (their tables in libraries' formats) from the
caches alone, with no GPU and no tuning: after editing ``exports:``, or when ``doit check`` says an
export is missing or stale."""
from __future__ import annotations

from pathlib import Path

from doit.cmd_base import Command
from doit.exceptions import InvalidCommand

from aot_tune.commands.options import HelpOption, exclusive_run, opt_manifest
from aot_tune.errors import TuneError
from aot_tune.runs import WORK_DIR


class ExportCommand(HelpOption, Command):
    """Write the exports tuning.yaml declares, from the checked-in caches."""

    name = "export"
    doc_purpose = "write the tables in the formats libraries read (exports: in tuning.yaml) from the caches"
    doc_usage = "[KERNEL ...]"
    doc_description = ("For each kernel named (default: every kernel with exports:),\n"
                       "writes each file its exports: fill in from its cache, e.g.\n"
                       "configs/E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json.\n"
                       "Needs no GPU. Never writes over a file aot_tune did not write.")
    cmd_options = (opt_manifest,)

    def execute(self, params, args):
        from aot_tune import cache as cache_io, exports
        from aot_tune.manifest import load_manifest

        manifest_path = Path(params["manifest"]).resolve()
        try:
            manifest = load_manifest(params["manifest"])
            kernels = [spec for spec in manifest.select(args) if spec.exports]
            if not kernels:
                named = f"kernel{'s' * (len(args) != 1)} {', '.join(args)}" if args else "no kernel"
                raise TuneError(f"{named} of {manifest.path.name} declares exports:; fix: add e.g. exports: "
                                f"[{{to: json, path: \"configs/{{kernel}},device_name={{device_name}}.json\"}}] "
                                f"(docs/reference/tuning-yaml.md)")
            lines = []
            with exclusive_run(manifest_path.parent / WORK_DIR):
                for spec in kernels:
                    cache = cache_io.read_cache(manifest.root / spec.cache, spec)
                    files = exports.prepare(manifest.root, spec, cache)
                    written = set(files.write())
                    lines += [f"{'wrote' if f.path in written else 'unchanged'} {f.path}" for f in files.files]
                    if not files.files:
                        lines.append(f"{spec.name}: no table in {spec.cache} yet: nothing to export "
                                     f"(run `doit tune {spec.name}`)")
        except TuneError as err:
            raise InvalidCommand(str(err)) from None
        print("\n".join(lines))
        return 0
