"""Which export files aot_tune wrote. A JSON file has no header to say so, so
``.aot_tune/exports.json`` keeps the sha256 of each file written (path -> digest). A file may be
written over when it holds what we would write, or what we recorded writing; anything else is
someone's, and is refused.

``.aot_tune/`` is not checked in, so a fresh clone has no record: there a checked-in export holds
what its checked-in cache exports, and ``claim`` records it before a run changes that cache."""
from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from aot_tune.fileio import write_atomic

REGISTRY = Path(".aot_tune") / "exports.json"
_lock = threading.Lock()  # the generate tasks of several kernels run on doit's threads


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def recorded(root: Path) -> dict[str, str]:
    """Path (relative, '/'-separated) -> sha256 of what was written there; empty when absent or unreadable
    (a broken record only makes aot_tune more careful: it proves nothing is ours)."""
    try:
        data = json.loads((root / REGISTRY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}


def record(root: Path, written: dict[str, bytes]) -> None:
    """Note that these files hold what aot_tune wrote (or would write)."""
    if not written:
        return
    with _lock:
        files = recorded(root)
        fresh = {path: digest(data) for path, data in written.items()}
        if all(files.get(path) == sha for path, sha in fresh.items()):
            return
        files.update(fresh)
        text = json.dumps({"version": 1, "files": dict(sorted(files.items()))}, indent=1) + "\n"
        write_atomic(root / REGISTRY, text)


def ours(path: str, current: bytes, wanted: bytes, files: dict[str, str]) -> bool:
    """Whether an existing file may be written over: it holds what we would write, or what we recorded."""
    return current == wanted or files.get(path) == digest(current)
