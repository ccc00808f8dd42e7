"""One training step of fla-core's chunked delta rule (forward and backward), as a model's layer
runs it: the workload ``aot_tune record`` records and the step timed with and without tables.

    python delta_rule_step.py [--tables generated] [--steps 50] [--T 4096 --H 16 --D 128 --dtype bfloat16]

Prints one JSON line: the first step's seconds, the autotuner benchmarks it ran, and the median
of ``--steps`` steady-state steps. With ``--compare generated`` the library autotunes first, then
the steady state of its own picks and of the tables' picks is timed interleaved in one process.
On a CPU (no CUDA) it runs small float32 shapes under the Triton interpreter.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import triton.runtime.autotuner as autotuner
from counted import benchmarks


def make_inputs(B: int, T: int, H: int, D: int, dtype: torch.dtype, device: str):
    torch.manual_seed(0)
    q = torch.randn(B, T, H, D, dtype=dtype, device=device, requires_grad=True)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, D, dtype=torch.float32, device=device), p=2, dim=-1)
    k = k.to(dtype).requires_grad_()
    v = torch.randn(B, T, H, D, dtype=dtype, device=device, requires_grad=True)
    beta = torch.rand(B, T, H, dtype=dtype, device=device).sigmoid().requires_grad_()
    return q, k, v, beta


def step(inputs) -> None:
    from fla.ops.delta_rule import chunk_delta_rule

    q, k, v, beta = inputs
    o, _ = chunk_delta_rule(q, k, v, beta)
    o.float().square().mean().backward()


def timed(inputs, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    step(inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def autotuner_caches() -> list:
    import gc

    return [obj for obj in gc.get_objects() if isinstance(obj, autotuner.Autotuner)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="")
    parser.add_argument("--compare", default="")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--T", type=int, default=4096)
    parser.add_argument("--H", type=int, default=16)
    parser.add_argument("--D", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--profile", type=int, default=0, help="print the first step's N costliest calls")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
        args.T, args.H, args.D, args.dtype, args.steps = min(args.T, 128), min(args.H, 2), min(args.D, 32), "float16", 1
    installed = None
    if args.tables:
        import aot_tune

        installed = aot_tune.use_tables(args.tables, verbose=True)
    inputs = make_inputs(1, args.T, args.H, args.D, getattr(torch, args.dtype), device)
    if args.profile:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        first = profile.runcall(timed, inputs, device)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(args.profile)
    else:
        first = timed(inputs, device)
    first_benchmarks = len(benchmarks)
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "first_step_s": first,
              "first_step_benchmarks": first_benchmarks, "tables_keys": installed.keys if installed else None}
    if args.compare:
        import aot_tune

        tuners = autotuner_caches()
        own = {id(t): dict(t.cache) for t in tuners}
        aot_tune.use_tables(args.compare, verbose=True)
        tables = {id(t): dict(t.cache) for t in tuners}
        differ = sum(own[i][key] is not tables[i][key] for i in own for key in own[i])
        samples = {"own": [], "tables": []}
        for _ in range(args.steps):
            for name, picks in (("own", own), ("tables", tables)):
                for t in tuners:
                    t.cache.clear()
                    t.cache.update(picks[id(t)])
                samples[name].append(timed(inputs, device))
        result.update(own_step_ms=1e3 * statistics.median(samples["own"]),
                      tables_step_ms=1e3 * statistics.median(samples["tables"]), picks_that_differ=differ,
                      keys=sum(len(c) for c in own.values()), benchmarks_after_first=len(benchmarks) - first_benchmarks)
    else:
        steady = [timed(inputs, device) for _ in range(args.steps)]
        result.update(steady_step_ms=1e3 * statistics.median(steady),
                      benchmarks_after_first=len(benchmarks) - first_benchmarks)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
