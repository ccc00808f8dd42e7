"""A library's row kernels, as inference engines run them: memory-bound, large inputs, keyed on
the hidden size alone with the rows (tokens) a bench dim. RMSNorm (kernels/rmsnorm.py, the whole
row in registers) and a SwiGLU gated activation (tools/bench/rows_kernels.py, the row in blocks),
bf16 and fp16, rows 4096 and 16384 x hidden 2048-14336, 6-12 configs a shape: 32 bench tasks
whose inputs are up to 470 MB a tensor.

Builds a scratch project (a copy of kernels/, rows_kernels.py and the manifest below, no
caches, no Triton cache), runs a cold ``python -m doit tune`` there and prints its summary: the
``bench`` lines give the timed launches' share of the device time the benches held, the last
line the run's wall time against its floor.

    python -m tools.bench.rows_workload                        # the local GPU
    python -m tools.bench.rows_workload --print-manifest > tuning.yaml
"""
from __future__ import annotations

from pathlib import Path

from tools.bench import cold_tune

ROOT = Path(__file__).resolve().parents[2]
ROWS = (4096, 16384)
HIDDEN = (2048, 4096, 8192, 14336)


def rows_manifest(target: str = "sm90") -> str:
    """Two row kernels x 8 shapes x 2 dtypes, keyed on the hidden size N, the rows M a bench dim."""
    grid = f"      - grid: {{M: [{', '.join(map(str, ROWS))}], N: [{', '.join(map(str, HIDDEN))}]}}\n"
    return f"""\
# Written by tools.bench.rows_workload: a library's row kernels, keyed on the hidden size.
version: 1
defaults:
  dtypes: [bfloat16, float16]
  targets: [{target}]
  bench: {{warmup_ms: 2, rep_ms: 20, l2_flush: true}}
kernels:
  rmsnorm:
    kernel: kernels.rmsnorm:rmsnorm_kernel
    launch: kernels.rmsnorm:rmsnorm
    inputs: kernels.rmsnorm:make_inputs
    reference: kernels.rmsnorm:reference
    key: [N]
    space: {{BLOCK_N: [2048, 4096, 8192, 16384], num_warps: [2, 4, 8, 16, 32], num_stages: [1, 2]}}
    constraints:
      - "BLOCK_N == next_pow2(N)"
      - "num_warps >= 4 or N <= 4096"
    shapes:
{grid}    interpreter_shapes:
      - {{M: 2, N: 2000}}
    default_config: {{BLOCK_N: "next_pow2(N)", num_warps: 4, num_stages: 1}}
    vendor: kernels.rmsnorm:vendor
    cost: {{bytes: "(2 * M * N + N) * dtype_bytes"}}
  swiglu:
    kernel: rows_kernels:swiglu_kernel
    launch: rows_kernels:swiglu
    inputs: rows_kernels:make_inputs
    reference: rows_kernels:reference
    key: [N]
    space: {{BLOCK_N: [512, 1024, 2048, 4096], num_warps: [2, 4, 8], num_stages: [1]}}
    shapes:
{grid}    interpreter_shapes:
      - {{M: 2, N: 2000}}
    default_config: {{BLOCK_N: 1024, num_warps: 4, num_stages: 1}}
    vendor: rows_kernels:vendor
    cost: {{bytes: "3 * M * N * dtype_bytes"}}
"""


def main() -> int:
    return cold_tune.main(__doc__, rows_manifest, "rows", (ROOT / "tools" / "bench" / "rows_kernels.py",))


if __name__ == "__main__":
    raise SystemExit(main())
