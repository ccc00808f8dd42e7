"""Nothing tuned is dropped without an ask: a generated module is shipped code, so before a run,
a merge or a drop writes one, its tables are compared with the cache (read back by parsing the
module, never importing it). A table can go two ways, and each stops the command with one line:

* its cache lost the records (deleted, emptied, truncated): restore the cache from git, or drop
  the tables on purpose (``entries_missing_from_cache``, ``lost_tables_message``);
* the manifest's key or space changed, and a device that was not retuned since holds stale
  records: tables are rendered only from records that answer the manifest, so writing the
  module would drop that device's table. Retune it there (the cache keeps this run's records,
  so each machine retunes its own device in turn), or drop it with ``doit drop-device``
  (``stale_tables_message``). The module keeps the old tables meanwhile, as they were shipped.
"""
from __future__ import annotations

from pathlib import Path

from aot_tune.cache import CheckedCache, record_shape
from aot_tune.codegen import describe_missing, module_literals
from aot_tune.errors import program
from aot_tune.manifest import KernelSpec
from aot_tune.pipeline.staleness import manifest_changes
from aot_tune.tuning_schema import TuningCache


def _module(path: Path) -> tuple[tuple | None, dict[str, dict]] | None:
    """The module's ``KEY`` (None if unreadable) and ``TABLES``; None without tables."""
    found = module_literals(path)
    tables, key = found.get("TABLES"), found.get("KEY")
    if not isinstance(tables, dict) or not tables:
        return None
    return (tuple(key) if isinstance(key, tuple) else None), tables


def _entries(table: object) -> list[tuple]:
    return [key for key in table if isinstance(key, tuple)] if isinstance(table, dict) else []


def entries_missing_from_cache(path: Path, cache: TuningCache, spec: KernelSpec) -> dict[str, int]:
    """Per device, how many entries the generated module at ``path`` holds that the cache has no
    tuned record for, under the module's key: a table the next render would silently drop. A
    device with records under the manifest's key, in a module written under another key, was
    retuned after the key changed: its new table replaces the old one. Empty when none."""
    module = _module(path)
    if module is None:
        return {}
    module_key, tables = module
    records = [r for r in cache.records if r.kernel == spec.name and r.HasField("best")]
    tuned = {(r.device.key, (*record_shape(r), r.dtype)) for r in records
             if module_key is None or tuple(r.key_names) == module_key}
    retuned = {r.device.key for r in records if module_key not in (None, spec.key) and tuple(r.key_names) == spec.key}
    missing: dict[str, int] = {}
    for device, table in tables.items():
        lost = sum((device, entry) not in tuned for entry in _entries(table)) if device not in retuned else 0
        if lost:
            missing[str(device)] = lost
    return dict(sorted(missing.items()))


def lost_tables_message(spec: KernelSpec, missing: dict[str, int]) -> str:
    devices = " ".join(missing)
    return (f"{spec.generated} holds tuned entries that {spec.cache} lacks ({describe_missing(missing)}); "
            f"a run would drop them; fix: restore the cache from git (git checkout -- {spec.cache}), or drop "
            f"those tables on purpose with `{program()} drop-device --kernel {spec.name} {devices}` and retune")


def stale_tables_message(spec: KernelSpec, path: Path, checked: CheckedCache, manifest_name: str) -> str:
    """The one line refusing to write a module that would drop tables whose records the manifest
    made stale (its entries answered by a stale tuned record of the same device); '' if none."""
    module = _module(path)
    if module is None:
        return ""
    module_key, tables = module
    at_risk = []
    for record, why in checked.stale_records():
        table = tables.get(record.device.key)
        if record.kernel != spec.name or not record.HasField("best") or not isinstance(table, dict):
            continue
        if (module_key is None or tuple(record.key_names) == module_key) and (*record_shape(record), record.dtype) in table:
            at_risk.append((record, why))
    if not at_risk:
        return ""
    counts: dict[str, int] = {}
    for record, _ in at_risk:
        counts[record.device.key] = counts.get(record.device.key, 0) + 1
    devices = sorted(counts)
    changes = "; ".join(f"{c.what} ({c.where})" for c in manifest_changes(spec, at_risk, manifest_name))
    return (f"{spec.generated} holds tables the manifest made stale ({describe_missing(dict(sorted(counts.items())))}"
            f"): {changes}; writing it would drop them; fix: retune {spec.name} on "
            f"{', '.join(devices)} ({program()} tune {spec.name} there, with this cache), or drop them on purpose with "
            f"`{program()} drop-device --kernel {spec.name} {' '.join(devices)}`")
