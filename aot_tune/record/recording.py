"""The records of ``aot_tune record``: a kernel's decorator as it was found, and each distinct
launch of it, with everything a replay needs (arguments, grid per config, the library's pick).

A recording is data, never code: JSON files under ``recordings/`` beside the manifest, one per
manifest entry, written atomically and sorted so that recording the same workload again writes
the same bytes. A launch is named by a digest of what decides the work it does (the kernel, its
arguments' shapes, strides, dtypes and scalar values, integer tensors' values, the grids), so
the same launch recorded twice is one launch, and tuning.yaml names it in its shapes.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from aot_tune.errors import TuneError
from aot_tune.fileio import write_atomic

#: The folder beside the manifest that holds the recordings, one ``<entry>.json`` each.
RECORDINGS = "recordings"
FORMAT = 1
#: The module of the launcher recorded entries name (aot_tune.record.replay).
REPLAY = "aot_tune.record.replay"
#: The bench dim naming a shape's recorded launch, and the key dim of its tensors' dtypes.
LAUNCH_DIM = "recorded"
DTYPES_DIM = "arg_dtypes"
#: Integer tensors up to this many elements are kept by value (index tensors such as cu_seqlens
#: decide what a kernel does); floating tensors up to ``SMALL_FLOATS`` (scales, per-head
#: parameters). Larger ones are rebuilt as random data of their recorded range.
INT_VALUES = 1 << 16
SMALL_FLOATS = 256


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument: enough to rebuild one like it (values where kept, else its range)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str  # torch's name: float16, int32, ...
    values: tuple | None = None  # row-major, where kept
    low: float | None = None
    high: float | None = None
    mean: float | None = None
    std: float | None = None

    def identity(self) -> dict:
        """What decides the work a kernel does on it: integer values (indices) do, floating data
        and its statistics do not (a workload's random data would make every run a new launch)."""
        integral = not self.dtype.startswith(("float", "bfloat"))
        return {"shape": list(self.shape), "stride": list(self.stride), "dtype": self.dtype,
                "values": list(self.values) if self.values is not None and integral else None}

    def as_json(self) -> dict:
        return {"shape": list(self.shape), "stride": list(self.stride), "dtype": self.dtype,
                "values": list(self.values) if self.values is not None else None,
                "low": self.low, "high": self.high, "mean": self.mean, "std": self.std}

    @staticmethod
    def from_json(data: Mapping) -> "TensorSpec":
        values = data.get("values")
        return TensorSpec(tuple(data["shape"]), tuple(data["stride"]), str(data["dtype"]),
                          tuple(values) if values is not None else None,
                          data.get("low"), data.get("high"), data.get("mean"), data.get("std"))


@dataclass(frozen=True)
class Argument:
    """One argument of a launch, by name: a tensor, the same tensor as an earlier argument, a
    Triton dtype (``tl.float32``) or a plain scalar (int, float, bool, str, None)."""

    name: str
    tensor: TensorSpec | None = None
    same_as: str | None = None
    tl_dtype: str | None = None
    scalar: Any = None

    def as_json(self, identity: bool = False) -> list:
        if self.tensor is not None:
            value = {"tensor": self.tensor.identity() if identity else self.tensor.as_json()}
        elif self.same_as is not None:
            value = {"same_as": self.same_as}
        elif self.tl_dtype is not None:
            value = {"tl_dtype": self.tl_dtype}
        else:
            value = {"scalar": self.scalar}
        return [self.name, value]

    @staticmethod
    def from_json(item: list) -> "Argument":
        name, value = item
        if "tensor" in value:
            return Argument(name, tensor=TensorSpec.from_json(value["tensor"]))
        if "same_as" in value:
            return Argument(name, same_as=value["same_as"])
        if "tl_dtype" in value:
            return Argument(name, tl_dtype=value["tl_dtype"])
        return Argument(name, scalar=value["scalar"])


@dataclass(frozen=True)
class RecordedLaunch:
    """One distinct launch: its arguments in call order, its grid under each of the kernel's
    configs (None where the grid could not be computed), the autotuner's key for it, the config
    the library launched, and which tensors the launch wrote."""

    arguments: tuple[Argument, ...]
    grids: tuple[tuple[int, ...] | None, ...]
    key: tuple
    library_config: dict
    chosen_by: str  # "library": its own cache held it; "first": its first config after pruning
    written: tuple[str, ...]
    options: dict = field(default_factory=dict)  # launch keywords beyond the arguments
    #: Per config, what the kernel's ``@triton.heuristics`` beneath the autotuner computed for this
    #: launch (None where one failed), for a replay of its recorded source; None: not recorded.
    heuristics: tuple[dict | None, ...] | None = None

    def launch_id(self, kernel: str) -> str:
        identity = {"kernel": kernel, "arguments": [a.as_json(identity=True) for a in self.arguments],
                    "grids": [list(g) if g is not None else None for g in self.grids], "options": self.options}
        return "L" + hashlib.sha256(_dumps(identity).encode()).hexdigest()[:15]

    def tensors(self) -> list[Argument]:
        return [a for a in self.arguments if a.tensor is not None]

    def dtypes(self) -> list[str]:
        """The dtype of every tensor argument, in call order (the autotuner's key holds them)."""
        named = {a.name: a for a in self.arguments}
        return [(a.tensor or named[a.same_as].tensor).dtype for a in self.arguments
                if a.tensor is not None or a.same_as is not None]

    def primary_dtype(self) -> str:
        """The dtype a manifest entry is tuned for, whose tolerance the check applies: the first
        floating tensor the launch wrote (its output), else the first floating tensor, else the
        first tensor's."""
        tensors = {a.name: a.tensor.dtype for a in self.arguments if a.tensor is not None}
        written = [tensors[n] for n in self.written if n in tensors]
        for dtypes in (written, list(tensors.values())):
            floating = [d for d in dtypes if d.startswith(("float", "bfloat"))]
            if floating:
                return floating[0]
        return next(iter(tensors.values()), "float32")

    def as_json(self) -> dict:
        grids = [list(g) if g is not None else None for g in self.grids]
        distinct = sorted({json.dumps(g) for g in grids})
        data = {"arguments": [a.as_json() for a in self.arguments], "grids": [json.loads(g) for g in distinct],
                "grid_of_config": [distinct.index(json.dumps(g)) for g in grids], "key": list(self.key),
                "library_config": self.library_config, "chosen_by": self.chosen_by, "written": list(self.written),
                "options": self.options}
        if self.heuristics is not None:  # absent where none was recorded: a recording made before keeps its bytes
            values = [_dumps(h) for h in self.heuristics]
            distinct = sorted(set(values))
            data["heuristics"] = [json.loads(h) for h in distinct]
            data["heuristics_of_config"] = [distinct.index(h) for h in values]
        return data

    @staticmethod
    def from_json(data: Mapping) -> "RecordedLaunch":
        grids = [tuple(g) if g is not None else None for g in data["grids"]]
        heuristics = None
        if "heuristics" in data:
            values = [dict(h) if h is not None else None for h in data["heuristics"]]
            heuristics = tuple(values[i] for i in data["heuristics_of_config"])
            if len(heuristics) != len(data["grid_of_config"]):
                raise ValueError("a launch's heuristics do not match its configs")
        return RecordedLaunch(tuple(Argument.from_json(a) for a in data["arguments"]),
                              tuple(grids[i] for i in data["grid_of_config"]), tuple(data["key"]),
                              dict(data["library_config"]), str(data["chosen_by"]), tuple(data["written"]),
                              dict(data.get("options") or {}), heuristics)


@dataclass(frozen=True)
class RecordedKernel:
    """An autotuned kernel as its decorator declares it, and its recorded launches by id; and per
    GPU target, the median seconds of its compiles in the first recording that saw it compile
    (a cold Triton cache): kept, not re-measured, so recording again writes the same bytes."""

    ref: str  # module:attr of the object the library launches
    key: tuple[str, ...]
    configs: tuple[dict, ...]
    reset_to_zero: tuple[str, ...] = ()
    restore_value: tuple[str, ...] = ()
    hooks: tuple[str, ...] = ()  # which of pre_hook / post_hook / prune_configs_by the decorator sets
    launches: dict[str, RecordedLaunch] = field(default_factory=dict)
    compile_s: dict[str, float] = field(default_factory=dict)
    #: The kernel's Triton source (``triton_compat.kernel_source.capture``), which the stages rebuild
    #: instead of importing the library; None with ``source_refused`` saying why where it cannot be.
    source: dict | None = None
    source_refused: str = ""

    def same_decorator(self, other: "RecordedKernel") -> bool:
        return (self.ref, self.key, self.configs) == (other.ref, other.key, other.configs)

    def merged(self, other: "RecordedKernel") -> "RecordedKernel":
        """These launches and the other's new ones (a launch recorded before keeps its record), and
        so the compile seconds of each target; the other's source, where it recorded one (the
        newer recording: an upgraded library's)."""
        source, refused = (other.source, other.source_refused) if other.source or other.source_refused \
            else (self.source, self.source_refused)
        return RecordedKernel(self.ref, self.key, self.configs, self.reset_to_zero, self.restore_value, self.hooks,
                              {**other.launches, **self.launches}, {**other.compile_s, **self.compile_s},
                              source, refused)

    def as_json(self) -> dict:
        data = {"format": FORMAT, "kernel": self.ref, "key": list(self.key), "configs": list(self.configs),
                "reset_to_zero": list(self.reset_to_zero), "restore_value": list(self.restore_value),
                "hooks": list(self.hooks),
                "launches": {lid: launch.as_json() for lid, launch in sorted(self.launches.items())}}
        if self.compile_s:  # absent where none was seen: a recording made before keeps its bytes
            data["compile_s"] = dict(sorted(self.compile_s.items()))
        if self.source is not None:
            data["source"] = self.source
        if self.source_refused:
            data["source_refused"] = self.source_refused
        return data

    @staticmethod
    def from_json(data: Mapping) -> "RecordedKernel":
        compile_s = {str(target): float(seconds) for target, seconds in (data.get("compile_s") or {}).items()}
        if not all(math.isfinite(s) and s >= 0 for s in compile_s.values()):
            raise ValueError("a compile_s value is not a number of seconds")
        return RecordedKernel(str(data["kernel"]), tuple(data["key"]), tuple(dict(c) for c in data["configs"]),
                              tuple(data.get("reset_to_zero") or ()), tuple(data.get("restore_value") or ()),
                              tuple(data.get("hooks") or ()),
                              {lid: RecordedLaunch.from_json(l) for lid, l in data["launches"].items()}, compile_s,
                              dict(data["source"]) if data.get("source") is not None else None,
                              str(data.get("source_refused") or ""))


def _dumps(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def recording_path(root: str | os.PathLike, entry: str) -> Path:
    return Path(root) / RECORDINGS / f"{entry}.json"


def write_recording(path: Path, kernel: RecordedKernel) -> bool:
    """Write ``kernel``'s recording atomically; False (nothing written) where the bytes are the same."""
    data = kernel.as_json()
    launches = data.pop("launches")
    head = json.dumps(data, sort_keys=True, indent=1, allow_nan=False)
    body = ",\n".join(f" {json.dumps(lid)}: {_dumps(launch)}" for lid, launch in launches.items())
    text = head[:-2] + ',\n "launches": {\n' + body + "\n }\n}\n"  # a launch a line: diffs read by launch
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text.encode())
    return True


def read_recording(path: Path) -> RecordedKernel:
    """One recording file; a file that is not one is a clear error, never a silent skip."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, this aot_tune reads {FORMAT}")
        return RecordedKernel.from_json(data)
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise TuneError(f"{path}: not a recording aot_tune can read ({exc}); "
                        f"fix: restore it from git, or delete it and record the workload again") from None

