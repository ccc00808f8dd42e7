"""The launch path, intercepted: a launch that compiles, loads or records its specialization
instead of running.

What this relies on (triton 3.6 to 3.9), and why:

* ``JITFunction.run`` binds the arguments, then calls ``self._do_compile(key, signature, device,
  constexprs, options, attrs, warmup)`` when its in-memory cache misses, and returns None when
  that returns None (3.6 and 3.9). Replacing ``_do_compile`` on the kernel object therefore
  yields the exact signature, constexprs and attrs a launch specializes on, without compiling:
  the specialization step of the plan.
* ``CompiledKernel._init_handles()`` loads a compiled kernel onto the device (3.6 and 3.9);
  a launch calls it the first time, and it synchronizes the device.
* Triton's specializer reads of a tensor argument only its ``dtype`` (by its name: ``str()`` gives
  ``torch.<name>``), its ``data_ptr()`` (divisible by 16 or not) and, for a ``tensor_descriptor``,
  its layout: an object with those two answers compiles what a real tensor would (``StandIn``).
* In 3.6 the CUDA driver's ``CudaLauncher(src, metadata)`` builds a C launcher for the kernel's
  signature with gcc (``make_launcher``, then ``compile_module_from_src`` into Triton's cache,
  keyed by the launcher's source) when a kernel is first loaded. 3.9 launches through one generic
  launcher and has no ``make_launcher``.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator


@dataclass
class CapturedCompile:
    """One compiled specialization of a kernel, as a launch would have produced it."""

    hash: str
    shared: int
    name: str
    cubin: bytes | None = None
    kernel: Any = field(default=None, repr=False, compare=False)  # Triton's CompiledKernel


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
                                        kernel.asm.get("cubin"), kernel))
        return kernel

    jit_fn.run = run
    try:
        yield captured
    finally:
        del jit_fn.run


@contextlib.contextmanager
def find_instead_of_launch() -> Iterator[list]:
    """While active, every Triton kernel launch in this thread finds its compiled kernel (Triton's
    in-memory cache, then its disk cache, compiling on a miss) and runs nothing; the kernels
    found are appended to the yielded list. Host work only: it does not wait for the device, so
    the bench engine finds kernels while the GPU runs other configs' timed launches, then loads
    them (``load_found``), which does wait. A kernel that cannot be found (it fails to compile)
    raises as the launch would."""
    from triton.runtime.jit import JITFunction

    original_run = JITFunction.run
    owner = threading.get_ident()
    found: list = []

    def run(self, *args, grid, warmup, **kwargs):
        if threading.get_ident() != owner:
            return original_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        kernel = original_run(self, *args, grid=grid, warmup=True, **kwargs)
        if kernel is not None:
            found.append(kernel)
        return None

    JITFunction.run = run
    try:
        yield found
    finally:
        JITFunction.run = original_run


def load_found(kernel: Any) -> None:
    """Load a kernel ``find_instead_of_launch`` found onto the current device, as its first launch
    would. It synchronizes the device (measured: it returns only after queued work ends), and a
    kernel the device cannot run (over its shared memory, say) raises here."""
    kernel._init_handles()


def prebuild_launcher(kernel: Any) -> bool:
    """Build into Triton's cache the C launcher that the kernel's first load would build, and say
    whether one was built or found. Where Triton builds one per kernel signature (3.6: gcc, 0.25-0.34
    s each on the H100 host), a compile worker doing it leaves the device's first launch a cache
    hit instead of a build on the bench's critical path. Nothing is built where Triton has no
    per-kernel launcher, or on a host without the CUDA driver's library to link it against."""
    if not builds_launchers():
        return False
    from triton.backends.nvidia import driver as nvidia

    try:
        nvidia.CudaLauncher(kernel.src, kernel.metadata)
    except Exception:  # noqa: BLE001 - the bench's own first launch builds it, and reports what fails
        return False
    return True


@functools.lru_cache(maxsize=None)
def builds_launchers() -> bool:
    """Whether this Triton builds a C launcher per kernel signature, and this host can link one."""
    try:
        from triton.backends.nvidia import driver as nvidia

        if not (hasattr(nvidia, "make_launcher") and hasattr(nvidia, "compile_module_from_src")):
            return False
        nvidia.libcuda_dirs()  # asserts where no libcuda.so.1 is found
    except Exception:  # noqa: BLE001 - no CUDA backend, or no driver library on this host
        return False
    return True


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


class StandIn:
    """A tensor argument of a compile without torch, in place of a meta tensor: what Triton's
    specialization reads of a tensor (its dtype, by name as torch writes it, and an address
    divisible by 16, as a real tensor's is), and its shape and strides for a launch function."""

    __slots__ = ("dtype", "shape", "_stride")

    def __init__(self, dtype: str, shape: tuple[int, ...] = (1,), stride: tuple[int, ...] = (1,)) -> None:
        self.dtype = DTypeName.named(dtype)
        self.shape, self._stride = tuple(shape), tuple(stride)

    def data_ptr(self) -> int:
        return 0

    def stride(self, dim: int | None = None) -> Any:
        return self._stride if dim is None else self._stride[dim]


class DTypeName:
    """A dtype as Triton's specialization reads it: by its name. One object per name, kept for
    the process: Triton caches what it read of a dtype by the object (by its id, in triton 3.9's
    native specializer), and a freed object's id, reused by another dtype, read as the first."""

    __slots__ = ("name",)
    _named: dict[str, "DTypeName"] = {}

    def __init__(self, name: str) -> None:
        self.name = name

    @classmethod
    def named(cls, name: str) -> "DTypeName":
        return cls._named.setdefault(name, cls(name))

    def __str__(self) -> str:
        return f"torch.{self.name}"

    __repr__ = __str__
