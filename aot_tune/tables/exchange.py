"""Merging tuning caches made on other machines (other GPUs) into this project's caches.

Policy, per record identity (kernel, device key, dtype, key dims, shape):
* same fingerprint on both sides: the newer measurement wins;
* different fingerprints: the record that is current for this checkout's kernel sources and
  manifest wins (recomputed as ``doit check`` does, with the device and toolchain the record
  names); if both or neither are current, the newer wins, and ``doit check`` reports a
  non-current survivor as stale.
Records of one identity are never combined. Every device keeps its own table, so caches from
an H100 and an H200 merge into one file and one generated module with both tables.

Nothing is written until every incoming record has been checked (aot_tune.cache): one corrupt
record (malformed, forged names) stops the merge with one line naming its file and index, and
changes nothing on disk. A well-formed record that no longer answers this manifest (another key,
a param the space lacks or holds with another type, or not every param of the space) is stale:
it is left out, and the summary names it. Incoming current records of a device replace that
device's stale records here, as a retune on it would. A merge never drops a table either: if a
generated module holds entries that the merged cache would lack, or tables of devices whose
records the manifest made stale, it stops (``doit drop-device`` drops a device's tables on
purpose; aot_tune.pipeline.guard).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from aot_tune import cache as cache_io, exports
from aot_tune.cache import CheckedCache
from aot_tune.codegen import ensure_generated, render_kernel, write_module
from aot_tune.errors import TuneError
from aot_tune.fingerprint import measured_code
from aot_tune.sources import SourceIndex
from aot_tune.manifest import KernelSpec, Manifest
from aot_tune.pipeline.staleness import record_problem
from aot_tune.pipeline.guard import entries_missing_from_cache, lost_tables_message, stale_tables_message
from aot_tune.tuning_schema import TuningCache, TuningRecord


@dataclass
class MergeSummary:
    added: int = 0
    replaced: int = 0
    kept: int = 0
    unknown_kernels: set[str] = field(default_factory=set)
    kernels: set[str] = field(default_factory=set)
    #: (kernel, what changed) -> devices of the incoming records left out as stale
    stale: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    superseded: int = 0  # our stale records replaced by incoming current ones of their device

    def render(self) -> str:
        text = (f"merged into {len(self.kernels)} kernel cache(s): {self.added} records added, "
                f"{self.replaced} replaced, {self.kept} kept (ours were newer or current)")
        if self.superseded:
            text += f", {self.superseded} stale records replaced by their device's current ones"
        if self.unknown_kernels:
            text += f"\nskipped records of kernels not in the manifest: {', '.join(sorted(self.unknown_kernels))}"
        for (kernel, what), devices in sorted(self.stale.items()):
            text += (f"\nskipped stale records of {kernel} on {', '.join(sorted(devices))} ({what}): they were "
                     f"tuned for an earlier tuning.yaml (`doit check` says which devices still need a retune)")
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
        records = cache_io.read_cache(path).records
        for index, record in enumerate(records):
            spec = specs.get(record.kernel)
            if spec is None:
                summary.unknown_kernels.add(record.kernel)
                continue
            problem = cache_io.record_defect(record, spec)
            if problem:
                raise TuneError(f"{path}: record {index} ({cache_io.describe_record(record)}): {problem}; "
                                f"nothing was merged; fix: restore that file from git, or regenerate it on the "
                                f"machine that measured it")
            stale = cache_io.record_mismatch(record, spec, complete=True)
            if stale is not None:
                summary.stale.setdefault((record.kernel, stale.what), set()).add(record.device.key)
                continue
            incoming.setdefault(record.kernel, []).append(record)
    updates: list[tuple[KernelSpec, CheckedCache]] = []
    for kernel, records in sorted(incoming.items()):
        spec = specs[kernel]
        code = measured_code(sources, spec)
        current = lambda r, spec=spec, code=code: not record_problem(spec, code, r)  # noqa: E731
        path = manifest.root / spec.cache
        existing = cache_io.read_checked(path, spec)
        retuned = {r.device.key for r in records}  # their stale records here are replaced, as by a retune
        ours = {cache_io.record_identity(r): r for r, why in zip(existing.cache.records, existing.stale)
                if why is None or r.device.key not in retuned}
        summary.superseded += len(existing.cache.records) - len(ours)
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
        merged = cache_io.check_cache(cache_io.sorted_cache(cache_io.without_samples(r) for r in ours.values()),
                                      path, spec)
        refused = _dropped_tables(manifest, spec, merged)
        if refused:
            raise TuneError(refused + "; nothing was merged")
        updates.append((spec, merged))
    _write_tables(manifest, updates)
    summary.kernels.update(spec.name for spec, _ in updates)
    return summary


@dataclass
class DropSummary:
    devices: tuple[str, ...]
    dropped: dict[str, int] = field(default_factory=dict)  # kernel -> records removed
    removed_exports: list[str] = field(default_factory=list)  # export files of the dropped tables

    def render(self) -> str:
        devices = ", ".join(self.devices)
        if not self.dropped:
            return f"no table of {devices} to drop"
        done = ", ".join(f"{k} ({n} record{'s' if n != 1 else ''})" for k, n in sorted(self.dropped.items()))
        removed = f"; removed their exports {', '.join(self.removed_exports)}" if self.removed_exports else ""
        return f"dropped the {devices} tables of: {done}{removed}; commit generated/ to ship the change"


def drop_devices(manifest: Manifest, devices: Iterable[str], kernels: Iterable[KernelSpec]) -> DropSummary:
    """Remove the devices' records from the kernels' caches and their tables from the generated
    modules: the explicit way to drop a table (a run never does it on its own)."""
    summary = DropSummary(tuple(dict.fromkeys(devices)))
    updates: list[tuple[KernelSpec, CheckedCache, TuningCache]] = []
    for spec in kernels:
        path = manifest.root / spec.cache
        cache = cache_io.read_cache(path, spec)
        kept = cache_io.check_cache(cache_io.sorted_cache(r for r in cache.records
                                                          if r.device.key not in summary.devices), path, spec)
        in_module = entries_missing_from_cache(manifest.root / spec.generated, kept.cache, spec)
        refused = _dropped_tables(manifest, spec, kept, ignore=summary.devices)
        if refused:
            raise TuneError(refused + "; nothing was dropped")
        if len(kept.cache.records) == len(cache.records) and not in_module:
            continue
        updates.append((spec, kept, cache))
        summary.dropped[spec.name] = len(cache.records) - len(kept.cache.records)
    _write_tables(manifest, [(spec, kept) for spec, kept, _ in updates])
    for spec, kept, cache in updates:
        summary.removed_exports += exports.remove_dropped(manifest.root, spec, cache, kept.current())
    return summary


def _dropped_tables(manifest: Manifest, spec: KernelSpec, checked: CheckedCache, ignore: tuple[str, ...] = ()) -> str:
    """The guard's line if writing ``checked`` would drop a table (of a device not in ``ignore``)
    from the kernel's module: entries the cache lacks, or tables the manifest made stale; else ''."""
    module = manifest.root / spec.generated
    missing = {d: n for d, n in entries_missing_from_cache(module, checked.cache, spec).items() if d not in ignore}
    if missing:
        return lost_tables_message(spec, missing)
    return stale_tables_message(spec, module, checked, manifest.path.name)


def _write_tables(manifest: Manifest, updates: list[tuple[KernelSpec, CheckedCache]]) -> None:
    """Write each kernel's cache, its generated module and its exports. Everything is rendered,
    and every module and export path checked (never over a file aot_tune did not write), before
    anything is written."""
    texts = [render_kernel(spec, checked, manifest.path.name) for spec, checked in updates]
    for spec, _ in updates:
        ensure_generated(manifest.root / spec.generated)
        if spec.exports:  # a fresh clone's exports, recorded before the cache moves on
            exports.claim(manifest.root, spec, cache_io.read_checked(manifest.root / spec.cache, spec).current())
    prepared = [exports.prepare(manifest.root, spec, checked.current()) for spec, checked in updates]
    for (spec, checked), text, files in zip(updates, texts, prepared):
        cache_io.write_cache(checked.cache, manifest.root / spec.cache)
        write_module(manifest.root / spec.generated, text)
        files.write()


def _prefer(theirs: TuningRecord, mine: TuningRecord, current) -> bool:
    if theirs.fingerprint != mine.fingerprint:
        theirs_current, mine_current = current(theirs), current(mine)
        if theirs_current != mine_current:
            return theirs_current
    return theirs.measured_at > mine.measured_at
