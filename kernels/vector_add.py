"""Element-wise vector addition: the smallest kernel, and the example of ``@aot_tune.autotune``.

Contract used by the tuner: ``add_kernel``, ``make_inputs``, ``reference``, ``add``, and
``vendor`` (the baseline reports compare with).
Key dim: ``n`` (number of elements). ``add`` passes no config: the decorator launches the
generated table's config, or the candidate ``doit tune`` is measuring.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

import aot_tune

# The first config is the fallback for a launch the table cannot serve (see docs/reference/runtime.md).
_CONFIGS = [
    triton.Config({"BLOCK_SIZE": block}, num_warps=warps, num_stages=1)
    for block, warps in ((1024, 4), (256, 2), (512, 4), (2048, 4), (4096, 8))
]


@aot_tune.autotune(configs=_CONFIGS, key=["n"], table="vector_add")
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    """Each program adds one BLOCK_SIZE chunk; the tail chunk is masked."""
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def make_inputs(shape: dict[str, int], dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Two random vectors of length ``shape["n"]``."""
    n = shape["n"]
    return (torch.randn(n, dtype=dtype, device=device), torch.randn(n, dtype=dtype, device=device))


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y computed in float32, returned in the input dtype."""
    return (x.float() + y.float()).to(x.dtype)


def vendor(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """torch.add in the input dtype: the vendor baseline of reports."""
    return torch.add(x, y)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Launch ``add_kernel``; shape-driven only, so it also works on meta tensors."""
    if x.shape != y.shape or not (x.is_contiguous() and y.is_contiguous()):
        raise ValueError("add: x and y must be contiguous tensors of the same shape")
    n = x.numel()
    out = torch.empty_like(x)
    add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n)
    return out
