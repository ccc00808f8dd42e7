"""The GEMM of kernels/gemm.py as a tuning.yaml, for the tools that tune a space and shapes of
their own (tools.bench.bench_startup, tools.bench.compare_triton_autotune)."""
from __future__ import annotations

import json


def gemm_manifest(defaults: str, space: dict[str, list], constraint: str, shapes: list[tuple[int, int, int]],
                  header: str = "") -> str:
    """``defaults`` (YAML lines indented under ``defaults:``), the space, one constraint
    expression, and ``shapes`` (M, N, K) served on the GPU and under the interpreter, in fp16."""
    shape_lines = "".join(f"      - {{M: {m}, N: {n}, K: {k}}}\n" for m, n, k in shapes)
    space_lines = "".join(f"      {name}: {json.dumps(values)}\n" for name, values in space.items())
    return (
        header +
        "version: 1\n"
        "defaults:\n" + defaults +
        "kernels:\n"
        "  gemm:\n"
        "    kernel: kernels.gemm:matmul_kernel\n"
        "    launch: kernels.gemm:matmul\n"
        "    inputs: kernels.gemm:make_inputs\n"
        "    reference: kernels.gemm:reference\n"
        "    key: [M, N, K]\n"
        "    space:\n" + space_lines +
        f"    constraints:\n      - {json.dumps(constraint)}\n"
        "    shapes:\n" + shape_lines +
        "    interpreter_shapes:\n" + shape_lines +
        "    dtypes: [float16]\n"
    )
