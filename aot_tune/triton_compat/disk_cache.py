"""Triton's on-disk cache: counting its hits, and moving an entry to another cache folder.

What this relies on (triton 3.6 to 3.9), and why:

* ``triton.knobs.compilation.listener`` is called after every ``triton.compile`` with
  ``cache_hit``; we count hits to prove the bench stage reuses the compile stage's work.
* The on-disk cache keeps one compile in ``$TRITON_CACHE_DIR/<base32 of the kernel hash>/``
  (``runtime.cache._base32``; the hash is ``CompiledKernel.hash``, 3.6 and 3.9): ``<name>.json``
  (metadata), the binary (``<name>.cubin``), the IRs, and ``__grp__<name>.json`` listing the
  files of the group by ABSOLUTE path. A launch is a hit when the group file is there and the
  files it lists exist (3.9 requires all of them, 3.6 drops missing ones); it reads only the
  metadata and the binary. So an entry moved to another cache folder needs its group rewritten.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator


class CacheHitCounter:
    """Counts Triton compiles that were served from its on-disk cache: those of the kernels the
    compile stage built, not the bench engine's own (``not_counted``)."""

    #: The bench engine's own jit functions (its comparison kernel): no compile stage builds them.
    not_counted: set = set()

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0

    def __call__(self, *, cache_hit: bool, src: Any = None, **_: Any) -> None:
        if getattr(src, "fn", None) in self.not_counted:
            return
        if cache_hit:
            self.hits += 1
        else:
            self.misses += 1

    @contextlib.contextmanager
    def installed(self) -> Iterator["CacheHitCounter"]:
        from triton import knobs

        previous: Callable | None = knobs.compilation.listener
        knobs.compilation.listener = self
        try:
            yield self
        finally:
            knobs.compilation.listener = previous

    @staticmethod
    @contextlib.contextmanager
    def suspended() -> Iterator[None]:
        """Counts nothing meanwhile (a baseline's kernels: not the compile stage's to serve)."""
        from triton import knobs

        previous = knobs.compilation.listener
        knobs.compilation.listener = None
        try:
            yield
        finally:
            knobs.compilation.listener = previous


#: Files of a cache entry a launch needs: its metadata and its binary (the IRs only serve debugging).
_LAUNCH_SUFFIXES = (".json", ".cubin")


def cache_entry_folder(kernel_hash: str) -> str:
    """The folder name of a compile in Triton's disk cache: base32 of the hex kernel hash, unpadded."""
    import base64

    return base64.b32encode(bytes.fromhex(kernel_hash)).decode().rstrip("=")


def pack_cache_entry(cache_dir: str, kernel_hash: str) -> dict[str, bytes] | None:
    """The files a launch of this compile reads from ``cache_dir`` (file name -> bytes), with the
    group file listing only them; None when the entry is not there."""
    import json

    folder = os.path.join(cache_dir, cache_entry_folder(kernel_hash))
    try:
        groups = [name for name in os.listdir(folder) if name.startswith("__grp__")]
    except FileNotFoundError:
        return None
    files: dict[str, bytes] = {}
    for group_name in groups:
        with open(os.path.join(folder, group_name)) as handle:
            children = json.load(handle).get("child_paths") or {}
        kept = sorted(name for name in children if name.endswith(_LAUNCH_SUFFIXES))
        for name in kept:
            try:
                with open(os.path.join(folder, name), "rb") as handle:
                    files[name] = handle.read()
            except FileNotFoundError:
                return None
        files[group_name] = json.dumps({"child_paths": kept}).encode()
    return files or None


def install_cache_entry(cache_dir: str, kernel_hash: str, files: dict[str, bytes]) -> bool:
    """Write a packed entry into ``cache_dir`` so a launch there finds it; the group file goes last,
    with this folder's absolute paths, so a half-installed entry is a miss, never a broken hit.
    Returns False when the entry was already there."""
    import json
    import tempfile

    folder = os.path.join(cache_dir, cache_entry_folder(kernel_hash))
    groups = {name: json.loads(data)["child_paths"] for name, data in files.items() if name.startswith("__grp__")}
    if all(os.path.exists(os.path.join(folder, name)) for name in groups):
        return False
    os.makedirs(folder, exist_ok=True)

    def write(name: str, data: bytes) -> None:
        handle, temp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temp, os.path.join(folder, name))

    for name, data in files.items():
        if name not in groups:
            write(name, data)
    for name, children in groups.items():
        paths = {child: os.path.join(folder, child) for child in children}
        write(name, json.dumps({"child_paths": paths}).encode())
    return True


def triton_cache_dir() -> str:
    """Triton's cache folder as Triton resolves it now (``TRITON_CACHE_DIR`` is read on each use)."""
    from triton import knobs

    return knobs.cache.dir
