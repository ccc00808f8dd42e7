"""The machine's history of tuning runs: what each real ``doit tune`` measured against what its
forecast predicted (aot_tune.pipeline.calibration writes and reads it), per part, kept in the
user's cache folder so that it outlives a project's ``.aot_tune/``: a fresh project, or a kernel
library this machine never tuned, is forecast from what this machine did for other kernels.

Where: ``$AOT_TUNE_HISTORY`` (a file; empty, ``0`` or ``off`` turns the history off), else
``$XDG_CACHE_HOME/aot_tune/history.json``, else ``~/.cache/aot_tune/history.json``. Each entry is
keyed by what makes runs comparable (``MachineKey``: backend, device, toolchain, CPU count,
compile workers); the file keeps the last ``KEPT_PER_KEY`` runs of a key and ``KEPT`` in all,
is written atomically under a lock, and a file that is not one (torn, foreign, another version)
is ignored with one warning line and replaced by the next run.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aot_tune.fileio import write_atomic
from aot_tune.runs.progress import eprint

HISTORY_ENV = "AOT_TUNE_HISTORY"
#: Values of ``$AOT_TUNE_HISTORY`` that turn the history off.
OFF = frozenset({"", "0", "off", "no", "none", "false"})
HISTORY_FILE = "history.json"
VERSION = 1
#: Runs kept per machine key, and in all (the oldest go first).
KEPT_PER_KEY = 20
KEPT = 200

_warned: set[str] = set()  # files already warned about, once a process


@dataclass(frozen=True)
class MachineKey:
    """What makes two runs' parts comparable: the backend and device model they measured on, the
    toolchain that compiled, the machine's CPU count and the run's compile workers (``-n``)."""

    backend: str
    device: str
    toolchain: str
    cpus: int
    jobs: int

    def closeness(self, other: "MachineKey") -> int:
        """How comparable ``other``'s runs are: 3 the same key, 2 another toolchain, 1 another
        toolchain and worker count on the same CPUs, 0 not comparable (another backend, device
        or CPU count)."""
        if (self.backend, self.device, self.cpus) != (other.backend, other.device, other.cpus):
            return 0
        return 1 + (self.jobs == other.jobs) + (self.jobs == other.jobs and self.toolchain == other.toolchain)


#: What ``closeness`` means, for the dry run's line.
CLOSENESS = {3: "this machine, device, toolchain and -n", 2: "this machine, device and -n, another toolchain",
             1: "this machine and device, another toolchain or -n"}


@dataclass
class HistoryEntry:
    """One run: its key, when it started, its kernels and wall seconds, and per part what it
    measured (``observed``) and what its forecast predicted (``predicted``), in seconds or rates."""

    key: MachineKey
    started_at: str
    kernels: list[str]
    wall_s: float
    observed: dict[str, float] = field(default_factory=dict)
    predicted: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> "HistoryEntry | None":
        """The entry, or None for one that is not (foreign, torn, another version)."""
        try:
            return cls(MachineKey(**data["key"]), str(data["started_at"]), [str(k) for k in data["kernels"]],
                       float(data["wall_s"]), _numbers(data.get("observed", {})), _numbers(data.get("predicted", {})))
        except (TypeError, ValueError, KeyError, AttributeError):
            return None


def _numbers(values: Mapping) -> dict[str, float]:
    found = {str(k): float(v) for k, v in values.items()}
    if not all(math.isfinite(v) for v in found.values()):
        raise ValueError("not a finite number")
    return found


def history_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """The history's file, or None when ``$AOT_TUNE_HISTORY`` turns it off."""
    env = os.environ if environ is None else environ
    if HISTORY_ENV in env:
        value = env[HISTORY_ENV].strip()
        return None if value.lower() in OFF else Path(value).expanduser()
    cache = env.get("XDG_CACHE_HOME", "").strip()
    base = Path(cache) if cache and os.path.isabs(cache) else Path(env.get("HOME") or Path.home()) / ".cache"
    return base / "aot_tune" / HISTORY_FILE


def read_history(path: Path | None = None, warn=None) -> list[HistoryEntry]:
    """The history's entries, oldest first: none when it is off or missing; a file that is not a
    history is ignored, with one line to ``warn`` (stderr) the first time a process reads it."""
    path = history_path() if path is None else path
    if path is None:
        return []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except OSError as err:
        _warn(path, f"cannot read it ({err.strerror})", warn)
        return []
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("runs"), list):
            raise ValueError("not a history of this version")
    except ValueError:
        _warn(path, "it is not a history this version reads, so it is ignored and the next run replaces it", warn)
        return []
    found = (HistoryEntry.from_dict(r) for r in data["runs"] if isinstance(r, dict))
    return [e for e in found if e is not None]


def append_history(entry: HistoryEntry, path: Path | None = None, warn=None) -> bool:
    """Add ``entry`` (keeping ``KEPT_PER_KEY`` runs of its key, ``KEPT`` in all); False where the
    history is off or cannot be written (with one warning line)."""
    path = history_path() if path is None else path
    if path is None:
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _Locked(path):
            runs = read_history(path, warn) + [entry]
            runs = bounded(runs)
            write_atomic(path, json.dumps({"version": VERSION, "runs": [r.to_dict() for r in runs]},
                                          indent=None, separators=(",", ":"), sort_keys=True))
    except OSError as err:
        _warn(path, f"cannot write it ({err.strerror or err})", warn)
        return False
    return True


def bounded(runs: Sequence[HistoryEntry]) -> list[HistoryEntry]:
    """The newest ``KEPT_PER_KEY`` runs of each key and the newest ``KEPT`` in all, in order."""
    kept, per_key = [], {}
    for run in reversed(runs):
        if per_key.get(run.key, 0) < KEPT_PER_KEY and len(kept) < KEPT:
            per_key[run.key] = per_key.get(run.key, 0) + 1
            kept.append(run)
    return kept[::-1]


def comparable(runs: Sequence[HistoryEntry], key: MachineKey) -> tuple[list[HistoryEntry], int]:
    """The runs of the closest tier of ``key`` (``MachineKey.closeness``) and that tier; ([], 0)
    when none is comparable."""
    best = max((key.closeness(r.key) for r in runs), default=0)
    return ([r for r in runs if key.closeness(r.key) == best] if best else []), best


def _warn(path: Path, why: str, warn) -> None:
    if str(path) in _warned:
        return
    _warned.add(str(path))
    line = f"aot_tune: warning: the machine's run history {path}: {why} (set {HISTORY_ENV}=off to turn it off)"
    (warn or eprint)(line)


class _Locked:
    """An exclusive lock beside ``path`` (``path.lock``) for a read-modify-write, where fcntl exists."""

    def __init__(self, path: Path) -> None:
        self.path = path.with_name(path.name + ".lock")
        self.handle = None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # Windows: the last writer wins, the file is still whole
            return self
        self.handle = open(self.path, "a+")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            self.handle.close()
