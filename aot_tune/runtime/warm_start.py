"""A tuned kernel's first launch in a process loads its compiled code, instead of rehashing Triton.

Triton finds a compiled kernel in its disk cache by a key that begins with ``triton_key()``: a
hash of Triton's own installation, libtriton included (about 500 MB). Computing it costs 0.4-0.8 s
and is paid by the first launch of any kernel in every process, even when every kernel is
already compiled. For a tuned kernel, whose config is known before the launch, that hash is the
first call's whole cost.

``install(kernel)`` records, for each compile Triton does for that kernel (hit or miss), an index
entry next to Triton's cache (``<TRITON_CACHE_DIR>/aot_tune-warm-start/``): its key is everything
Triton keys on except ``triton_key()``, which is replaced by the installation's version and the
size and mtime of libtriton and ptxas (``triton_compat.installation_identity``); its value is
Triton's own cache hash. A later process with the same kernel source, specialization, options,
environment and Triton installation finds the entry and loads the kernel with Triton's own loader;
anything else (no entry, the cache entry gone, a custom cache manager) takes Triton's normal path
and records the entry again. ``AOT_TUNE_WARM_START=0`` turns it off.

The first launch of any kernel in a process also waits for Triton's own one-time set-up: the
modules its specializer imports and its driver (about 0.14 s on an H200 host). ``install`` starts
that set-up on a background thread, once per process, so a program that does anything else
before its first launch (allocating inputs, loading weights) does not wait for it there.

``aot_tune.autotune`` installs it on the kernels it decorates; a kernel launched directly can
call ``aot_tune.runtime.warm_start.install(kernel)`` once. Imports neither torch nor triton until a
compile happens.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Callable

from aot_tune.fileio import remove_stale_temps, write_atomic

INDEX_FOLDER = "aot_tune-warm-start"
_lock = threading.Lock()


def enabled() -> bool:
    return os.environ.get("AOT_TUNE_WARM_START", "1") != "0"


def install(kernel: Any) -> bool:
    """Route the kernel's compiles through the warm-start index; False where that does not apply
    (the interpreter, a Triton release it was not read against, or switched off)."""
    if not enabled():
        return False
    from aot_tune import triton_compat

    if not triton_compat.warm_start_applies():
        return False
    kernel = triton_compat.jit_with_compile_path(kernel)
    if kernel is None:
        return False
    wrapped = triton_compat.wrap_jit_compile(kernel, _shortcut)
    if wrapped:
        _prepare_runtime_once()
    return wrapped


_prepared = threading.Event()


def _prepare_runtime_once() -> None:
    """Start Triton's first-launch set-up on a daemon thread (once); a launch that comes first
    simply does the rest itself, under Triton's own import lock."""
    with _lock:
        if _prepared.is_set():
            return
        _prepared.set()
    from aot_tune import triton_compat

    def prepare() -> None:
        try:
            triton_compat.prepare_runtime()
        except Exception:  # noqa: BLE001 - no GPU or driver here: the first launch reports it
            pass

    threading.Thread(target=prepare, name="aot_tune-warm-start", daemon=True).start()


def _shortcut(compile_fn: Callable) -> Callable:
    if getattr(compile_fn, "_aot_tune_warm_start", False):
        return compile_fn

    def compile_with_index(src, target=None, options=None, **kwargs):
        from aot_tune import triton_compat

        try:
            key = triton_compat.warm_start_key(src, target, options) if not kwargs else None
        except Exception:  # a Triton that computes its key differently: take its normal path
            key = None
        if key is not None:
            index = WarmStartIndex.for_kernel(src.fn)
            cache_hash = index.get(key)
            if cache_hash is not None:
                kernel = triton_compat.load_cached_kernel(src, cache_hash)
                if kernel is not None:
                    return kernel
        kernel = compile_fn(src, target=target, options=options, **kwargs)
        if key is not None:
            index.put(key, kernel.hash)
        return kernel

    compile_with_index._aot_tune_warm_start = True
    return compile_with_index


class WarmStartIndex:
    """index key -> Triton cache hash for one kernel function, one JSON file per function."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, str] | None = None

    @classmethod
    def for_kernel(cls, jit_fn: Any) -> "WarmStartIndex":
        from aot_tune import triton_compat

        name = f"{getattr(jit_fn, 'module', '')}.{getattr(jit_fn, '__name__', 'kernel')}"
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
        return cls(Path(triton_compat.triton_cache_dir()) / INDEX_FOLDER / f"{safe}.json")

    def entries(self) -> dict[str, str]:
        if self._entries is None:
            try:
                loaded = json.loads(self.path.read_text())
                self._entries = {k: v for k, v in loaded.items() if isinstance(v, str)} \
                    if isinstance(loaded, dict) else {}
            except (OSError, ValueError):  # none yet, or torn by hand: start over
                self._entries = {}
        return self._entries

    def get(self, key: str) -> str | None:
        return self.entries().get(key)

    def put(self, key: str, cache_hash: str) -> None:
        """Merge one entry into the file (re-read first: other processes may have added some)."""
        with _lock:
            self._entries = None
            entries = self.entries()
            if entries.get(key) == cache_hash:
                return
            entries[key] = cache_hash
            try:
                write_atomic(self.path, json.dumps(entries, indent=0, sort_keys=True))
                remove_stale_temps(self.path)  # what a process killed mid-write left
            except OSError:  # a read-only cache still launches; it just stays cold
                pass
