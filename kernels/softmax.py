"""Numerically stable row-wise softmax of an (M, N) matrix, one program per row.

A whole row lives in registers (BLOCK_N >= N), so each element is read once and
written once; that is why BLOCK_N must cover N rather than loop over column blocks.
Key dims: ``M``, ``N``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from aot_tune.runtime import TunedTable

_TABLE = TunedTable("softmax", default={"BLOCK_N": 1024, "num_warps": 4, "num_stages": 1})


@triton.jit
def softmax_kernel(x_ptr, out_ptr, N, stride_xm, stride_om, BLOCK_N: tl.constexpr):
    """Softmax of row ``program_id(0)``; padding lanes load -inf so they add exp(-inf)=0."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride may exceed 2**31 on big inputs
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    y = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * stride_om + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def make_inputs(shape: dict[str, int], dtype: torch.dtype, device) -> tuple[torch.Tensor]:
    """One random (M, N) matrix; scaled by 3 so the max-subtraction actually matters."""
    return (3 * torch.randn(shape["M"], shape["N"], dtype=dtype, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    """torch.softmax over the last dim in float32, returned in the input dtype."""
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def vendor(x: torch.Tensor) -> torch.Tensor:
    """torch.softmax in the input dtype: the vendor baseline of reports."""
    return torch.softmax(x, dim=-1)


def softmax(x: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """Launch ``softmax_kernel`` with one program per row.

    An explicit config whose BLOCK_N < N is a caller error (ValueError); a table
    config that does not cover N is widened to next_power_of_2(N).
    """
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError("softmax: x must be 2-D with unit stride in the last dim")
    M, N = x.shape
    if config is None:
        config = _TABLE.lookup(x.dtype, M=M, N=N)
        if config["BLOCK_N"] < N:
            config = {**config, "BLOCK_N": triton.next_power_of_2(N)}
    elif config["BLOCK_N"] < N:
        raise ValueError(f"softmax: config BLOCK_N={config['BLOCK_N']} < N={N}")
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    softmax_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), **config)
    return out
