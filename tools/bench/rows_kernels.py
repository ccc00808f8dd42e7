"""A gated activation as inference engines write it (SwiGLU: ``silu(gate) * up``), for
tools.bench.rows_workload: one program per row, the row walked in blocks of BLOCK_N, keyed (as
libraries key it) on the hidden size alone."""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def swiglu_kernel(gate_ptr, up_ptr, out_ptr, N, stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        gate = tl.load(gate_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(up_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        out = gate * tl.sigmoid(gate) * up
        tl.store(out_ptr + row * stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def make_inputs(shape: dict, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``M`` rows (tokens) of ``N`` (the hidden size): the gate and up projections' outputs."""
    return (torch.randn(shape["M"], shape["N"], dtype=dtype, device=device),
            torch.randn(shape["M"], shape["N"], dtype=dtype, device=device))


def reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return (torch.nn.functional.silu(gate.float()) * up.float()).to(gate.dtype)


def vendor(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up


def swiglu(gate: torch.Tensor, up: torch.Tensor, config: dict) -> torch.Tensor:
    M, N = gate.shape
    out = torch.empty_like(gate)
    swiglu_kernel[(M,)](gate, up, out, N, gate.stride(0), **config)
    return out
