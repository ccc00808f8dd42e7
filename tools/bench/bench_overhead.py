"""Our bench engine against Triton's do_bench, as @triton.autotune calls it, on the same work.

For sampled configs of the repo's kernels on the shapes of tuning.yaml, each config is measured
``--repeats`` times by each side, the sides interleaved per shape, in one process on one GPU:

* do_bench: ``triton.testing.do_bench(fn, quantiles=(0.5, 0.2, 0.8))`` with its defaults
  (warmup 25 ms, rep 100 ms, a 256 MB L2 flush before every timed run), as the autotuner does;
* ours: aot_tune.bench.engine.pipeline with the kernel's bench settings from tuning.yaml (what
  `doit tune` runs), including its correctness check on fresh inputs: one pass over the shape's
  sampled configs per repeat, pipelined as a bench task runs them (its wall time is shared out
  evenly among them).

It prints wall time per config, the share of wall time the GPU spent in the measured kernel
launches, and the spread of repeated medians of one config ((max - min) / median; lower is more
repeatable). Then it sends planted faults (tests/fixtures/planted_kernels.py) through a real device
worker pool: a wrong result, NaN, an illegal memory access and a hang, each followed by a good
config, to show rejection and isolation; then all of them in one batch with good configs between,
to show that a pipelined pass still pins each fault on its own config.

Usage (GPU machine): python3 -m tools.bench.bench_overhead [--configs 8] [--repeats 3]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from aot_tune.bench.engine.pipeline import measure_configs, warm_up_graphs
from aot_tune.bench.engine.workload import Workload
from aot_tune.bench.runner import BenchRequest
from aot_tune.manifest import load_manifest
from aot_tune.space import Config

ROOT = Path(__file__).resolve().parents[2]


def sampled_configs(spec, shape, count: int, rng: random.Random) -> list[Config]:
    configs = spec.space.configs_for(spec.shape_dict(shape))
    return sorted(rng.sample(configs, min(count, len(configs))), key=lambda c: c.id)


def request_for(spec, shape, dtype: str, config: Config) -> BenchRequest:
    return BenchRequest(kernel=spec.name, root=str(ROOT), launch_ref=spec.launch, inputs_ref=spec.inputs,
                        reference_ref=spec.reference, shape=tuple(spec.shape_dict(shape).items()), dtype=dtype,
                        config_id=config.id, config=config.params, settings=spec.bench)


class CountingCall:
    """Counts do_bench's calls, to know how many timed runs it made."""

    def __init__(self, fn) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self):
        self.calls += 1
        return self.fn()


def do_bench_side(workload: Workload, config: dict):
    """(median ms, wall s, GPU ms in timed runs) for one do_bench call as the autotuner makes it."""
    from triton.testing import do_bench

    call = CountingCall(lambda: workload.run(0, dict(config)))  # the launch function, forced to the config
    began = time.perf_counter()
    median, _, _ = do_bench(call, quantiles=(0.5, 0.2, 0.8))
    wall = time.perf_counter() - began
    # do_bench runs fn 1 + 5 (estimate) + n_warmup + n_repeat times, n_repeat/n_warmup = 100/25.
    timed_runs = max(1, round((call.calls - 6) * 100 / 125))
    return median, wall, median * timed_runs


def our_side(requests: list[BenchRequest], workload: Workload, l2_bytes: int, clocks):
    """(results by config id, wall s, GPU ms in timed launches) for one pass of the engine over a
    shape's configs, pipelined as the bench stage runs them."""
    began = time.perf_counter()
    results = {r.config_id: r for r in measure_configs(requests, workload, "cuda", l2_bytes, clocks)}
    wall = time.perf_counter() - began
    gpu = sum(sum(r.times_ms) * r.launches_per_sample for r in results.values() if r.ok)
    return results, wall, gpu


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def compare(args) -> None:
    import torch

    from aot_tune.bench.nvml import GpuClocks

    props = torch.cuda.get_device_properties(0)
    clocks = GpuClocks(str(getattr(props, "uuid", "")))
    warm_up_graphs("cuda:0")  # as a device worker does when it opens its GPU
    l2_bytes = int(getattr(props, "L2_cache_size", 0)) or 50 * 2**20
    manifest = load_manifest(ROOT / "tuning.yaml")
    rng = random.Random(args.seed)
    rows = []
    totals = {"ours": [0.0, 0.0], "do_bench": [0.0, 0.0]}  # wall s, GPU ms in measured launches
    phases: dict[str, float] = {}
    kernel_phases: dict[str, dict[str, float]] = {}
    for name in args.kernels.split(","):
        spec = next(k for k in manifest.kernels if k.name == name)
        shapes = sorted(spec.shapes, key=lambda s: (sum(s), s))  # the smallest and the largest
        for shape in [shapes[0], shapes[-1]] if len(shapes) > 1 else shapes:
            configs = sampled_configs(spec, shape, args.configs, rng)
            dtype = spec.dtypes[0]
            began = time.perf_counter()
            workload = Workload(request_for(spec, shape, dtype, configs[0]), "cuda:0")
            totals["ours"][0] += time.perf_counter() - began
            runnable = []
            for config in configs:
                try:  # compile and load outside both sides' timings (both find a warm cache)
                    workload.run(0, config.as_dict())
                    torch.cuda.synchronize()
                    runnable.append(config)
                except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory: neither side can time it
                    print(f"  skip {name} {shape} {config.label()}: {type(exc).__name__}", flush=True)
            requests = [request_for(spec, shape, dtype, config) for config in runnable]
            ours: dict[str, list] = {c.id: [] for c in runnable}
            theirs: dict[str, list] = {c.id: [] for c in runnable}
            walls = {c.id: [0.0, 0.0] for c in runnable}
            methods: dict[str, str] = {}
            for _ in range(args.repeats):  # one pass of ours over the shape's configs, then do_bench's
                results, wall, gpu = our_side(requests, workload, l2_bytes, clocks)
                totals["ours"][0] += wall
                totals["ours"][1] += gpu
                for config in runnable:
                    result = results[config.id]
                    walls[config.id][0] += wall / len(runnable)
                    if not result.ok:
                        print(f"  {name} {config.label()}: {result.status} {result.message}", flush=True)
                        continue
                    ours[config.id].append(statistics.median(result.times_ms))
                    methods[config.id] = f"{result.method}x{result.launches_per_sample}" \
                        if result.launches_per_sample > 1 else result.method
                    for phase, seconds in result.phase_seconds.items():
                        phases[phase] = phases.get(phase, 0.0) + seconds
                        by_kernel = kernel_phases.setdefault(name, {})
                        by_kernel[phase] = by_kernel.get(phase, 0.0) + seconds
                    if args.verbose:
                        c = result.clocks_start, result.clocks_end
                        print(f"    ours {config.id} {ours[config.id][-1] * 1e3:.1f} us, SM clock {c[0].sm_mhz}->"
                              f"{c[1].sm_mhz} MHz, memory {c[0].memory_mhz}->{c[1].memory_mhz} MHz, phases " + ", ".join(
                                  f"{k} {v * 1e3:.1f} ms" for k, v in result.phase_seconds.items()), flush=True)
                for config in runnable:
                    t_median, t_wall, t_gpu = do_bench_side(workload, config.as_dict())
                    theirs[config.id].append(t_median)
                    walls[config.id][1] += t_wall
                    totals["do_bench"][0] += t_wall
                    totals["do_bench"][1] += t_gpu
            for config in runnable:
                if len(ours[config.id]) == args.repeats:
                    rows.append((name, "x".join(map(str, shape)), config.id, methods[config.id],
                                 statistics.median(ours[config.id]), statistics.median(theirs[config.id]),
                                 spread(ours[config.id]), spread(theirs[config.id]), *walls[config.id]))
                    print(f"  {rows[-1][0]} {rows[-1][1]} {config.id} {rows[-1][3]}: ours {rows[-1][4]*1e3:.1f} us "
                          f"(spread {rows[-1][6]:.2%}), do_bench {rows[-1][5]*1e3:.1f} us (spread {rows[-1][7]:.2%})",
                          flush=True)
    report(rows, totals, args)
    print("ours, wall time by phase (capture overlaps the previous config's timed phase): "
          + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items())
          + f", other {totals['ours'][0] - sum(phases.values()):.2f} s")
    for name, by_phase in kernel_phases.items():
        print(f"  {name}: " + ", ".join(f"{k} {v:.2f} s" for k, v in by_phase.items()))


def report(rows, totals, args) -> None:
    measured = len(rows) * args.repeats
    print(f"\n{len(rows)} configs x {args.repeats} repeats per side")
    print(f"{'side':10} {'wall s':>8} {'ms/config':>10} {'GPU in measured kernels':>24} {'median spread':>14}")
    for side, col in (("ours", 6), ("do_bench", 7)):
        wall, gpu_ms = totals[side]
        spreads = [r[col] for r in rows]
        print(f"{side:10} {wall:8.1f} {wall * 1e3 / max(measured, 1):10.1f} {gpu_ms / 1e3 / max(wall, 1e-9):24.1%} "
              f"{statistics.median(spreads) if spreads else 0:14.2%}")
    print(f"do_bench / ours wall time: {totals['do_bench'][0] / max(totals['ours'][0], 1e-9):.2f}x")
    by_kernel: dict[str, list] = {}
    for row in rows:
        by_kernel.setdefault(row[0], []).append(row)
    for kernel, krows in by_kernel.items():
        ratio = statistics.geometric_mean([r[4] / r[5] for r in krows])
        per_config = [sum(r[col] for r in krows) * 1e3 / (len(krows) * args.repeats) for col in (8, 9)]
        print(f"  {kernel}: ms/config ours {per_config[0]:.1f} vs do_bench {per_config[1]:.1f}; "
              f"ours/do_bench median time geomean {ratio:.3f}; spread ours "
              f"{statistics.median(r[6] for r in krows):.2%} vs do_bench {statistics.median(r[7] for r in krows):.2%}")


def planted_request(fault: int, block: int, settings) -> BenchRequest:
    return BenchRequest(kernel="planted", root=str(ROOT / "tests" / "fixtures"), launch_ref="planted_kernels:launch",
                        inputs_ref="planted_kernels:make_inputs", reference_ref="planted_kernels:reference",
                        shape=(("n", 1 << 20),), dtype="float32", config_id=f"fault{fault}-block{block}",
                        config=(("BLOCK", block), ("FAULT", fault)), settings=settings)


def planted_faults(timeout_s: float) -> None:
    """Faults through the real worker pool: each alone, followed by a good config on the same
    GPU; then all in one batch, measured as one pipelined pass, as a bench task sends them."""
    from aot_tune.bench.local.pool import DevicePool
    from aot_tune.manifest import BenchSettings

    settings = BenchSettings(warmup_ms=1.0, rep_ms=5.0, l2_flush=True, l2_flush_bytes=None)
    names = ["correct", "wrong result", "NaN output", "illegal memory access", "hang"]
    print("\nplanted faults (tests/fixtures/planted_kernels.py) through the device worker pool:")
    with tempfile.TemporaryDirectory() as cache:
        pool = DevicePool("cuda", 1, cache)
        try:
            for fault, name in enumerate(names):
                for config_fault in (fault, 0):
                    request = planted_request(config_fault, 1024, settings)
                    began = time.perf_counter()
                    with pool.lease() as lease:
                        result = lease.measure(request, timeout_s)
                    label = name if config_fault == fault else "  then correct"
                    print(f"  {label:24} -> {result.status:14} {time.perf_counter() - began:6.2f} s  "
                          f"{result.message[:90]}", flush=True)
                    if fault == 0:
                        break
            batch = [planted_request(fault, block, settings)
                     for fault, block in ((0, 256), (1, 256), (0, 512), (3, 256), (0, 2048), (2, 256), (4, 256), (0, 4096))]
            print("one batch, several configs on the GPU at once (a death or hang leaves them all suspect; "
                  "each is then measured alone):")
            began = time.perf_counter()
            with pool.lease() as lease:
                results = {r.config_id: r for r in lease.measure_all(batch, timeout_s)}
            for request in batch:
                result = results[request.config_id]
                print(f"  {request.config_id:18} -> {result.status:14} {result.message[:90]}")
            print(f"  ({time.perf_counter() - began:.2f} s)", flush=True)
        finally:
            pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="vector_add,softmax,rmsnorm,gemm")
    parser.add_argument("--configs", type=int, default=8, help="configs sampled per kernel")
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each config per side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fault-timeout", type=float, default=20.0, help="seconds before a hang is declared")
    parser.add_argument("--skip-faults", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="print every repeat with its clocks and phases")
    args = parser.parse_args()
    import torch
    import triton

    if not torch.cuda.is_available():
        sys.exit("bench_overhead: needs a CUDA GPU (compares GPU timing engines)")
    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {torch.cuda.get_device_name(0)}, "
          f"triton {triton.__version__}, torch {torch.__version__}")
    print(f"# python3 -m tools.bench.bench_overhead {' '.join(sys.argv[1:])}")
    compare(args)
    if not args.skip_faults:
        planted_faults(args.fault_timeout)


if __name__ == "__main__":
    main()
