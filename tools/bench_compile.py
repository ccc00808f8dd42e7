"""Compile the seed paper's GEMM space sequentially (as Triton's autotuner does) and with the
compile fan-out, each into a fresh Triton cache, and print speedup, throughput and the floor.

Sequential: one process compiles one config after another through the JIT launch path, which
is what ``@triton.autotune`` does on the first call. Fan-out: aot_tune's compile pool (one
long-lived process per core). Floor: the sum of the sequential compile times over the cores.

    python tools/bench_compile.py                    # all 576 configs, sm90, all cores
    python tools/bench_compile.py --configs 48       # a seeded sample (on small machines)
    python tools/bench_compile.py --fanout-only      # skip the sequential pass
    python tools/bench_compile.py --space manifest   # the GEMM space of tuning.yaml, after its constraints
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEQUENTIAL_CACHE = tempfile.mkdtemp(prefix="aot_tune-seq-cache-")
os.environ["TRITON_CACHE_DIR"] = SEQUENTIAL_CACHE  # before triton is imported, for the sequential pass
os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, str(ROOT))

from aot_tune.compile import CompileRequest, CompileResult, compile_config, cost_estimate  # noqa: E402
from aot_tune.executors import Executors  # noqa: E402
from aot_tune.hardware import INTERPRETER_DEVICE  # noqa: E402
from aot_tune.manifest import load_manifest  # noqa: E402
from aot_tune.space import Config, ConfigSpace  # noqa: E402

PAPER_SPACE = ConfigSpace(params=(
    ("BLOCK_M", (32, 64, 128, 256)), ("BLOCK_N", (32, 64, 128, 256)), ("BLOCK_K", (32, 64, 128, 256)),
    ("GROUP_M", (8,)), ("num_stages", (3, 4, 5)), ("num_warps", (2, 4, 8)),
))


def request(config: Config, target: str, shape: dict[str, int]) -> CompileRequest:
    return CompileRequest(
        kernel="gemm", root=str(ROOT), kernel_ref="kernels.gemm:matmul_kernel", launch_ref="kernels.gemm:matmul",
        inputs_ref="kernels.gemm:make_inputs", config=config.as_dict(), target=target,
        shapes=(shape,), dtypes=("float16",),
    )


def sequential(configs: list[Config], target: str, shape: dict) -> tuple[float, list[CompileResult]]:
    import torch  # noqa: F401  imports are not compile time: pay them before the clock starts
    import triton  # noqa: F401

    start = time.perf_counter()
    results = [compile_config(request(c, target, shape), c.id) for c in configs]
    return time.perf_counter() - start, results


def fanout(configs: list[Config], target: str, shape: dict, jobs: int) -> tuple[float, list[CompileResult]]:
    executors = Executors(INTERPRETER_DEVICE, Path(tempfile.mkdtemp(prefix="aot_tune-fan-cache-")), jobs)
    longest_first = sorted(configs, key=lambda c: -cost_estimate(c.as_dict()))  # as the compile rule orders them
    start = time.perf_counter()  # includes starting the workers: a real run pays it too
    try:
        with ThreadPoolExecutor(jobs) as threads:
            done = dict(zip(longest_first, threads.map(
                lambda c: executors.compile(request(c, target, shape), c.id), longest_first)))
            results = [done[c] for c in configs]
    finally:
        executors.close()
    return time.perf_counter() - start, results


def summarize(name: str, wall: float, results: list[CompileResult]) -> str:
    valid = sum(r.valid for r in results)
    reasons: dict[str, int] = {}
    for r in results:
        if not r.valid:
            reasons[r.status] = reasons.get(r.status, 0) + 1
    invalid = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) or "none"
    return (f"{name:<11} {wall:8.1f} s  {len(results) / wall:6.2f} compiles/s  "
            f"valid {valid}, invalid {len(results) - valid} ({invalid})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=0, help="seeded random sample size (0: all 576)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", default="sm90", help="GPU target to compile for [default: sm90]")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="fan-out workers [default: all cores]")
    parser.add_argument("--shape", default="4096,4096,4096", help="M,N,K whose specialization is compiled")
    parser.add_argument("--fanout-only", action="store_true", help="skip the sequential pass")
    parser.add_argument("--space", choices=("paper", "manifest"), default="paper",
                        help="paper: the seed paper's 576 configs; manifest: tuning.yaml's gemm space for --shape")
    args = parser.parse_args()

    m, n, k = (int(v) for v in args.shape.split(","))
    shape = {"M": m, "N": n, "K": k}
    if args.space == "paper":
        configs = PAPER_SPACE.configs()
    else:
        configs = load_manifest(ROOT / "tuning.yaml").kernel("gemm").space.configs_for(shape)
    if args.configs:
        configs = sorted(random.Random(args.seed).sample(configs, args.configs))
    print(f"{len(configs)} GEMM configs ({args.space} space) for {args.target}, shape {m}x{n}x{k} fp16, {args.jobs} workers, "
          f"{os.cpu_count()} cores", flush=True)

    fan_wall, fan_results = fanout(configs, args.target, shape, args.jobs)
    print(summarize("fan-out", fan_wall, fan_results), flush=True)
    slowest = sorted(fan_results, key=lambda r: -r.seconds)[:3]
    print("slowest     " + "; ".join(f"{r.config_id} {r.seconds:.1f} s" for r in slowest))
    if args.fanout_only:
        worker_sum = sum(r.seconds for r in fan_results)
        print(f"worker time {worker_sum:8.1f} s in all (compiles running side by side); "
              f"fan-out wall is {fan_wall / max(worker_sum / args.jobs, slowest[0].seconds):.2f}x "
              f"max(worker time / {args.jobs}, slowest)")
        return 0
    seq_wall, seq_results = sequential(configs, args.target, shape)
    print(summarize("sequential", seq_wall, seq_results), flush=True)
    floor = max(sum(r.seconds for r in seq_results) / args.jobs, max(r.seconds for r in seq_results))
    print(f"speedup     {seq_wall / fan_wall:8.2f}x  (fan-out vs sequential)")
    print(f"floor       {floor:8.1f} s  (max of: sum of sequential compile times / {args.jobs} workers, "
          f"the slowest compile); fan-out is {fan_wall / floor:.2f}x the floor")
    mismatched = sum(a.status != b.status for a, b in zip(seq_results, fan_results))
    if mismatched:
        print(f"WARNING: {mismatched} configs were judged differently by the two passes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
