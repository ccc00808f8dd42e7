"""Database: tuning records in one protobuf file per kernel, text or binary by extension.

Binary (``.pb``, the default) because the up-to-date check reads every cache on each run and
protobuf parses text in pure Python (seconds for a GEMM space on one GPU). Text (``.txtpb``,
``.textproto``, ``.pbtxt``) is sorted and deterministic, for caches small enough to review.
Either way the reviewable diff of a retune is the generated module. Merged caches keep each
measurement's statistics; the raw samples stay in the per-task outputs under ``.aot_tune/``.

Every record read is checked (``check_records``): a cache comes from git, from another
machine or from ``doit merge-caches``, and what it holds ends up in generated modules that
everyone imports. The check tells two things apart. A record that is malformed or forged
(control characters in a device name, a param without a value, shape values that do not fit
its own key dims) is corrupt: it stops the read with one line naming the file and the record,
and never reaches a table. A well-formed record that no longer matches the manifest (its key
dims or its params are not the manifest's: someone edited tuning.yaml) is stale: it is read,
kept in the cache, and reported with what changed (``Mismatch``) until its device is retuned or
dropped.
"""
from __future__ import annotations

import math
import os
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, NamedTuple, Sequence

from google.protobuf import text_format

from aot_tune.dtypes import DTYPE_BYTES
from aot_tune.errors import TuneError
from aot_tune.fileio import write_atomic
from aot_tune.space import KEY_LABEL
from aot_tune.tuning_schema import Measurement, TransferSource, TuningCache, TuningRecord

if TYPE_CHECKING:
    from aot_tune.manifest import KernelSpec

SCHEMA_VERSION = 1
#: The dtype names a record may hold (the manifest's dtypes).
DTYPE_NAMES = tuple(DTYPE_BYTES)
TEXT_SUFFIXES = (".txtpb", ".textproto", ".pbtxt")


def is_text(path: str | os.PathLike) -> bool:
    return str(path).endswith(TEXT_SUFFIXES)


def record_identity(record: TuningRecord) -> tuple:
    """What one record answers: the best config of a kernel for one benchmarked shape (its key
    and bench dims) on a device. The key dims are part of it: after a key change, a record of the
    old key and one of the new never stand for each other, even where their values coincide
    (before the shape, so that records of one key sort as they always did, and values of
    different keys are never compared)."""
    return (record.kernel, record.device.key, record.dtype, tuple(record.key_names), record_shape(record),
            record_bench_dims(record))


_KEY_FIELDS = {bool: "bool_value", int: "int_value", str: "string_value"}
_BENCH_VALUE_KINDS = frozenset(_KEY_FIELDS.values())


def record_shape(record: "TuningRecord | TransferSource") -> tuple:
    """The key values of a record (or a transfer source): ``shape`` when all are integers, else
    ``key_values`` (bools and strings), so caches written before non-integer key dims read as they were."""
    if record.key_values:
        return tuple(getattr(v, v.WhichOneof("value") or "int_value") for v in record.key_values)
    return tuple(record.shape)


def record_bench_dims(record: TuningRecord) -> tuple:
    """The record's bench dims as ``((name, value), ...)``, in the manifest's order (``()`` when
    its shapes name key dims only)."""
    return tuple((p.name, getattr(p, p.WhichOneof("value") or "int_value")) for p in record.bench_dims)


def record_full_shape(record: TuningRecord) -> tuple:
    """The shape its bench measured: the key values, then the bench dims' values (the order of the
    manifest's shapes, aot_tune.manifest.KernelSpec.dims)."""
    return (*record_shape(record), *(value for _, value in record_bench_dims(record)))


def set_record_bench_dims(record: TuningRecord, named: Sequence[tuple[str, object]]) -> None:
    """Store the bench dims' ``(name, value)`` pairs where :func:`record_bench_dims` reads them."""
    for name, value in named:
        setattr(record.bench_dims.add(name=name), _KEY_FIELDS[type(value)], value)


def set_record_shape(record: "TuningRecord | TransferSource", shape: Sequence) -> None:
    """Store key values where :func:`record_shape` reads them."""
    if all(type(v) is int for v in shape):
        record.shape.extend(shape)
        return
    for value in shape:
        setattr(record.key_values.add(), _KEY_FIELDS[type(value)], value)


def read_cache(path: str | os.PathLike, spec: "KernelSpec | None" = None) -> TuningCache:
    """An empty cache if the file does not exist; a clear error if it does not parse or holds a
    corrupt record. Stale records (see ``read_checked``) are read like the others."""
    return read_checked(path, spec).cache


def read_checked(path: str | os.PathLike, spec: "KernelSpec | None" = None) -> "CheckedCache":
    """``read_cache``, with each record's mismatch against the manifest's ``spec`` of its kernel."""
    path = Path(path)
    cache = TuningCache()
    if not path.exists():
        return CheckedCache(cache, ())
    data = path.read_bytes()
    try:
        if is_text(path):
            text_format.Parse(data.decode(), cache)
        else:
            cache.ParseFromString(data)
    except (text_format.ParseError, UnicodeDecodeError, Exception) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise TuneError(f"{path}: not a valid tuning cache ({reason}); fix: restore it from git "
                        f"(git checkout -- {path}); deleting it would drop every table it holds") from exc
    if cache.schema_version > SCHEMA_VERSION:
        raise TuneError(f"{path}: schema version {cache.schema_version} is newer than this aot_tune "
                        f"understands ({SCHEMA_VERSION}); fix: upgrade aot_tune")
    return check_cache(cache, path, spec)


def check_cache(cache: TuningCache, path: str | os.PathLike, spec: "KernelSpec | None" = None) -> "CheckedCache":
    """A cache held in memory (e.g. one about to be written), checked as ``read_checked`` does."""
    return CheckedCache(cache, tuple(check_records(cache.records, path, spec)))


class Mismatch(NamedTuple):
    """Why a well-formed record no longer answers the manifest: it is stale, not corrupt."""

    part: str  # what of the manifest changed: "key" or "space"
    what: str  # e.g. "the key changed from [n] to [n, m]", "param BLOCK removed from the space"


@dataclass(frozen=True)
class CheckedCache:
    """A cache and, per record, its mismatch against the manifest (None: it answers the manifest)."""

    cache: TuningCache
    stale: tuple[Mismatch | None, ...]

    def stale_records(self) -> list[tuple[TuningRecord, Mismatch]]:
        return [(r, why) for r, why in zip(self.cache.records, self.stale) if why is not None]

    def current(self) -> TuningCache:
        """The records that answer the manifest: what tables are made of (the cache itself when
        nothing is stale, so the common case copies nothing)."""
        if not any(self.stale):
            return self.cache
        current = TuningCache(schema_version=self.cache.schema_version)
        current.records.extend(r for r, why in zip(self.cache.records, self.stale) if why is None)
        return current


# --------------------------------------------------------------------------- validation

_KERNEL = re.compile(r"[a-z_][a-z0-9_]{0,63}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_CAPABILITY = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}")
_CONFIG_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_TEXT_LIMIT = 200
BACKENDS = ("cuda", "interpreter")


def printable(text: str) -> str:
    """``text`` with every character that is not printable (line breaks among them) as '?'."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def describe_record(record: TuningRecord) -> str:
    """``gemm h200 float16 256x4096x4096``, printable whatever the record holds."""
    shape = "x".join(str(v) for v in record_shape(record))
    bench = ",".join(f"{name}={value}" for name, value in record_bench_dims(record))
    parts = (record.kernel, record.device.key, record.dtype, shape) + ((f"({bench})",) if bench else ())
    return " ".join(printable(part)[:64] for part in parts)


def record_defect(record: TuningRecord, spec: "KernelSpec | None" = None) -> str:
    """Why a record is corrupt ('' if it is not): its form (names, versions, device, params, shape
    values against its own key dims), and with ``spec``, that it is a record of that kernel."""
    return _RecordCheck(spec, False).verdict(record)[0]


def record_mismatch(record: TuningRecord, spec: "KernelSpec", complete: bool = False) -> Mismatch | None:
    """Why a well-formed record of ``spec``'s kernel is stale (None if it answers the manifest):
    its key dims are not the manifest's, or a config sets a param the space lacks or holds a
    value of another type than the space's; ``complete`` also asks every config to set every
    param of the space (what ``doit merge-caches`` lets in)."""
    return _RecordCheck(spec, complete).verdict(record)[1]


def record_answers(record: TuningRecord, spec: "KernelSpec") -> bool:
    """Neither corrupt nor stale: a record that may enter ``spec``'s cache as current."""
    return _RecordCheck(spec, False).verdict(record) == ("", None)


def check_records(records: Iterable[TuningRecord], path: str | os.PathLike, spec: "KernelSpec | None" = None,
                  complete: bool = False) -> list[Mismatch | None]:
    """Raise one line naming the file and the first corrupt record; else each record's mismatch
    against ``spec`` (records of other kernels get the checks of form only, and None)."""
    with_spec, form_only = _RecordCheck(spec, complete), _RecordCheck(None, False)
    mismatches = []
    for index, record in enumerate(records):
        check = with_spec if spec is None or record.kernel == spec.name else form_only
        defect, mismatch = check.verdict(record)
        if defect:
            raise TuneError(f"{path}: record {index} ({describe_record(record)}): {defect}; fix: restore the "
                            f"file from git, or regenerate it on the machine that measured it")
        mismatches.append(mismatch)
    return mismatches


def _dims(names: Iterable[str]) -> str:
    return "[" + ", ".join(names) + "]"


def _key_value_ok(value: object) -> bool:
    """A size >= 1, a bool, or a string the manifest accepts as a key value."""
    if isinstance(value, str):
        return bool(KEY_LABEL.fullmatch(value))
    return isinstance(value, bool) or value >= 1


class _RecordCheck:
    """The one place a record is judged: corrupt (``record_defect``) or stale against the manifest
    (``record_mismatch``), both in one pass over its configs, with what they derive from the
    manifest computed once: a cache is read on every run, and a GEMM record holds thousands of
    configs."""

    def __init__(self, spec: "KernelSpec | None", complete: bool) -> None:
        from aot_tune.bench.runner import MEASUREMENT_STATUSES

        self.spec, self.complete = spec, complete
        self.statuses = MEASUREMENT_STATUSES
        #: param -> the Param fields its space values are stored in
        self.kinds = {name: frozenset(_value_kind(v) for v in values) for name, values in spec.space.params} \
            if spec is not None else None
        self.good_names: set[str] = set()

    def verdict(self, record: TuningRecord) -> tuple[str, Mismatch | None]:
        """(why it is corrupt, or ''; why it is stale, or None): a corrupt record is not judged stale."""
        defect = self._form_defect(record)
        if defect:
            return defect, None
        mismatch = None
        configs = [("best config", record.best)] if record.HasField("best") else []
        configs += [(f"measurement {i}", m.config) for i, m in enumerate(record.measurements)]
        configs += [(name.replace("_", " "), getattr(record, name).config)
                    for name in ("default_baseline", "vendor_baseline") if record.HasField(name)]
        for where, config in configs:
            defect, stale = self._config_check(config)
            if defect:
                return f"{where}: {defect}", None
            mismatch = mismatch or stale
        for i, m in enumerate(record.measurements):
            if m.status not in self.statuses:
                return f"measurement {i}: unknown status {m.status!r}", None
        if self.spec is None:
            return "", None
        if record.kernel != self.spec.name:
            return f"it is a record of kernel {record.kernel!r}, not {self.spec.name!r}", None
        if tuple(record.key_names) != self.spec.key:
            return "", Mismatch("key", f"the key changed from {_dims(record.key_names)} to {_dims(self.spec.key)}")
        bench_names = tuple(p.name for p in record.bench_dims)
        if bench_names != self.spec.bench_dims:
            return "", Mismatch("key", f"the bench dims changed from {_dims(bench_names)} to "
                                       f"{_dims(self.spec.bench_dims)}")
        return "", mismatch

    def _form_defect(self, record: TuningRecord) -> str:
        from aot_tune.runtime.devices import INTERPRETER, device_key

        if not _KERNEL.fullmatch(record.kernel):
            return f"kernel name {record.kernel!r} is not a lower-case identifier of at most 64 characters"
        if any(not _IDENTIFIER.fullmatch(name) for name in record.key_names):
            return f"key dims {list(record.key_names)!r} are not identifiers"
        shape = record_shape(record)
        if record.shape and record.key_values or len(shape) != len(record.key_names) \
                or any(not _key_value_ok(v) for v in shape):
            return f"shape {list(shape)} does not fit the key dims {list(record.key_names)}"
        bench_names = [p.name for p in record.bench_dims]
        if any(not _IDENTIFIER.fullmatch(name) for name in bench_names) or \
                len(set(bench_names) | set(record.key_names)) != len(bench_names) + len(record.key_names):
            return f"bench dims {bench_names!r} are not identifiers distinct from the key dims"
        if any(p.WhichOneof("value") not in _BENCH_VALUE_KINDS or not _key_value_ok(value)
               for p, (_, value) in zip(record.bench_dims, record_bench_dims(record))):
            return f"bench dims {[list(pair) for pair in record_bench_dims(record)]!r} are not sizes, bools or names"
        if record.dtype not in DTYPE_NAMES and not _IDENTIFIER.fullmatch(record.dtype):
            return f"unknown dtype {record.dtype!r} (known: {', '.join(DTYPE_NAMES)}, or a combination's name)"
        device = record.device
        if device.backend not in BACKENDS:
            return f"unknown backend {device.backend!r} (known: {', '.join(BACKENDS)})"
        if not device.name or not device.name.isprintable() or len(device.name) > _TEXT_LIMIT:
            return f"device name {device.name!r} is not one printable line of at most {_TEXT_LIMIT} characters"
        expected_key = INTERPRETER if device.backend == "interpreter" else device_key(device.name)
        if device.key != expected_key:
            return (f"device key {device.key!r} does not match the device name {device.name!r} "
                    f"(expected {expected_key!r})")
        capability_ok = device.compute_capability == "cpu" if device.backend == "interpreter" \
            else _CAPABILITY.fullmatch(device.compute_capability)
        if not capability_ok:
            return (f"compute capability {device.compute_capability!r} is not of the form 9.0 (or cpu for the "
                    f"interpreter)")
        for tool in ("triton", "torch", "cuda", "driver"):
            version = getattr(record.toolchain, tool)
            if version and not _VERSION.fullmatch(version):
                return f"{tool} version {version!r} is not a version string"
        return ""

    def _config_check(self, config) -> tuple[str, Mismatch | None]:
        """(its defect of form, or ''; its first mismatch against the space, or None)."""
        if not _CONFIG_ID.fullmatch(config.id):
            return f"config id {config.id!r} is not an id", None
        kinds = self.kinds
        names = []
        mismatch = None
        for param in config.params:
            kind = param.WhichOneof("value")
            if param.name not in self.good_names:
                if not _IDENTIFIER.fullmatch(param.name):
                    return f"param name {param.name!r} is not an identifier", None
                self.good_names.add(param.name)
            if kind is None:
                return f"param {param.name} has no value", None
            value = getattr(param, kind)
            if kind == "float_value" and not math.isfinite(value):
                return f"param {param.name} is {value}, not a finite number", None
            if kind == "string_value" and (not value.isprintable() or len(value) > _TEXT_LIMIT):
                return f"param {param.name} is not one printable line of at most {_TEXT_LIMIT} characters", None
            if kinds is not None and mismatch is None:
                if param.name not in kinds:
                    mismatch = Mismatch("space", f"param {param.name} removed from the space")
                elif kind not in kinds[param.name]:
                    shown = "/".join(sorted(k.removesuffix("_value") for k in kinds[param.name]))
                    mismatch = Mismatch("space", f"param {param.name} changed type (the space holds {shown}, "
                                                 f"the records {kind.removesuffix('_value')})")
            names.append(param.name)
        if kinds is not None and mismatch is None and self.complete and config.params and set(names) != set(kinds):
            added = sorted(set(kinds) - set(names))
            mismatch = Mismatch("space", f"param{'s' * (len(added) > 1)} {', '.join(added)} added to the space")
        return "", mismatch


def _value_kind(value) -> str:
    """The ``Param`` field a value is stored in (``config_to_proto``, and the check of a record's
    params against the space's values)."""
    if isinstance(value, bool):
        return "bool_value"
    if isinstance(value, int):
        return "int_value"
    if isinstance(value, float):
        return "float_value"
    return "string_value"


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
    """One bench task's output (under .aot_tune/); a TuneError if it does not parse. The merge
    stage checks it (``record_defect``) before it enters a cache."""
    record = TuningRecord()
    try:
        record.ParseFromString(Path(path).read_bytes())
    except Exception as exc:  # a torn or foreign file
        raise TuneError(f"{path}: not a tuning record ({type(exc).__name__})") from exc
    return record


def median_interval(times: Sequence[float]) -> tuple[float, float]:
    """Distribution-free 95% confidence interval of the median: the order statistics at ranks
    n/2 -/+ 0.98 sqrt(n). Fewer than 6 samples cannot bound it: the full range is returned."""
    ordered = sorted(times)
    n = len(ordered)
    if n == 0:
        return 0.0, 0.0
    if n < 6:
        return ordered[0], ordered[-1]
    half = 0.98 * math.sqrt(n)
    low = max(0, math.floor(n / 2 - half))
    high = min(n - 1, math.ceil(n / 2 + half))
    return ordered[low], ordered[high]


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
        kind = _value_kind(value)
        setattr(message.params.add(name=name), kind, str(value) if kind == "string_value" else value)


def config_from_proto(message) -> dict:
    return {p.name: getattr(p, p.WhichOneof("value")) for p in message.params}
