"""Compiling for a GPU that is not there: the target, its limits, how a compile fails, and the
toolchain and environment a compile depends on.

What this relies on (triton 3.6 to 3.9), and why:

* ``triton.runtime.driver`` keeps the active driver in ``_active`` and lets us swap it with
  ``set_active``. Compiling through the *real* launch path (``JITFunction.run`` with
  ``warmup=True``) under a stand-in driver that only names a target reproduces exactly the
  specialization, options and attrs a later launch on that GPU computes, so the later launch
  finds the compile in Triton's on-disk cache. This works with no GPU and no CUDA driver.
  ``_active`` and ``_default`` stay None until a driver is created: the fork server of the
  workers checks that none was.
* Launch options and errors: ``PTXASError`` at compile time; ``OutOfResources`` only when a
  module is loaded on a device, hence the shared-memory check against the target's limit
  (made between the lowering stages by ``stages.watched_stages``).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any, Iterator

#: Environment that is part of Triton's cache key; pinned identically for compile and bench.
PINNED_ENV = {"TRITON_DEFAULT_FP_FUSION": "1"}

#: Per-block opt-in shared memory limit (bytes) per compute capability, from CUDA's tables.
SHARED_MEMORY_LIMIT = {
    70: 98304, 72: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912, 89: 101376,
    90: 232448, 100: 232448, 103: 232448, 120: 101376,
}


def pin_environment() -> None:
    """Set the cache-key environment the same way in every process that compiles or launches."""
    for name, value in PINNED_ENV.items():
        os.environ.setdefault(name, value)


def parse_target(target: str) -> int:
    """'sm90' -> 90."""
    return int(target.removeprefix("sm"))


def shared_memory_limit(arch: int) -> int:
    """The per-block shared memory a kernel may use on this compute capability."""
    if arch in SHARED_MEMORY_LIMIT:
        return SHARED_MEMORY_LIMIT[arch]
    known = max(a for a in SHARED_MEMORY_LIMIT if a <= arch)
    return SHARED_MEMORY_LIMIT[known]


def versions() -> dict[str, str]:
    """Toolchain versions that decide compiled code, read without importing torch or triton."""
    from importlib import metadata

    found = {}
    for dist in ("triton", "torch"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = "absent"
    return found


class _TargetOnlyDriver:
    """Answers the questions ``JITFunction.run`` asks of a driver, for a GPU that isn't there."""

    def __init__(self, arch: int, torch_device: Any, device_base: int = 1000) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", arch, 32)
        self._torch_device = torch_device
        self._device_base = device_base

    def get_current_target(self):
        return self.target

    def get_current_device(self) -> int:
        # JITFunction keys its per-device binder cache on this: one fake device per target.
        return self._device_base + self.target.arch

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_active_torch_device(self):
        return self._torch_device

    def is_active(self) -> bool:
        return True


_driver_lock = threading.Lock()


#: Fake device ids for specialization capture: its per-device kernel cache never holds a compile,
#: so every launch reaches ``_do_compile`` even in a worker that compiled the same kernel.
_CAPTURE_DEVICE_BASE = 2000


@contextlib.contextmanager
def target_driver(arch: int, *, capture: bool = False) -> Iterator[None]:
    """Make Triton compile for ``sm{arch}`` as if that GPU were present. Its torch device (which a
    compile never reads) is "meta" where torch is imported, else None: a compile of a kernel
    rebuilt from its recorded source runs without torch."""
    from triton.runtime import driver

    torch = sys.modules.get("torch")
    with _driver_lock:
        previous = driver._active
        base = _CAPTURE_DEVICE_BASE if capture else 1000
        driver.set_active(_TargetOnlyDriver(arch, torch.device("meta") if torch else None, base))
        try:
            yield
        finally:
            driver._active = previous


def create_driver() -> None:
    """Create Triton's real driver now (which loads its CUDA utilities; it creates no CUDA
    context). It is created under ``_driver_lock``: ``driver.active`` assigns the driver it
    creates, which must not land inside a ``target_driver`` block and replace its stand-in (a
    compile worker imports decorated kernels, which start this on a thread, and then
    cross-compiles)."""
    from triton.runtime import driver

    with _driver_lock:
        driver.active.get_current_target  # noqa: B018 - instantiates the active driver


def triton_driver_created() -> bool:
    """Whether Triton's driver was created (or a stand-in set) in this process: the fork server
    of the GPU workers must not have created it. Imports nothing, since a process that has not
    imported Triton's driver module created none."""
    runtime = sys.modules.get("triton.runtime.driver")
    driver = getattr(runtime, "driver", None)
    return driver is not None and (getattr(driver, "_active", None) is not None
                                   or getattr(driver, "_default", None) is not None)


class SharedMemoryExceeded(Exception):
    """Raised inside a compile as soon as the kernel's shared memory is known to exceed the limit."""

    def __init__(self, shared: int, limit: int, proven_at: str = "llir") -> None:
        at_least = "at least " if proven_at != "llir" else ""
        super().__init__(f"needs {at_least}{shared} bytes of shared memory, the target allows {limit}")
        self.shared = shared
        self.limit = limit
        self.proven_at = proven_at


def compile_error_kind(exc: BaseException) -> str | None:
    """Map a Triton exception to a typed failure reason, or None if it isn't a compile failure."""
    from triton.compiler.errors import CompilationError, CompileTimeAssertionFailure
    from triton.runtime.errors import OutOfResources, PTXASError

    if isinstance(exc, SharedMemoryExceeded):
        return "shared_memory"
    if isinstance(exc, CompileTimeAssertionFailure):
        return "compile_assertion"
    if isinstance(exc, PTXASError):
        return "ptxas_error"
    if isinstance(exc, OutOfResources):
        return "out_of_resources"
    if isinstance(exc, CompilationError):
        return "compile_error"
    return None
