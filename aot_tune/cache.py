"""Database: tuning records in one protobuf file per kernel, text or binary by extension.

Binary (``.pb``, the default) because the up-to-date check reads every cache on each run and
protobuf parses text in pure Python (seconds for a GEMM space on one GPU). Text (``.txtpb``,
``.textproto``, ``.pbtxt``) is sorted and deterministic, for caches small enough to review.
Either way the reviewable diff of a retune is the generated module. Merged caches keep each
measurement's statistics; the raw samples stay in the per-task outputs under ``.aot_tune/``.
"""
from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Iterable

from google.protobuf import text_format

from .errors import TuneError
from .fileio import write_atomic
from .select import median_interval
from .tuning_schema import Measurement, TuningCache, TuningRecord

SCHEMA_VERSION = 1
TEXT_SUFFIXES = (".txtpb", ".textproto", ".pbtxt")


def is_text(path: str | os.PathLike) -> bool:
    return str(path).endswith(TEXT_SUFFIXES)


def record_identity(record: TuningRecord) -> tuple:
    """What one record answers: the best config of a kernel for a key on a device."""
    return (record.kernel, record.device.key, record.dtype, tuple(record.shape))


def read_cache(path: str | os.PathLike) -> TuningCache:
    """An empty cache if the file does not exist; a clear error if it does not parse."""
    path = Path(path)
    cache = TuningCache()
    if not path.exists():
        return cache
    data = path.read_bytes()
    try:
        if is_text(path):
            text_format.Parse(data.decode(), cache)
        else:
            cache.ParseFromString(data)
    except (text_format.ParseError, UnicodeDecodeError, Exception) as exc:
        raise TuneError(f"{path}: not a valid tuning cache ({exc}); fix: restore it from git "
                        f"or delete it to retune") from exc
    if cache.schema_version > SCHEMA_VERSION:
        raise TuneError(f"{path}: schema version {cache.schema_version} is newer than this aot_tune "
                        f"understands ({SCHEMA_VERSION}); fix: upgrade aot_tune")
    return cache


def serialize(cache: TuningCache, path: str | os.PathLike) -> bytes:
    if is_text(path):
        return text_format.MessageToString(cache).encode()
    return cache.SerializeToString(deterministic=True)


def sorted_cache(records: Iterable[TuningRecord]) -> TuningCache:
    cache = TuningCache(schema_version=SCHEMA_VERSION)
    cache.records.extend(sorted(records, key=record_identity))
    return cache


def without_samples(record: TuningRecord) -> TuningRecord:
    """A copy keeping the statistics of every measurement but not its raw samples or phases."""
    slim = TuningRecord()
    slim.CopyFrom(record)
    for measurement in slim.measurements:
        measurement.ClearField("times_ms")
        measurement.ClearField("phases")
    for baseline in ("default_baseline", "vendor_baseline"):
        if slim.HasField(baseline):
            getattr(slim, baseline).ClearField("times_ms")
    return slim


def merge_records(existing: Iterable[TuningRecord], incoming: Iterable[TuningRecord]) -> TuningCache:
    """Incoming records replace existing ones with the same identity unless they are older."""
    merged = {record_identity(r): r for r in existing}
    for record in incoming:
        key = record_identity(record)
        current = merged.get(key)
        if current is None or record.measured_at >= current.measured_at:
            merged[key] = record
    return sorted_cache(merged.values())


def write_cache(cache: TuningCache, path: str | os.PathLike) -> bool:
    """Write atomically; returns False (and leaves the file alone) when nothing changed."""
    data = serialize(cache, path)
    path = Path(path)
    if path.exists() and path.read_bytes() == data:
        return False
    write_atomic(path, data)
    return True


def read_record(path: str | os.PathLike) -> TuningRecord:
    record = TuningRecord()
    record.ParseFromString(Path(path).read_bytes())
    return record


def set_samples(entry: Measurement, times_ms: list[float]) -> None:
    """Store a measurement's samples and the statistics picks and reports read from them."""
    entry.times_ms[:] = times_ms
    entry.median_ms = statistics.median(times_ms)
    entry.median_ci_low_ms, entry.median_ci_high_ms = median_interval(times_ms)
    entry.min_ms, entry.mean_ms = min(times_ms), statistics.fmean(times_ms)
    entry.stdev_ms = statistics.pstdev(times_ms)
    entry.runs = len(times_ms)


def config_to_proto(config_id: str, params: dict, message) -> None:
    """Fill a ``Config`` message; params sorted by name for a deterministic text form."""
    message.id = config_id
    for name in sorted(params):
        value = params[name]
        param = message.params.add(name=name)
        if isinstance(value, bool):
            param.bool_value = value
        elif isinstance(value, int):
            param.int_value = value
        elif isinstance(value, float):
            param.float_value = value
        else:
            param.string_value = str(value)


def config_from_proto(message) -> dict:
    return {p.name: getattr(p, p.WhichOneof("value")) for p in message.params}
