"""Element-wise vector addition: the smallest kernel, useful as a tuner smoke test.

Contract used by the tuner: ``add_kernel``, ``make_inputs``, ``reference``, ``add``.
Key dim: ``n`` (number of elements).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from aot_tune.runtime import TunedTable

_TABLE = TunedTable("vector_add", default={"BLOCK_SIZE": 1024, "num_warps": 4, "num_stages": 1})


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


def add(x: torch.Tensor, y: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """Launch ``add_kernel``; shape-driven only, so it also works on meta tensors."""
    if x.shape != y.shape or not (x.is_contiguous() and y.is_contiguous()):
        raise ValueError("add: x and y must be contiguous tensors of the same shape")
    n = x.numel()
    if config is None:
        config = _TABLE.lookup(x.dtype, n=n)
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, config["BLOCK_SIZE"]),)
    add_kernel[grid](x, y, out, n, **config)
    return out
