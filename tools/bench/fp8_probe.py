"""TFLOP/s of a few ``kernels/fp8_gemm.py`` configs against ``torch._scaled_mm`` (cuBLASLt).

A check of the kernel and its space on a Hopper GPU before (or without) a full ``doit tune``:
each config's output is compared with the kernel's reference, then timed with Triton's
``do_bench``, for per-tensor and per-row scales. On an H100 or H200, from the repository root
(needs torch and triton, not doit):

    python -m tools.bench.fp8_probe
    python -m tools.bench.fp8_probe --size 8192 --size 4096

The last column is each config's time over the vendor's (>= 0.8 is the target at 4096^3).
"""
from __future__ import annotations

import argparse
import sys

#: Candidates from the manifest's space, the default first.
CONFIGS = [
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=4),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=4),
    dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, action="append", help="M = N = K (repeatable; default 4096)")
    args = parser.parse_args(argv)
    import torch
    import triton.testing

    from kernels import fp8_gemm as k

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
        print("fp8_probe: needs a GPU with fp8 (sm89 or later)", file=sys.stderr)
        return 2
    dtypes = {"a": torch.float8_e4m3fn, "b": torch.float8_e4m3fn}
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}")
    for size in args.size or [4096]:
        for per_row in (False, True):
            inputs = k.make_inputs({"M": size, "N": size, "K": size, "per_row": per_row}, dtypes, "cuda")
            flops = 2 * size ** 3
            tflops = lambda ms: flops / (ms * 1e-3) / 1e12  # noqa: E731
            expected = k.reference(*inputs).float()
            vendor_ms = triton.testing.do_bench(lambda: k.vendor(*inputs), warmup=25, rep=200)
            print(f"\n{size}^3 per_row={per_row}: torch._scaled_mm {tflops(vendor_ms):7.1f} TFLOP/s ({vendor_ms:.4f} ms)")
            for config in CONFIGS:
                label = " ".join(f"{name}={value}" for name, value in config.items())
                try:
                    out = k.fp8_gemm(*inputs, config=config).float()
                    error = ((out - expected).norm() / expected.norm()).item()
                    ms = triton.testing.do_bench(lambda: k.fp8_gemm(*inputs, config=config), warmup=25, rep=200)
                except Exception as exc:  # a config the GPU cannot run (resources): say so, go on
                    print(f"  {label}: failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
                    continue
                print(f"  {label}: {tflops(ms):7.1f} TFLOP/s  rel.err {error:.1e}  {vendor_ms / ms:5.2f}x vendor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
