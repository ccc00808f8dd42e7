"""Where the GPU's time goes in one pipelined bench pass: profile the engine over configs of one
GEMM shape with torch.profiler and split the pass's wall time into timed samples, other kernel
time (checks, warm-up, the reference comparison) and idle gaps. Needs a CUDA GPU.

    python tools/profile_bench_pass.py --shape 4096,4096,4096 --configs 24

The configs are measured once unprofiled first (Triton compiles and loads them), so the profile
shows the steady pipeline of a bench task, not its compiles.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from bench_overhead import request_for, sampled_configs  # noqa: E402

from aot_tune.bench.measure import Workload, measure_configs  # noqa: E402
from aot_tune.manifest import load_manifest  # noqa: E402


def busy_and_gaps(intervals: list[tuple[float, float]]) -> tuple[float, list[float]]:
    """Union length of [start, end) intervals and the gaps between them (same units)."""
    busy, gaps, start, end = 0.0, [], None, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                busy += end - start
                gaps.append(s - end)
            start, end = s, e
        else:
            end = max(end, e)
    return busy + ((end - start) if end is not None else 0.0), gaps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="4096,4096,4096", help="M,N,K of tuning.yaml's gemm")
    parser.add_argument("--configs", type=int, default=24, help="seeded sample of the shape's configs")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        raise SystemExit("profile_bench_pass.py needs a CUDA GPU; fix: run it on the GPU host")
    spec = load_manifest(ROOT / "tuning.yaml").kernel("gemm")
    shape = tuple(int(v) for v in args.shape.split(","))
    requests = [request_for(spec, shape, "float16", c)
                for c in sampled_configs(spec, shape, args.configs, random.Random(args.seed))]
    workload = Workload(requests[0], "cuda:0")
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    list(measure_configs(requests, workload, "cuda", l2_bytes))  # compile and load every config first
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        began = time.perf_counter()
        results = list(measure_configs(requests, workload, "cuda", l2_bytes))
        torch.cuda.synchronize()
        wall = time.perf_counter() - began
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us, gaps = busy_and_gaps([(e.time_range.start, e.time_range.end) for e in kernels])
    by_kind: dict[str, float] = {}
    for e in kernels:
        kind = "the configs' kernel" if "matmul_kernel" in e.name else e.name[:60]
        by_kind[kind] = by_kind.get(kind, 0.0) + (e.time_range.end - e.time_range.start) / 1e6
    samples = sum(sum(r.times_ms) * r.launches_per_sample for r in results if r.ok) / 1e3
    ok = sum(r.ok for r in results)
    print(f"gemm {'x'.join(map(str, shape))} fp16, {len(results)} configs ({ok} ok), {torch.cuda.get_device_name()}")
    print(f"pass wall            {wall:7.3f} s")
    print(f"timed samples        {samples:7.3f} s  {samples / wall:6.1%} of the wall")
    print(f"GPU busy (any kernel) {busy_us / 1e6:6.3f} s  {busy_us / 1e6 / wall:6.1%}")
    print(f"GPU idle in the pass {wall - busy_us / 1e6:7.3f} s  ({len(gaps)} gaps, {sum(g >= 100 for g in gaps)} of 100 us or more)")
    for kind, seconds in sorted(by_kind.items(), key=lambda kv: -kv[1])[:6]:
        print(f"  {seconds:7.3f} s  {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
