"""``to: module:function``: a project's own exporter, imported from the manifest's folder and
called once per file with plain data, so it needs nothing of aot_tune to be written or tested."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aot_tune.build.loading import resolve
from aot_tune.cache import printable
from aot_tune.errors import TuneError
from aot_tune.manifest import KernelSpec
from aot_tune.select import DeviceTable, TableEntry


def exporter_entries(spec: KernelSpec, entries: Sequence[TableEntry]) -> list[dict]:
    """What an exporter gets as ``entries``: plain dicts, fresh for every call."""
    return [{"key": dict(zip(spec.key, e.key)), "dtype": e.dtype, "config": dict(e.config), "time_s": e.time_s}
            for e in entries]


def run_exporter(root: Path, ref: str, spec: KernelSpec, table: DeviceTable, device_name: str,
                 entries: Sequence[TableEntry], path: str) -> str:
    """The file's text as ``ref``'s ``function(entries, info)`` returns it; anything else is one line."""
    where = f"exporter {ref} of kernel {spec.name} (for {path})"
    try:
        function = resolve(str(root), ref)
    except TuneError as exc:
        raise TuneError(f"{where}: {exc}") from None
    if not callable(function):
        raise TuneError(f"{where}: {ref} is a {type(function).__name__}, not a function; fix: name a "
                        f"function(entries, info) -> str in tuning.yaml's to:")
    info = {"kernel": spec.name, "device": table.key, "device_name": device_name,
            "compute_capability": table.compute_capability, "triton": table.triton}
    try:
        text = function(exporter_entries(spec, entries), info)
    except Exception as exc:  # the user's code: any failure is one line naming it
        detail = printable(" ".join(str(exc).split()))[:200]
        raise TuneError(f"{where} raised {type(exc).__name__}: {detail}; fix: correct the exporter (it gets "
                        f"entries and info as docs/reference/tuning-yaml.md describes)") from None
    if not isinstance(text, str):
        raise TuneError(f"{where} returned a {type(text).__name__}, not the file's text; fix: return a str")
    return text
