"""Warm start: finding a compiled kernel in Triton's cache without Triton's cache key, and doing
Triton's one-time set-up of a process before its first launch.

What this relies on (triton 3.6 to 3.9), and why:

* ``JITFunction.create_binder`` (the ``default_factory`` of ``device_caches``, once per device)
  sets ``self.compile = triton.compile``, and ``_do_compile`` calls
  ``self.compile(src, target=target, options=options.__dict__)`` on an in-memory miss (3.6 and
  3.9). ``triton.compile`` then keys its disk cache on sha256(``get_cache_key(src, backend,
  options, env_vars)``), whose first part, ``triton_key()``, hashes the ~500 MB libtriton library
  (0.4-0.8 s, once per process). Every other part is cheap: ``src.hash()``, the backend's target
  and ptxas, ``options.hash()`` and ``get_cache_invalidating_env_vars()``. A hit is loaded with
  ``CompiledKernel(src, metadata_group, hash)`` from ``get_cache_manager(hash).get_group(name.json)``.
* ``triton_key()`` (``triton.runtime.cache``, 3.6 and 3.9) is lru-cached: a process that computed
  it passes it on to the processes it forks.
"""
from __future__ import annotations

import functools
import os
import re
import sys
from typing import Any, Callable

from aot_tune.triton_compat.launch import jit_function
from aot_tune.triton_compat.target import create_driver


#: The Triton releases (major, minor) whose internals warm start was read against (listed above);
#: under any other, decorated kernels take Triton's own path.
WARM_START_RELEASES = ((3, 6), (3, 9))


def triton_release() -> tuple[int, int] | None:
    """(major, minor) of the Triton this process imported; None when none is (imports nothing)."""
    found = re.match(r"(\d+)\.(\d+)", str(getattr(sys.modules.get("triton"), "__version__", "")))
    return (int(found.group(1)), int(found.group(2))) if found else None


def warm_start_applies() -> bool:
    """Whether the imported Triton is one warm start was read against."""
    release = triton_release()
    return release is not None and WARM_START_RELEASES[0] <= release <= WARM_START_RELEASES[1]


def jit_with_compile_path(kernel: Any) -> Any | None:
    """The JIT function under decorators that keep what they wrap in ``.fn``, if it compiles
    through ``device_caches`` (what ``wrap_jit_compile`` routes); None otherwise (the
    interpreter). Imports nothing, so a kernel that is not Triton's costs no Triton import."""
    while not hasattr(kernel, "device_caches") and hasattr(kernel, "fn") and kernel.fn is not kernel:
        kernel = kernel.fn  # under aot_tune.autotune, triton.heuristics, ...
    return kernel if hasattr(kernel, "device_caches") else None


def wrap_jit_compile(jit_fn: Any, wrap: Callable[[Callable], Callable]) -> bool:
    """Make every ``triton.compile`` call of this JIT function go through ``wrap(compile)``, on
    every device, including devices first used later. False if ``jit_fn`` has no JIT compile path
    (the interpreter)."""
    jit_fn = jit_function(jit_fn)
    caches = getattr(jit_fn, "device_caches", None)
    factory = getattr(caches, "default_factory", None)
    if factory is None:
        return False
    if getattr(factory, "_aot_tune_wrapped", False):
        return True

    def create_binder():
        binder = factory()
        jit_fn.compile = wrap(jit_fn.compile)
        return binder

    create_binder._aot_tune_wrapped = True
    caches.default_factory = create_binder
    if caches and hasattr(jit_fn, "compile"):  # already launched on some device
        jit_fn.compile = wrap(jit_fn.compile)
    return True


@functools.lru_cache(maxsize=None)
def installation_identity() -> str:
    """Stands in for ``triton_key()``: the version, and size and mtime of libtriton and of the
    bundled ptxas (a stat, not a 500 MB hash). A reinstall or upgrade changes it."""
    import sysconfig

    import triton

    root = os.path.dirname(triton.__file__)
    ext = sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1]
    parts = [triton.__version__]
    for path in (os.path.join(root, "_C", f"libtriton.{ext}"), os.path.join(root, "backends", "nvidia", "bin", "ptxas")):
        try:
            stat = os.stat(path)
            parts.append(f"{path}:{stat.st_size}:{stat.st_mtime_ns}")
        except OSError:
            parts.append(f"{path}:absent")
    for name in ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH", "TRITON_LIBDEVICE_PATH"):
        parts.append(f"{name}={os.environ.get(name, '')}")
    return "|".join(parts)


def hash_kernel_source(kernel: Any) -> None:
    """Compute the kernel's source hash now (``JITFunction.cache_key``: its source and every
    function it calls, walked through their syntax trees), which its first launch would compute
    (5-10 ms a kernel of a library like fla). Kernels without one (the interpreter's) are left."""
    jit_fn = jit_with_compile_path(kernel)
    if jit_fn is not None:
        jit_fn.cache_key  # noqa: B018 - a cached property: reading it computes and keeps it


def warm_start_key(src: Any, target: Any, options: dict | None) -> str | None:
    """Everything ``triton.compile`` keys its disk cache on, with ``installation_identity()`` in
    place of ``triton_key()``; None when the cache is not Triton's plain file cache or a knob
    (always compile, IR override or dump, a stages hook) makes the key or the result differ."""
    import hashlib

    from triton import knobs
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler.compiler import make_backend

    if knobs.cache.manager_class is not None or knobs.compilation.always_compile or \
            knobs.compilation.override or knobs.compilation.dump_ir or \
            getattr(knobs.runtime, "add_stages_inspection_hook", None) is not None:
        return None
    if not hasattr(src, "fn") or target is None:  # only kernels compiled from Python source
        return None
    backend = make_backend(target)
    parsed = backend.parse_options(dict(options or {}, **src.parse_options()))
    env_vars = sorted(get_cache_invalidating_env_vars().items())
    key = f"{installation_identity()}-{src.hash()}-{target}-{parsed.hash()}-{env_vars}"
    return hashlib.sha256(key.encode()).hexdigest()


def load_cached_kernel(src: Any, cache_hash: str) -> Any | None:
    """The compiled kernel Triton's disk cache holds under ``cache_hash``, as ``triton.compile``
    would return it on a hit; None when the entry is gone. Tells the compilation listener."""
    from triton import knobs
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.cache import get_cache_manager

    metadata_filename = f"{src.name[:150]}.json"
    group = get_cache_manager(cache_hash).get_group(metadata_filename)
    if not group or metadata_filename not in group:
        return None
    kernel = CompiledKernel(src, group, cache_hash)
    listener = knobs.compilation.listener
    if listener is not None:
        listener(src=src, metadata=kernel.metadata._asdict(), metadata_group=group, times=None, cache_hit=True)
    return kernel


#: Modules Triton's native specializer imports on the first launch in a process (3.6 to 3.9:
#: named in libtriton), about 0.1 s of imports.
_FIRST_LAUNCH_IMPORTS = (
    "triton.experimental.gluon.language._layouts",
    "triton.experimental.gluon.language.amd._layouts",
    "triton.experimental.gluon.language.nvidia.blackwell",
    "triton.experimental.gluon.nvidia.hopper",
)


def hash_installation() -> None:
    """Compute Triton's hash of its own installation (``triton_key()``, 0.4-0.8 s) now, once, so
    that the processes forked from this one find it computed."""
    from triton.runtime.cache import triton_key

    triton_key()


def start_specializer() -> None:
    """Run Triton's native specializer once, on an int, so that its one-time set-up is done here
    and the processes forked from this one start with it. Triton 3.6's set-up imports torch (for
    a fast path on ``torch.Tensor``; 3.9's imports nothing): in a process without torch that
    import is blocked for the call, and the specializer then answers for tensors through its
    generic path (any object with ``data_ptr``), which gives the same answers (checked for
    dtypes, alignment, ints and tuples) at about 0.4 us more a tensor argument. Imported, it cost
    the fork server of a run of recorded kernels 3.5-3.8 s of its 4.6-5.3 s on an H200 host with a
    cold page cache, on the critical path of every compile; a worker that needs torch (a GPU
    device worker) imports it after the fork, beside the compiles."""
    try:
        from triton.runtime.jit import mangle_type
    except ImportError:  # another Triton: its first launch does it
        return
    blocked = "torch" not in sys.modules
    if blocked:
        sys.modules["torch"] = None  # type: ignore[assignment] - makes ``import torch`` raise ImportError
    try:
        mangle_type(1)
    except (ImportError, AttributeError, TypeError):  # another Triton: its first launch does it
        pass
    finally:
        if blocked:
            del sys.modules["torch"]


def import_first_launch_modules() -> None:
    """Import the modules Triton's specializer imports on the first launch in a process (no
    driver, no CUDA: the fork server of the workers does this too)."""
    import importlib

    for name in _FIRST_LAUNCH_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:  # another Triton version: the first launch imports what it needs
            pass


def warm_first_lookup() -> None:
    """Triton's one-time host work before a process's first kernel lookup, done now: its hash of
    its installation, the modules its specializer imports, and the specializer's first call. The
    fork server does it for the workers forked from it; a spawned GPU worker does it itself."""
    hash_installation()
    # Also what aot_tune.runtime.warm_start imports on a thread when a decorated kernel is
    # imported: a worker that launches right after would import them on two threads at once
    # (Python can then report an import deadlock).
    import_first_launch_modules()
    start_specializer()


def prepare_runtime() -> None:
    """Do Triton's one-time set-up of its first launch now: the modules its specializer imports
    and its driver (``create_driver``), so that the first launch does not wait for them."""
    import_first_launch_modules()
    create_driver()
