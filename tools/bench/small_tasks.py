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

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="sm90", help="the GPU's target [sm90]")
    parser.add_argument("--print-manifest", action="store_true", help="print the manifest and exit")
    parser.add_argument("--keep", type=Path, help="build the project in this folder and keep it")
    args = parser.parse_args()
    if args.print_manifest:
        print(small_tasks_manifest(args.target), end="")
        return 0
    with tempfile.TemporaryDirectory(prefix="aot_tune-small-tasks-") as tmp:
        project = args.keep.resolve() if args.keep else Path(tmp) / "project"
        project.mkdir(parents=True, exist_ok=True)
        shutil.copytree(ROOT / "kernels", project / "kernels", ignore=shutil.ignore_patterns("__pycache__"),
                        dirs_exist_ok=True)
        (project / "tuning.yaml").write_text(small_tasks_manifest(args.target))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        env["TRITON_CACHE_DIR"] = str(project / ".triton-cache")
        began = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "doit", "tune"], cwd=project, env=env,
                              capture_output=True, text=True)
        wall = time.perf_counter() - began
        summary = [line for line in proc.stderr.splitlines()
                   if line.startswith(("[specialize]", "specialize:", "compile:", "bench", "baselines:", "aot_tune:"))]
        print("\n".join(summary) or proc.stderr[-4000:])
        print(f"cold doit tune: {wall:.1f} s wall, exit {proc.returncode}")
        return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
