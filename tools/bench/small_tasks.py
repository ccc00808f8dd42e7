"""Many small bench tasks: memory-bound row kernels (kernels/softmax.py, kernels/rmsnorm.py) over
32 shapes and 2 dtypes, 10 configs a shape (num_warps x num_stages; one block spans a row), for
the bench stage's share of timed kernel launches when every task is short and per-task costs
(baselines, the reference, input sets, the hand-off to the device worker) weigh most.

Builds a scratch project (a copy of kernels/ and the manifest below, no caches, no Triton
cache), runs a cold ``python -m doit tune`` there and prints its summary, whose ``bench stage``
line gives the share (``timed kernel launches ..., N% of the Ss of device time the benches held``):

    python -m tools.bench.small_tasks                               # the local GPU
    python -m tools.bench.small_tasks --print-manifest > tuning.yaml
"""
from __future__ import annotations

from tools.bench import cold_tune

ROWS = (1024, 4096, 8192, 16384)
COLUMNS = (512, 1024, 2048, 4096)
KERNELS = ("softmax", "rmsnorm")


def small_tasks_manifest(target: str = "sm90") -> str:
    """Two row kernels x 16 shapes x 2 dtypes: 64 bench tasks of 10 configs each."""
    shapes = "".join(f"      - {{M: {m}, N: {n}}}\n" for m in ROWS for n in COLUMNS)
    kernels = "".join(
        f"  {name}:\n"
        f"    kernel: kernels.{name}:{name}_kernel\n"
        f"    launch: kernels.{name}:{name}\n"
        f"    inputs: kernels.{name}:make_inputs\n"
        f"    reference: kernels.{name}:reference\n"
        "    key: [M, N]\n"
        "    space:\n"
        "      BLOCK_N: [512, 1024, 2048, 4096]\n"
        "      num_warps: [1, 2, 4, 8, 16]\n"
        "      num_stages: [1, 2]\n"
        "    constraints:\n"
        "      - \"BLOCK_N == max(512, next_pow2(N))\"\n"
        "    shapes:\n" + shapes +
        "    interpreter_shapes:\n      - {M: 4, N: 300}\n"
        f"    default_config: {{BLOCK_N: \"max(512, next_pow2(N))\", num_warps: 4, num_stages: 1}}\n"
        f"    vendor: kernels.{name}:vendor\n"
        f"    cost: {{bytes: \"2 * M * N * dtype_bytes\"}}\n"
        for name in KERNELS)
    return ("# Written by tools.bench.small_tasks: many short bench tasks.\n"
            "version: 1\n"
            "defaults:\n"
            "  dtypes: [float16, float32]\n"
            f"  targets: [{target}]\n"
            "  bench: {warmup_ms: 2, rep_ms: 20, l2_flush: true}\n"
            "kernels:\n" + kernels)


def main() -> int:
    return cold_tune.main(__doc__, small_tasks_manifest, "small-tasks")


if __name__ == "__main__":
    raise SystemExit(main())
