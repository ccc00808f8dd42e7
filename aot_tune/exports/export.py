"""Exports: a kernel's tables in the formats libraries read, rendered from the same picks as its
generated module (aot_tune.select.selected_tables), so the two always agree.

``render`` gives the files a kernel's ``exports:`` fill in (one per distinct path); ``prepare``
also checks each may be written (inside the project, never over a file aot_tune did not write,
aot_tune.exports.ownership) before anything is; ``problems`` is what ``doit check`` reports."""
from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path

from aot_tune.errors import TuneError
from aot_tune.exports.json_format import json_text
from aot_tune.exports.ownership import ours, record, recorded
from aot_tune.exports.user import run_exporter
from aot_tune.fileio import write_atomic
from aot_tune.manifest import KernelSpec
from aot_tune.manifest.exports import fill, path_value, placeholders
from aot_tune.manifest.output_paths import MAX_PATH_PART
from aot_tune.select import DeviceTable, TableEntry, selected_tables
from aot_tune.tuning_schema import TuningCache


@dataclass(frozen=True)
class ExportFile:
    """One file of a kernel's exports: its path (relative to the manifest's folder) and its text."""

    kernel: str
    path: str
    text: str

    @property
    def data(self) -> bytes:
        return self.text.encode("utf-8")


@dataclass(frozen=True)
class PreparedExports:
    """A kernel's export files, each checked to be ours to write; ``write`` writes the changed ones."""

    root: Path
    files: tuple[ExportFile, ...]

    def write(self) -> list[str]:
        """Write atomically the files whose content changed; returns their paths."""
        written = []
        for f in self.files:
            if _read(self.root / f.path) != f.data:
                write_atomic(self.root / f.path, f.data)
                written.append(f.path)
        record(self.root, {f.path: f.data for f in self.files})
        return written


def render(root: Path, spec: KernelSpec, cache: TuningCache) -> tuple[ExportFile, ...]:
    """Every file ``spec``'s exports fill in from the cache's picks, sorted by path."""
    if not spec.exports:
        return ()
    groups: dict[str, tuple[int, DeviceTable, list[TableEntry]]] = {}
    tables = selected_tables(cache, spec.name, spec.key).values()
    for index, export in enumerate(spec.exports):
        for table in tables:
            for entry in table.entries:
                path = posixpath.normpath(fill(export.path, _values(spec, table, entry)))
                first, first_table, entries = groups.setdefault(path, (index, table, []))
                if (first, first_table.key) != (index, table.key):
                    raise TuneError(f"kernel {spec.name}'s exports {spec.exports[first].path!r} "
                                    f"({first_table.key}) and {export.path!r} ({table.key}) both fill in {path}; "
                                    f"fix: make the paths differ in tuning.yaml (name {{device}} or {{dtype}})")
                entries.append(entry)
    files = []
    for path, (index, table, entries) in sorted(groups.items()):
        export = spec.exports[index]
        if export.to == "json":
            text = json_text(spec.name, path, spec.key, placeholders(export.path), entries)
        else:
            text = run_exporter(root, export.to, spec, table, path_value(table.name), entries, path)
        files.append(ExportFile(spec.name, path, text))
    return tuple(files)


def _values(spec: KernelSpec, table: DeviceTable, entry: TableEntry) -> dict[str, object]:
    return {"kernel": spec.name, "device": table.key, "device_name": table.name, "dtype": entry.dtype,
            "triton": table.triton, **dict(zip(spec.key, entry.key))}


def prepare(root: Path, spec: KernelSpec, cache: TuningCache) -> PreparedExports:
    """The kernel's export files once each is checked to be ours to write; the first that is not
    stops with one line, before anything is written."""
    files = render(root, spec, cache)
    owned = recorded(root) if files else {}
    real_root = root.resolve()
    for f in files:
        target = root / f.path
        long = [part for part in f.path.split("/") if len(part.encode()) > MAX_PATH_PART]
        if long:
            raise TuneError(f"{f.path}: a file name of {len(long[0].encode())} bytes, over {MAX_PATH_PART}; "
                            f"fix: shorten the export's path in tuning.yaml")
        if not target.resolve().is_relative_to(real_root):
            raise TuneError(f"{f.path} leads outside the project folder (through a link); nothing of kernel "
                            f"{spec.name}'s exports was written; fix: remove the link or point the export elsewhere")
        if target.is_dir():
            raise TuneError(f"{f.path} is a folder, where kernel {spec.name} exports a file; fix: move the folder "
                            f"away, or point the export's path: in tuning.yaml elsewhere")
        current = _read(target)
        if current is not None and not ours(f.path, current, f.data, owned):
            raise TuneError(f"{f.path} was not written by aot_tune (it is not what kernel {spec.name}'s cache "
                            f"exports, and .aot_tune/exports.json has no record of writing it); nothing of "
                            f"{spec.name}'s exports was written; fix: move it away (or git rm it) to let aot_tune "
                            f"write it, or point the export's path: in tuning.yaml at another file")
    return PreparedExports(root, files)


def write(root: Path, spec: KernelSpec, cache: TuningCache) -> list[str]:
    """Write the kernel's exports (what ``doit export`` does); returns the paths that changed."""
    return prepare(root, spec, cache).write()


def claim(root: Path, spec: KernelSpec, cache: TuningCache) -> None:
    """Record the export files that hold what ``cache`` exports, before a run replaces that cache:
    in a fresh clone (no record) they are provably ours, and the run may then update them."""
    try:
        files = render(root, spec, cache)
    except TuneError:
        return  # the write that follows says what is wrong
    record(root, {f.path: f.data for f in files if _read(root / f.path) == f.data})


def remove_dropped(root: Path, spec: KernelSpec, before: TuningCache, after: TuningCache) -> list[str]:
    """Remove the export files ``before`` fills in and ``after`` does not (a device's tables dropped on
    purpose), where they still hold what ``before`` exports; returns their paths. Nothing else removes
    an export: a file of another triton (``{triton}`` in its path) stays for the libraries that read it."""
    try:
        kept = {f.path for f in render(root, spec, after)}
        gone = [f for f in render(root, spec, before) if f.path not in kept and _read(root / f.path) == f.data]
    except TuneError:
        return []
    for f in gone:
        (root / f.path).unlink()
    return [f.path for f in gone]


def stale(root: Path, spec: KernelSpec, cache: TuningCache) -> bool:
    """Whether any export file is missing or differs (an export that cannot render is stale: the
    write then says why)."""
    try:
        return any(_read(root / f.path) != f.data for f in render(root, spec, cache))
    except TuneError:
        return True


def problems(root: Path, spec: KernelSpec, cache: TuningCache) -> list[str]:
    """One line per export file that is missing or out of sync with the cache (``doit check``)."""
    try:
        files = render(root, spec, cache)
    except TuneError as exc:
        return [str(exc)]
    lines = []
    for f in files:
        current = _read(root / f.path)
        if current != f.data:
            what = "is missing" if current is None else "does not match its cache"
            lines.append(f"export {f.path} of kernel {spec.name} {what}; fix: run `doit export {spec.name}` "
                         f"and commit it")
    return lines


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return b""  # not a file: prepare refuses it
    except OSError as exc:
        raise TuneError(f"cannot read {path}: {exc.strerror or exc}; fix: check its permissions") from None
