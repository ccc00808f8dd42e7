"""Merging tuning caches made on other machines (other GPUs) into this project's caches.

Policy, per record identity (kernel, device key, dtype, shape):
* same fingerprint on both sides: the newer measurement wins;
* different fingerprints: the record that is current for this checkout's kernel sources and
  manifest wins (recomputed as ``doit check`` does, with the device and toolchain the record
  names); if both or neither are current, the newer wins, and ``doit check`` reports a
  non-current survivor as stale.
Records of one identity are never combined. Every device keeps its own table, so caches from
an H100 and an H200 merge into one file and one generated module with both tables.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from . import cache as cache_io
from .check import record_problem
from .codegen import render_module
from .errors import TuneError
from .fileio import write_atomic
from .fingerprint import SourceIndex
from .manifest import Manifest
from .plan import measured_code
from .tuning_schema import TuningRecord


@dataclass
class MergeSummary:
    added: int = 0
    replaced: int = 0
    kept: int = 0
    unknown_kernels: set[str] = field(default_factory=set)
    kernels: set[str] = field(default_factory=set)

    def render(self) -> str:
        text = (f"merged into {len(self.kernels)} kernel cache(s): {self.added} records added, "
                f"{self.replaced} replaced, {self.kept} kept (ours were newer or current)")
        if self.unknown_kernels:
            text += f"\nskipped records of kernels not in the manifest: {', '.join(sorted(self.unknown_kernels))}"
        return text


def cache_files(paths: Iterable[str]) -> list[Path]:
    """The cache files named, or found (``*.tuning.*``) in the folders named."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if ".tuning." in p.name and p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            raise TuneError(f"{raw}: no such cache file or folder; fix: name a *.tuning.pb/.txtpb file "
                            f"or the generated/ folder of another checkout")
    if not files:
        raise TuneError("no cache files found to merge; fix: name *.tuning.pb/.txtpb files or folders holding them")
    return files


def merge_into_project(manifest: Manifest, files: list[Path]) -> MergeSummary:
    specs = {spec.name: spec for spec in manifest.kernels}
    sources = SourceIndex(manifest.root)
    incoming: dict[str, list[TuningRecord]] = {}
    summary = MergeSummary()
    for path in files:
        for record in cache_io.read_cache(path).records:
            if record.kernel in specs:
                incoming.setdefault(record.kernel, []).append(record)
            else:
                summary.unknown_kernels.add(record.kernel)
    for kernel, records in sorted(incoming.items()):
        spec = specs[kernel]
        code = measured_code(sources, spec)
        current = lambda r, spec=spec, code=code: not record_problem(spec, code, r)  # noqa: E731
        path = manifest.root / spec.cache
        ours = {cache_io.record_identity(r): r for r in cache_io.read_cache(path).records}
        for record in records:
            identity = cache_io.record_identity(record)
            mine = ours.get(identity)
            if mine is None:
                ours[identity] = record
                summary.added += 1
            elif _prefer(record, mine, current):
                ours[identity] = record
                summary.replaced += 1
            else:
                summary.kept += 1
        merged = cache_io.sorted_cache(cache_io.without_samples(r) for r in ours.values())
        cache_io.write_cache(merged, path)
        write_atomic(manifest.root / spec.generated, render_module(spec.name, spec.key, merged, manifest.path.name))
        summary.kernels.add(kernel)
    return summary


def _prefer(theirs: TuningRecord, mine: TuningRecord, current) -> bool:
    if theirs.fingerprint != mine.fingerprint:
        theirs_current, mine_current = current(theirs), current(mine)
        if theirs_current != mine_current:
            return theirs_current
    return theirs.measured_at > mine.measured_at
