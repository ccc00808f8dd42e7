"""Atomic file writes: a killed run leaves either the old file or the new one, never a torn one."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write to a temp file in the same folder, fsync, then rename over the target."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _mode_for(path: Path) -> int:
    """The existing file's mode, else what a plain open() would give (mkstemp always uses 0600)."""
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def remove_stale_temps(path: str | os.PathLike, older_than_s: float = 60.0) -> int:
    """Remove the temp files a killed ``write_atomic`` of ``path`` left behind (older than
    ``older_than_s``, so a write in flight in another process keeps its own); returns how many."""
    import time

    path = Path(path)
    removed = 0
    for temp in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            if time.time() - temp.stat().st_mtime > older_than_s:
                temp.unlink()
                removed += 1
        except OSError:  # gone meanwhile, or not ours to remove
            pass
    return removed
