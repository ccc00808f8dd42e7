"""RMSNorm over the last dim of an (M, N) matrix: y = x / sqrt(mean(x^2) + eps) * w.

One program per row with the whole row in registers (BLOCK_N >= N), accumulated in
float32 so fp16/bf16 inputs do not lose precision in the sum of squares.
Key dims: ``M``, ``N``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from aot_tune.runtime import TunedTable

EPS = 1e-6
_TABLE = TunedTable("rmsnorm", default={"BLOCK_N": 1024, "num_warps": 4, "num_stages": 1})


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, N, stride_xm, stride_om, eps, BLOCK_N: tl.constexpr):
    """Normalise row ``program_id(0)``; masked lanes load 0 so they do not change the sum."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride may exceed 2**31 on big inputs
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    y = x * rstd * w
    tl.store(out_ptr + row * stride_om + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def make_inputs(shape: dict[str, int], dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """A random (M, N) matrix and a random weight vector of N centred on 1."""
    x = torch.randn(shape["M"], shape["N"], dtype=dtype, device=device)
    w = 1 + 0.5 * torch.randn(shape["N"], dtype=dtype, device=device)
    return x, w


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """RMSNorm in float32, returned in the input dtype."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + EPS) * weight.float()
    return y.to(x.dtype)


def vendor(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """torch.nn.functional.rms_norm in the input dtype: the vendor baseline of reports."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, EPS)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """Launch ``rmsnorm_kernel`` with one program per row.

    An explicit config whose BLOCK_N < N is a caller error (ValueError); a table
    config that does not cover N is widened to next_power_of_2(N).
    """
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError("rmsnorm: x must be 2-D with unit stride in the last dim")
    M, N = x.shape
    if weight.shape != (N,) or not weight.is_contiguous():
        raise ValueError(f"rmsnorm: weight must be a contiguous vector of N={N}")
    if config is None:
        config = _TABLE.lookup(x.dtype, M=M, N=N)
        if config["BLOCK_N"] < N:
            config = {**config, "BLOCK_N": triton.next_power_of_2(N)}
    elif config["BLOCK_N"] < N:
        raise ValueError(f"rmsnorm: config BLOCK_N={config['BLOCK_N']} < N={N}")
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    rmsnorm_kernel[(M,)](x, weight, out, N, x.stride(0), out.stride(0), EPS, **config)
    return out
