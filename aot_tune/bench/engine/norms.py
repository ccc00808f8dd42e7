"""The check's comparison in one pass over the output and its reference (a Triton kernel).

Compared with torch's ops, which convert both tensors to float64 and subtract before two norms
(about 70 bytes of memory traffic and three float64 temporaries per element), one kernel reads
each tensor once and writes a few float64 partial sums per block: for a 16-bit output, 4 bytes
of traffic per element. On a memory-bound kernel with a large output (a norm over 16384 rows of
14336) the comparison otherwise costs more device time than the kernel it checks. The sums are
kept in float64, as before, so the verdict is the same.

The kernel compiles once per (output dtype, reference dtype) in a device worker; ``warm``
compiles the common ones as the worker starts, while the compiles run, and ``precompile`` has a
compile worker put them in the run's Triton cache before that, so the worker only loads them.
"""
from __future__ import annotations

from typing import Any

#: Elements each program sums (its partial sums are float64: three per block).
BLOCK = 4096
#: Output and reference dtypes the kernel reads (names of torch dtypes); others use torch's ops.
SUPPORTED = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2",
             "int8", "uint8", "int16", "int32", "int64")
#: Read through float32 first: Triton converts these to float64 only by way of float32.
NARROW_FLOATS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
#: Pairs compiled ahead in a GPU worker (each compile takes about half a second).
WARM_DTYPES = ("float16", "bfloat16", "float32")

_kernel = None


def _dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def supported(output: Any, expected: Any) -> bool:
    """Whether the kernel can compare these two tensors (same device, dtypes it reads)."""
    return (output.device == expected.device and _dtype_name(output) in SUPPORTED
            and _dtype_name(expected) in SUPPORTED and output.numel() > 0)


def _compiled():
    """The Triton kernel, defined on first use (importing this module imports no triton)."""
    global _kernel
    if _kernel is None:
        import triton
        import triton.language as tl

        @triton.jit
        def partial_norms(out_ptr, ref_ptr, partial_ptr, n, BLOCK: tl.constexpr, OUT_VIA_F32: tl.constexpr,
                          REF_VIA_F32: tl.constexpr):
            pid = tl.program_id(0)
            offsets = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            out = tl.load(out_ptr + offsets, mask=mask, other=0)
            ref = tl.load(ref_ptr + offsets, mask=mask, other=0)
            if OUT_VIA_F32:
                out = out.to(tl.float32)
            if REF_VIA_F32:
                ref = ref.to(tl.float32)
            out = out.to(tl.float64)
            ref = ref.to(tl.float64)
            diff = out - ref
            tl.store(partial_ptr + pid * 3, tl.sum(diff * diff, axis=0))
            tl.store(partial_ptr + pid * 3 + 1, tl.sum(ref * ref, axis=0))
            tl.store(partial_ptr + pid * 3 + 2, tl.sum((out != out).to(tl.float64), axis=0))  # NaNs

        from aot_tune.triton_compat import CacheHitCounter

        CacheHitCounter.not_counted.add(partial_norms)
        _kernel = partial_norms
    return _kernel


def norms(output: Any, expected: Any) -> Any:
    """A float64 tensor [all finite (1 or 0), ||output - expected||, ||expected||] on the
    tensors' device, queued (not waited for). ``supported`` must hold."""
    import torch

    out, ref = output.reshape(-1), expected.reshape(-1)
    n = out.numel()
    blocks = -(-n // BLOCK)
    partials = torch.empty((blocks, 3), dtype=torch.float64, device=out.device)
    _compiled()[(blocks,)](out, ref, partials, n, BLOCK=BLOCK, OUT_VIA_F32=_dtype_name(out) in NARROW_FLOATS,
                           REF_VIA_F32=_dtype_name(ref) in NARROW_FLOATS, num_warps=8)
    squares, ref_squares, nans = partials.sum(dim=0).unbind()
    # An infinite output makes its squared difference infinite (or NaN against an infinite
    # reference): no finite output of a float32 or narrower dtype can overflow a float64 sum.
    return torch.stack([((nans == 0) & torch.isfinite(squares)).double(), squares.sqrt(), ref_squares.sqrt()])


def precompile(arch: int) -> int:
    """Compile the kernel for ``WARM_DTYPES`` for ``sm{arch}`` into this process's Triton cache
    as ``warm`` will launch it, with neither a GPU nor torch (a compile worker does it as a run
    starts): the device worker's ``warm`` then loads them (0.6 s), where compiling them took
    0.9-1.4 s of its start-up on an H200 host, with the benches waiting. Returns the kernels
    compiled (0 where this Triton cannot: the worker compiles them then)."""
    from aot_tune import triton_compat

    kernel = _compiled()
    try:
        with triton_compat.target_driver(arch), triton_compat.compile_instead_of_launch(kernel) as compiled:
            partials = triton_compat.StandIn("float64")
            for name in WARM_DTYPES:
                x = triton_compat.StandIn(name)
                kernel[(1,)](x, x, partials, BLOCK, BLOCK=BLOCK, OUT_VIA_F32=name in NARROW_FLOATS,
                             REF_VIA_F32=name in NARROW_FLOATS, num_warps=8)
        for found in compiled:  # and the C launcher its first load builds, where Triton builds one
            triton_compat.prebuild_launcher(found.kernel)
    except Exception:  # noqa: BLE001 - an optimization: the device worker compiles what is missing
        return 0
    return len(compiled)


def warm(device: str) -> None:
    """Compile the kernel for ``WARM_DTYPES`` now: a GPU worker does it before it says it is up
    (while the compiles run), so no bench holds the device while it compiles, and no compile
    runs beside a pass's launches."""
    import torch

    try:
        for name in WARM_DTYPES:
            x = torch.ones(BLOCK, dtype=getattr(torch, name), device=device)
            norms(x, x)
        torch.cuda.synchronize(device)
    except Exception:  # noqa: BLE001 - warming is an optimization; the first comparison compiles instead
        pass
