"""Compile the seed paper's GEMM space sequentially (as Triton's autotuner does) and with the
compile fan-out, each into a fresh Triton cache, and print speedup, throughput and the floor.

Sequential: one process compiles one config after another through the JIT launch path, which
is what ``@triton.autotune`` does on the first call. Fan-out: aot_tune's compile pool (one
long-lived process per core, largest configs first). Floor: the larger of the sum of the
sequential compile times over the workers and the slowest single compile.

    python -m tools.bench.bench_compile                          # all 576 configs: fan-out, then sequential
    python -m tools.bench.bench_compile --configs 48 --seed 1    # a seeded sample (small machines)
    python -m tools.bench.bench_compile --space manifest         # tuning.yaml's gemm space for --shape

The sequential pass over the full space takes over an hour on a 16-core host, so it can be split
into balanced chunks, each its own command, with every pass saved and combined afterwards
(``--report`` needs neither a GPU nor Triton):

    python -m tools.bench.bench_compile --pass fanout --save fan.json
    python -m tools.bench.bench_compile --pass sequential --chunk 1/12 --save seq-01.json   # ... 12/12
    python -m tools.bench.bench_compile --report fan.json seq-*.json

With only some chunks (or a ``--configs`` sample) run sequentially, the report also projects the
sequential time of the whole fan-out set from the configs measured (scaled by their share of the
fan-out's worker time, so the chunks should come from the same command as the fan-out), and says
so.
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEQUENTIAL_CACHE = tempfile.mkdtemp(prefix="aot_tune-seq-cache-")
atexit.register(shutil.rmtree, SEQUENTIAL_CACHE, True)  # cubins of hundreds of configs add up
os.environ["TRITON_CACHE_DIR"] = SEQUENTIAL_CACHE  # before triton is imported, for the sequential pass
os.environ.pop("TRITON_INTERPRET", None)

from aot_tune.build.compile import CompileRequest, CompileResult, compile_config, compile_time_estimate, longest_first  # noqa: E402
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
    results = []
    for i, config in enumerate(configs, 1):
        results.append(compile_config(request(config, target, shape), config.id))
        if i % 8 == 0 or i == len(configs):
            print(f"  sequential {i}/{len(configs)}, {time.perf_counter() - start:.0f} s", flush=True)
    return time.perf_counter() - start, results


def by_cost(configs: list[Config]) -> list[Config]:
    """Slowest first, by tuning.yaml's ``compile_cost`` for gemm, as the compile rule orders them."""
    declared = load_manifest(ROOT / "tuning.yaml").kernel("gemm").compile_cost
    return longest_first(sorted(configs), lambda c: compile_time_estimate(c.as_dict(), declared), lambda c: None)


def fanout(configs: list[Config], target: str, shape: dict, jobs: int) -> tuple[float, list[CompileResult]]:
    from aot_tune.workers.pools import Executors
    from aot_tune.bench.runner import INTERPRETER_DEVICE

    cache = Path(tempfile.mkdtemp(prefix="aot_tune-fan-cache-"))
    executors = Executors(INTERPRETER_DEVICE, cache, jobs)
    ordered = by_cost(configs)
    start = time.perf_counter()  # includes starting the workers: a real run pays it too
    try:
        with ThreadPoolExecutor(jobs) as threads:
            done = dict(zip(ordered, threads.map(
                lambda c: executors.compile(request(c, target, shape), c.id), ordered)))
            results = [done[c] for c in configs]
    finally:
        executors.close()
        shutil.rmtree(cache, ignore_errors=True)
    return time.perf_counter() - start, results


def chunk(configs: list[Config], spec: str) -> list[Config]:
    """The K-th of N chunks ("K/N", 1-based), dealt round-robin in cost order so chunks take alike."""
    k, n = (int(v) for v in spec.split("/"))
    if not 1 <= k <= n:
        raise SystemExit(f"--chunk {spec}: K must be between 1 and N; fix: e.g. --chunk 1/12")
    return sorted(by_cost(configs)[k - 1::n])


# -- saved passes and the report ---------------------------------------------------------------

def save(path: Path, kind: str, wall: float, results: list[CompileResult], args: argparse.Namespace) -> None:
    payload = {"pass": kind, "wall_s": wall, "jobs": args.jobs, "cores": os.cpu_count(), "space": args.space,
               "target": args.target, "shape": args.shape, "chunk": args.chunk,
               "results": [{k: v for k, v in asdict(r).items() if k != "specializations"} for r in results]}
    path.write_text(json.dumps(payload, indent=1))


def invalid_counts(results: list[dict]) -> str:
    reasons: dict[str, int] = {}
    for r in results:
        if r["status"] != "ok":
            reasons[r["status"]] = reasons.get(r["status"], 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) or "none"


def line(name: str, wall: float, results: list[dict]) -> str:
    valid = sum(r["status"] == "ok" for r in results)
    return (f"{name:<11} {wall:8.1f} s  {len(results) / wall:6.2f} compiles/s  "
            f"{len(results)} configs: valid {valid}, invalid {len(results) - valid} ({invalid_counts(results)})")


def report(fan: dict | None, sequential_runs: list[dict]) -> None:
    """Speedup, throughput, floor and invalid counts from saved (or just measured) passes."""
    seq = [r for run in sequential_runs for r in run["results"]]
    seq_wall = sum(run["wall_s"] for run in sequential_runs)
    if fan is not None:
        print(line("fan-out", fan["wall_s"], fan["results"]) + f"  ({fan['jobs']} workers, {fan['cores']} cores)")
        slowest = sorted(fan["results"], key=lambda r: -r["seconds"])[:3]
        print("slowest     " + "; ".join(f"{r['config_id']} {r['seconds']:.1f} s" for r in slowest))
        worker = sum(r["seconds"] for r in fan["results"])
        print(f"worker time {worker:8.1f} s in the pool; fan-out wall is "
              f"{fan['wall_s'] / max(worker / fan['jobs'], slowest[0]['seconds']):.2f}x max(worker time / "
              f"{fan['jobs']}, slowest)")
    if not seq:
        return
    print(line("sequential", seq_wall, seq) + (f"  ({len(sequential_runs)} chunks)" if len(sequential_runs) > 1 else ""))
    if fan is None:
        return
    jobs = fan["jobs"]
    fan_ids = {r["config_id"] for r in fan["results"]}
    seq_ids = {r["config_id"] for r in seq}
    if not seq_ids <= fan_ids:
        print(f"WARNING: {len(seq_ids - fan_ids)} sequential configs are not in the fan-out pass; compare like with like")
    by_id = {r["config_id"]: r for r in fan["results"]}
    mismatched = sum(by_id[r["config_id"]]["status"] != r["status"] for r in seq if r["config_id"] in by_id)
    if mismatched:
        print(f"WARNING: {mismatched} configs were judged differently by the two passes")
    if seq_ids == fan_ids:
        floor = max(sum(r["seconds"] for r in seq) / jobs, max(r["seconds"] for r in seq))
        print(f"speedup     {seq_wall / fan['wall_s']:8.2f}x  (fan-out vs sequential, both over {len(fan_ids)} configs)")
        print(f"floor       {floor:8.1f} s  (max of: sum of sequential compile times / {jobs} workers, the slowest "
              f"compile); fan-out is {fan['wall_s'] / floor:.2f}x the floor")
    else:
        # A ratio estimator: the measured configs' share of the fan-out's worker time is their share
        # of the sequential pass (compile times vary 1000x across configs, so a count would not do).
        measured = sum(by_id[i]["seconds"] for i in seq_ids & fan_ids)
        scale = sum(r["seconds"] for r in fan["results"]) / measured
        projected = seq_wall * scale
        floor = max(sum(r["seconds"] for r in seq) * scale / jobs, max(r["seconds"] for r in seq))
        print(f"projected   sequential {projected:8.1f} s for all {len(fan_ids)} configs, from {len(seq_ids)} measured "
              f"({seq_wall:.1f} s x {scale:.2f}, their share of the fan-out's worker time)")
        print(f"speedup     {projected / fan['wall_s']:8.2f}x  (fan-out vs PROJECTED sequential)")
        print(f"floor       {floor:8.1f} s  (projected sum of sequential compile times / {jobs} workers); "
              f"fan-out is {fan['wall_s'] / floor:.2f}x the floor")


def load_reports(paths: list[Path]) -> tuple[dict | None, list[dict]]:
    runs = [json.loads(p.read_text()) for p in paths]
    fans = [r for r in runs if r["pass"] == "fanout"]
    if len(fans) > 1:
        raise SystemExit("--report: give at most one fan-out file; fix: drop the others")
    return (fans[0] if fans else None), [r for r in runs if r["pass"] == "sequential"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=0, help="seeded random sample size (0: the whole space)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", default="sm90", help="GPU target to compile for [default: sm90]")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="fan-out workers [default: all cores]")
    parser.add_argument("--shape", default="4096,4096,4096", help="M,N,K whose specialization is compiled")
    parser.add_argument("--pass", dest="passes", choices=("both", "fanout", "sequential"), default="both",
                        help="which passes to run [default: both]")
    parser.add_argument("--fanout-only", action="store_true", help="same as --pass fanout")
    parser.add_argument("--chunk", help="K/N: run only the K-th of N balanced chunks of the configs")
    parser.add_argument("--save", type=Path, help="write the pass(es) run to this JSON file (both: FILE and FILE.seq)")
    parser.add_argument("--report", type=Path, nargs="+", help="combine saved passes and print the summary; runs nothing")
    parser.add_argument("--space", choices=("paper", "manifest"), default="paper",
                        help="paper: the seed paper's 576 configs; manifest: tuning.yaml's gemm space for --shape")
    args = parser.parse_args()
    if args.report:
        report(*load_reports(args.report))
        return 0
    if args.fanout_only:
        args.passes = "fanout"

    m, n, k = (int(v) for v in args.shape.split(","))
    shape = {"M": m, "N": n, "K": k}
    if args.space == "paper":
        configs = PAPER_SPACE.configs()
    else:
        configs = load_manifest(ROOT / "tuning.yaml").kernel("gemm").space.configs_for(shape)
    if args.configs:
        configs = sorted(random.Random(args.seed).sample(configs, args.configs))
    if args.chunk:
        configs = chunk(configs, args.chunk)
    print(f"{len(configs)} GEMM configs ({args.space} space{', chunk ' + args.chunk if args.chunk else ''}) "
          f"for {args.target}, shape {m}x{n}x{k} fp16, {args.jobs} workers, {os.cpu_count()} cores", flush=True)

    fan = None
    if args.passes in ("both", "fanout"):
        wall, results = fanout(configs, args.target, shape, args.jobs)
        if args.save:
            save(args.save, "fanout", wall, results, args)
        fan = {"wall_s": wall, "jobs": args.jobs, "cores": os.cpu_count(),
               "results": [asdict(r) for r in results]}
        report(fan, [])
    if args.passes in ("both", "sequential"):
        wall, results = sequential(configs, args.target, shape)
        if args.save:
            save(args.save.with_name(args.save.name + ".seq") if fan else args.save, "sequential", wall, results, args)
        seq = {"wall_s": wall, "results": [asdict(r) for r in results]}
        if fan is None:
            report(None, [seq])
        else:
            print()
            report(fan, [seq])
    return 0


if __name__ == "__main__":
    sys.exit(main())
