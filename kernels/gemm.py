"""C = A @ B with float32 accumulation and grouped ("L2-friendly") program ordering.

Programs are numbered so that GROUP_M consecutive row-blocks sweep the column-blocks
together: the B tiles they share stay hot in L2 instead of being refetched per row.
Edges are masked, so any M, N, K work. Key dims: ``M``, ``N``, ``K``.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from aot_tune.runtime import TunedTable

_TABLE = TunedTable(
    "gemm",
    default={"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3},
)


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """One program computes one BLOCK_M x BLOCK_N tile of C over a 1-D grid."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # Grouped ordering: a group is GROUP_M row-blocks x all column-blocks, walked
    # column-major inside the group; the last group may have fewer row-blocks.
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    local = pid % per_group
    tile_m = first_m + local % rows_in_group
    tile_n = local // rows_in_group

    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :].to(tl.int64) * stride_bn
    mask_m = offs_m[:, None] < M
    mask_n = offs_n[None, :] < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = offs_k < K - k0
        a = tl.load(a_ptrs, mask=mask_m & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & mask_n, other=0.0)
        # "ieee": fp32 inputs stay exact fp32 (no TF32) so results match the reference.
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m & mask_n)


def make_inputs(shape: dict[str, int], dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random A (M, K) and B (K, N); B is scaled by 1/sqrt(K) so C stays O(1) in fp16."""
    M, N, K = shape["M"], shape["N"], shape["K"]
    a = torch.randn(M, K, dtype=dtype, device=device)
    b = torch.randn(K, N, dtype=dtype, device=device) / math.sqrt(K)
    return a, b


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A @ B in float32, returned in the input dtype."""
    return (a.float() @ b.float()).to(a.dtype)


def vendor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.matmul in the input dtype (cuBLAS on a GPU): the vendor baseline of reports."""
    return torch.matmul(a, b)


def matmul(a: torch.Tensor, b: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """Launch ``matmul_kernel`` over cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) programs."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: incompatible shapes {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise ValueError(f"matmul: dtype mismatch {a.dtype} vs {b.dtype}")
    (M, K), N = a.shape, b.shape[1]
    if config is None:
        config = _TABLE.lookup(a.dtype, M=M, N=N, K=K)
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]),)
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        **config,
    )
    return c
