"""C = (A @ B) * scales: an fp8 (e4m3) GEMM with float32 accumulation and a bfloat16 output.

The scales undo the quantization of A and B: per tensor (one float32 each, as
``torch._scaled_mm``'s tensor-wise mode) or per row (a float32 per row of A and per column of
B, its row-wise mode). B is given as ``b`` of shape (K, N) whose transpose is contiguous
(K-major, what fp8 ``wgmma`` and cuBLASLt both want), as ``torch._scaled_mm`` takes it.
Programs use grouped ordering as ``kernels/gemm.py``. Key dims: ``M``, ``N``, ``K`` and
``per_row`` (a bool: the scale granularity, so per-row and per-tensor launches keep separate
entries). The dtype key is the combination the tensors make, ``fp8_w8a8`` in tuning.yaml
(``a``, ``b`` float8_e4m3fn, ``out`` bfloat16).
"""
from __future__ import annotations

from typing import Mapping

import torch
import triton
import triton.language as tl

from aot_tune.runtime import TunedTable

#: Largest finite float8_e4m3fn value: inputs are quantized to fill its range.
E4M3_MAX = 448.0
_TABLE = TunedTable(
    "fp8_gemm",
    default={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
)


@triton.jit
def fp8_gemm_kernel(
    a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    PER_ROW: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """One program computes one BLOCK_M x BLOCK_N tile of C over a 1-D grid."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    local = pid % per_group
    tile_m = first_m + local % rows_in_group
    tile_n = local // rows_in_group

    # Rows and columns past the edge wrap around (their results are masked at the store), so
    # only a K tail needs a load mask.
    offs_m = (tile_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :].to(tl.int64) * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:  # K a multiple of BLOCK_K (every LLM shape): no masks in the main loop
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_ok = offs_k < K - k0 * BLOCK_K
            a = tl.load(a_ptrs, mask=k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    if PER_ROW:
        acc = acc * tl.load(scale_a_ptr + offs_m)[:, None] * tl.load(scale_b_ptr + offs_n)[None, :]
    else:
        acc = acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
    rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows[:, None].to(tl.int64) * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def _quantize(x: torch.Tensor, dim: int | None, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` scaled into the fp8 range (per tensor, or per slice along ``dim``) and the float32
    scale that undoes it."""
    amax = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    scale = amax.float().clamp(min=1e-12) / E4M3_MAX
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(dtype), scale


def make_inputs(shape: Mapping, dtype: Mapping[str, torch.dtype], device) -> tuple:
    """Quantized random A (M, K) and B (K, N, K-major) with their scales: per row of A and per
    column of B when ``per_row``, else one each. ``dtype`` is the combination by argument."""
    M, N, K, per_row = shape["M"], shape["N"], shape["K"], bool(shape["per_row"])
    a, scale_a = _quantize(torch.randn(M, K, device=device), 1 if per_row else None, dtype["a"])
    bt, scale_b = _quantize(torch.randn(N, K, device=device), 1 if per_row else None, dtype["b"])
    if per_row:
        scale_b = scale_b.reshape(1, N)
    else:
        scale_a, scale_b = scale_a.reshape(()), scale_b.reshape(())
    return a, bt.t(), scale_a, scale_b


def reference(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    """The dequantized product in float32, returned in bfloat16."""
    return ((a.float() @ b.float()) * scale_a * scale_b).to(torch.bfloat16)


def vendor(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor) -> torch.Tensor:
    """``torch._scaled_mm`` (cuBLASLt's fp8 GEMM): the vendor baseline of reports."""
    return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)


def fp8_gemm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
             out: torch.Tensor | None = None, config: dict | None = None) -> torch.Tensor:
    """Launch ``fp8_gemm_kernel`` into ``out`` (a new bfloat16 (M, N) if None); row-wise scales
    when the scales have one value per row of A and per column of B."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"fp8_gemm: incompatible shapes {tuple(a.shape)} @ {tuple(b.shape)}")
    (M, K), N = a.shape, b.shape[1]
    per_row = scale_a.numel() != 1 or scale_b.numel() != 1
    if per_row and (scale_a.numel() != M or scale_b.numel() != N):
        raise ValueError(f"fp8_gemm: row-wise scales must have M={M} and N={N} values")
    c = torch.empty((M, N), dtype=torch.bfloat16, device=a.device) if out is None else out
    if c.shape != (M, N):
        raise ValueError(f"fp8_gemm: out has shape {tuple(c.shape)}, not ({M}, {N})")
    if config is None:  # keyed by the combination a, b and out make (fp8_w8a8 in tuning.yaml)
        config = _TABLE.lookup(_TABLE.dtype_of(a.dtype, b.dtype, c.dtype), M=M, N=N, K=K, per_row=per_row)
    grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]),)
    fp8_gemm_kernel[grid](
        a, b, c, scale_a, scale_b, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        PER_ROW=per_row, EVEN_K=K % config["BLOCK_K"] == 0, **config,
    )
    return c
