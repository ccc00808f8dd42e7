"""Every use of Triton internals lives here, so a Triton upgrade touches one file.

Supported: triton 3.6 to 3.9. What this module relies on, and why:

* ``triton.runtime.driver`` keeps the active driver in ``_active`` and lets us swap it with
  ``set_active``. Compiling through the *real* launch path (``JITFunction.run`` with
  ``warmup=True``) under a stand-in driver that only names a target reproduces exactly the
  specialization, options and attrs a later launch on that GPU computes, so the later launch
  finds the compile in Triton's on-disk cache. This works with no GPU and no CUDA driver.
* ``triton.knobs.compilation.listener`` is called after every ``triton.compile`` with
  ``cache_hit``; we count hits to prove the bench stage reuses the compile stage's work.
* Launch options and errors: ``PTXASError`` at compile time; ``OutOfResources`` only when a
  module is loaded on a device, hence the shared-memory check against the target's limit.
* A backend's ``add_stages(stages, options, language)`` fills an ordered dict of stages (ttir,
  ttgir, llir, ptx, cubin). Shared memory is allocated in the llir stage; we stop right after it
  when the kernel cannot fit, skipping PTX and ptxas (more than half of such a compile).
* ``JITFunction.run`` binds the arguments, then calls ``self._do_compile(key, signature, device,
  constexprs, options, attrs, warmup)`` when its in-memory cache misses, and returns None when
  that returns None (3.6 and 3.9). Replacing ``_do_compile`` on the kernel object therefore
  yields the exact signature, constexprs and attrs a launch specializes on, without compiling:
  the specialization step of the plan.
* ``CompiledKernel._init_handles()`` loads a compiled kernel onto the device (3.6 and 3.9);
  a launch calls it the first time, and it synchronizes the device.
* Warm start (see the section at the end): ``JITFunction.compile`` is set per device by
  ``create_binder``; Triton's disk-cache key is sha256 of ``triton_key()`` (a hash of the whole
  libtriton library) plus cheap parts; ``CompiledKernel(src, group, hash)`` loads a hit.
* The wheel ships ``cuobjdump`` (``knobs.nvidia.cuobjdump``, 3.6 and 3.9); ``-res-usage`` on a
  cubin gives registers, stack and local memory per function, with no GPU.
* The on-disk cache keeps one compile in ``$TRITON_CACHE_DIR/<base32 of the kernel hash>/``
  (``runtime.cache._base32``; the hash is ``CompiledKernel.hash``, 3.6 and 3.9): ``<name>.json``
  (metadata), the binary (``<name>.cubin``), the IRs, and ``__grp__<name>.json`` listing the
  files of the group by ABSOLUTE path. A launch is a hit when the group file is there and the
  files it lists exist (3.9 requires all of them, 3.6 drops missing ones); it reads only the
  metadata and the binary. So an entry moved to another cache folder needs its group rewritten.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

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
    """Make Triton compile for ``sm{arch}`` as if that GPU were present."""
    import torch
    from triton.runtime import driver

    with _driver_lock:
        previous = driver._active
        base = _CAPTURE_DEVICE_BASE if capture else 1000
        driver.set_active(_TargetOnlyDriver(arch, torch.device("meta"), base))
        try:
            yield
        finally:
            driver._active = previous


@dataclass
class CapturedCompile:
    """One compiled specialization of a kernel, as a launch would have produced it."""

    hash: str
    shared: int
    name: str
    cubin: bytes | None = None


def jit_function(kernel: Any) -> Any:
    """The JITFunction under decorators that keep what they wrap in ``.fn`` (aot_tune.autotune,
    triton.autotune, triton.heuristics); the one place the compile stage unwraps a kernel."""
    from triton.runtime.jit import JITFunction

    while not isinstance(kernel, JITFunction) and hasattr(kernel, "fn"):
        kernel = kernel.fn
    return kernel


@contextlib.contextmanager
def compile_instead_of_launch(jit_fn: Any) -> Iterator[list[CapturedCompile]]:
    """While active, ``jit_fn[grid](...)`` compiles (through the real launch path) but does not launch.
    ``jit_fn`` may be wrapped (``aot_tune.autotune``, ``triton.heuristics``): the JITFunction is patched."""
    jit_fn = jit_function(jit_fn)
    captured: list[CapturedCompile] = []
    original_run = type(jit_fn).run

    def run(*args, grid, warmup, **kwargs):
        kernel = original_run(jit_fn, *args, grid=grid, warmup=True, **kwargs)
        captured.append(CapturedCompile(kernel.hash, int(kernel.metadata.shared), kernel.metadata.name,
                                        kernel.asm.get("cubin")))
        return kernel

    jit_fn.run = run
    try:
        yield captured
    finally:
        del jit_fn.run


@contextlib.contextmanager
def load_instead_of_launch() -> Iterator[None]:
    """While active, every Triton kernel launch in this thread loads its binary onto the current
    device (``CompiledKernel._init_handles``, as a first launch would) but runs nothing. A load
    synchronizes the device (measured: it returns only after queued work ends), so the bench
    engine loads a pass's kernels before it queues any work. A load that fails (a kernel over the
    device's shared memory, say) raises as the launch would."""
    from triton.runtime.jit import JITFunction

    original_run = JITFunction.run
    owner = threading.get_ident()

    def run(self, *args, grid, warmup, **kwargs):
        if threading.get_ident() != owner:
            return original_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        kernel = original_run(self, *args, grid=grid, warmup=True, **kwargs)
        if kernel is not None:
            kernel._init_handles()
        return None

    JITFunction.run = run
    try:
        yield
    finally:
        JITFunction.run = original_run


@dataclass(frozen=True)
class Specialization:
    """What a launch specializes on, besides the config: argument types, the values Triton turned
    into constants (ints equal to 1), divisibility/alignment attrs, and launch options the launch
    function adds itself. Two launches with equal specializations and configs hit one cache entry."""

    signature: tuple[tuple[str, str], ...]
    constants: tuple[tuple[str, str], ...]
    attrs: tuple[tuple[str, str], ...]
    options: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        """A short human-readable form, e.g. ``a_ptr:*fp16/16 M:i32/16 N:i32 stride_ak=1``."""
        attrs = dict(self.attrs)
        parts = [f"{name}:{kind}" + ("/16" if "16" in attrs.get(name, "") else "")
                 for name, kind in self.signature if kind != "constexpr"]
        parts += [f"{name}={value}" for name, value in self.constants]
        parts += [f"{name}={value}" for name, value in self.options]
        return " ".join(parts)


@contextlib.contextmanager
def capture_specializations(jit_fn: Any, config: dict) -> Iterator[list[Specialization]]:
    """While active, ``jit_fn[grid](...)`` records its specialization and neither compiles nor
    launches. Config values (constexprs and launch options) are left out: the compile task
    names its config separately. Use under ``target_driver(arch, capture=True)``."""
    jit_fn = jit_function(jit_fn)
    captured: list[Specialization] = []
    names = [p.name for p in jit_fn.params]
    original_run = type(jit_fn).run

    def run(*args, grid, warmup, **kwargs):
        extra_options = tuple(sorted((k, repr(v)) for k, v in kwargs.items()
                                     if k not in config and k not in names))
        seen = len(captured)
        original_run(jit_fn, *args, grid=grid, warmup=True, **kwargs)
        if len(captured) == seen:  # answered from an in-memory cache: cannot happen on a capture device
            raise RuntimeError(f"{jit_fn.__name__}: the launch did not reach the compiler; run the "
                               f"capture under target_driver(arch, capture=True)")
        last = captured[-1]
        captured[-1] = Specialization(last.signature, last.constants, last.attrs, extra_options)

    def do_compile(key, signature, device, constexprs, options, attrs, warmup):
        def name(path) -> str:
            return ".".join([names[path[0]], *map(str, path[1:])])

        captured.append(Specialization(
            signature=tuple((k, str(v)) for k, v in signature.items() if k not in config),
            constants=tuple(sorted((name(p), repr(getattr(v, "value", v))) for p, v in constexprs.items()
                                   if names[p[0]] not in config)),
            attrs=tuple(sorted((name(p), repr(v)) for p, v in attrs.items() if v and names[p[0]] not in config)),
            options=(),
        ))
        return None

    jit_fn.run = run
    jit_fn._do_compile = do_compile
    try:
        yield captured
    finally:
        del jit_fn.run
        del jit_fn._do_compile


@dataclass(frozen=True)
class ResourceUsage:
    """Per-thread resources of a compiled kernel, read from its cubin (no GPU needed)."""

    registers: int
    stack_bytes: int
    local_bytes: int

    @property
    def spills(self) -> int:
        """Spilled 32-bit words: local memory per thread / 4, what Triton reports as ``n_spills``
        (there from the driver's local-size attribute, which covers the stack frame)."""
        return (self.stack_bytes + self.local_bytes) // 4


def cuobjdump_path() -> str | None:
    """The cuobjdump shipped with the Triton wheel (or TRITON_CUOBJDUMP_PATH), if there is one."""
    try:
        from triton import knobs

        return knobs.nvidia.cuobjdump.path
    except Exception:  # absent from this wheel, or not runnable here
        return None


def resource_usage(cubin: bytes, function: str) -> ResourceUsage | str:
    """Registers, stack and local memory of ``function`` in a cubin, or why they are unknown."""
    import re
    import subprocess
    import tempfile

    tool = cuobjdump_path()
    if tool is None:
        return "no cuobjdump in this Triton installation"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        try:
            out = subprocess.run([tool, "-res-usage", handle.name], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"cuobjdump failed: {exc}"
    match = re.search(rf"Function {re.escape(function)}:\s*\n\s*(.*)", out.stdout)
    if out.returncode != 0 or match is None:
        return f"cuobjdump -res-usage gave no line for {function} (exit {out.returncode})"
    fields = dict(re.findall(r"([A-Z]+):(\d+)", match.group(1)))
    try:
        return ResourceUsage(int(fields["REG"]), int(fields.get("STACK", 0)), int(fields.get("LOCAL", 0)))
    except KeyError:
        return f"cuobjdump -res-usage printed no REG count for {function}"


class SharedMemoryExceeded(Exception):
    """Raised inside a compile as soon as the kernel's shared memory is known to exceed the limit."""

    def __init__(self, shared: int, limit: int) -> None:
        super().__init__(f"needs {shared} bytes of shared memory, the target allows {limit}")
        self.shared = shared
        self.limit = limit


@contextlib.contextmanager
def stop_when_shared_memory_exceeds(arch: int, limit: int) -> Iterator[None]:
    """Abort a compile for ``sm{arch}`` after the llir stage if its shared memory is over ``limit``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    backend_type = type(make_backend(GPUTarget("cuda", arch, 32)))
    original = backend_type.add_stages

    def add_stages(self, stages, *args, **kwargs):
        original(self, stages, *args, **kwargs)
        names = list(stages)
        if "llir" not in names or names[-1] == "llir":
            return  # an unfamiliar pipeline: compile fully, the result is checked afterwards
        after = names[names.index("llir") + 1]
        next_stage = stages[after]

        def checked(src, metadata):
            shared = int(metadata.get("shared") or 0)
            if shared > limit:
                raise SharedMemoryExceeded(shared, limit)
            return next_stage(src, metadata)

        stages[after] = checked

    backend_type.add_stages = add_stages
    try:
        yield
    finally:
        backend_type.add_stages = original


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


class CacheHitCounter:
    """Counts Triton compiles that were served from its on-disk cache."""

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0

    def __call__(self, *, cache_hit: bool, **_: Any) -> None:
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


# -- warm start: finding a compiled kernel in Triton's cache without Triton's cache key ----------
#
# ``JITFunction.create_binder`` (the ``default_factory`` of ``device_caches``, once per device)
# sets ``self.compile = triton.compile``, and ``_do_compile`` calls
# ``self.compile(src, target=target, options=options.__dict__)`` on an in-memory miss (3.6 and
# 3.9). ``triton.compile`` then keys its disk cache on sha256(``get_cache_key(src, backend,
# options, env_vars)``), whose first part, ``triton_key()``, hashes the ~500 MB libtriton library
# (0.4-0.8 s, once per process). Every other part is cheap: ``src.hash()``, the backend's target
# and ptxas, ``options.hash()`` and ``get_cache_invalidating_env_vars()``. A hit is loaded with
# ``CompiledKernel(src, metadata_group, hash)`` from ``get_cache_manager(hash).get_group(name.json)``.


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


def triton_cache_dir() -> str:
    from triton import knobs

    return knobs.cache.dir


#: Modules Triton's native specializer imports on the first launch in a process (3.6 to 3.9:
#: named in libtriton), about 0.1 s of imports.
_FIRST_LAUNCH_IMPORTS = (
    "triton.experimental.gluon.language._layouts",
    "triton.experimental.gluon.language.amd._layouts",
    "triton.experimental.gluon.language.nvidia.blackwell",
    "triton.experimental.gluon.nvidia.hopper",
)


def import_first_launch_modules() -> None:
    """Import the modules Triton's specializer imports on the first launch in a process (no
    driver, no CUDA: the fork server of the workers does this too)."""
    import importlib

    for name in _FIRST_LAUNCH_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:  # another Triton version: the first launch imports what it needs
            pass


def prepare_runtime() -> None:
    """Do Triton's one-time set-up of its first launch now: the modules its specializer imports
    and its driver (which loads its CUDA utilities; it creates no CUDA context). The driver is
    created under ``_driver_lock``: ``driver.active`` assigns the driver it creates, which must
    not land inside a ``target_driver`` block and replace its stand-in (a compile worker
    imports decorated kernels, which start this on a thread, and then cross-compiles)."""
    import_first_launch_modules()
    from triton.runtime import driver

    with _driver_lock:
        driver.active.get_current_target  # noqa: B018 - instantiates the active driver
