"""Where the GPU's time goes in pipelined bench passes: profile the engine over configs of GEMM
shapes with torch.profiler, split the wall time into timed samples, other kernel time (checks,
warm-up, the reference comparison) and idle gaps, and charge every idle gap to the host step
that was running meanwhile (the check's launch, the comparison, the warm-up probe, a graph
capture, ...). Needs a CUDA GPU.

    python -m tools.bench.profile_bench_pass --shape 4096,4096,4096 --shape 256,256,256 --configs 24

The configs are first compiled in a child process (filling Triton's disk cache, as the compile
stage does), so the profiled passes see what a bench task sees: each config's first launch in
the process, and the shape's set-up (input sets, reference outputs). ``--share 0.111 --batch 4``
profiles what a budgeted search sends instead: screening timings of a ninth of ``rep_ms``, a
shape's configs in passes of four (the whole GEMM benchmark's surrogate batches held about 4).
"""
from __future__ import annotations

import argparse
import bisect
import functools
import gc
import random
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from aot_tune.bench.engine import check, pipeline, timing
from aot_tune.bench.engine.workload import Workload
from aot_tune.bench.nvml import GpuClocks
from aot_tune.manifest import load_manifest
from tools.bench.bench_overhead import request_for, sampled_configs

ROOT = Path(__file__).resolve().parents[2]

#: Host steps timed during the profiled passes: (owner, attribute, label). Nested steps win.
HOST_STEPS = (
    (pipeline._Kernels, "load", "finding and loading kernels"),
    (Workload, "expected", "pass set-up: reference outputs"),
    (Workload, "rotation_for", "pass set-up: input sets"),
    (pipeline._Check, "__init__", "check: queue check and probe launches"),
    (pipeline._Check, "read", "check: wait, read"),
    (check.Comparison, "verdict", "check: reading the comparison"),
    (timing.ConfigTiming, "capture", "graph capture"),
    (timing.ConfigTiming, "start", "start: rewarm, queue timed launches"),
    (timing, "_poison_and_replay", "start: graph write check"),
    (timing.ConfigTiming, "finish", "finish: wait, read"),
    (GpuClocks, "read", "clock reads (NVML)"),
)


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of [start, end) intervals as sorted, disjoint spans."""
    spans: list[list[float]] = []
    for s, e in sorted(intervals):
        if spans and s <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], e)
        else:
            spans.append([s, e])
    return [(s, e) for s, e in spans]


def innermost_segments(steps: list[tuple[float, float, str]]) -> list[tuple[float, float, int]]:
    """Nested host steps (start, end, label) flattened into disjoint segments, each naming (by
    its index in ``steps``) the innermost step running then: the latest started of those open.
    One sweep over the steps' edges (a pass logs thousands of steps)."""
    edges = sorted([(s, 1, i) for i, (s, _, _) in enumerate(steps)] +
                   [(e, 0, i) for i, (_, e, _) in enumerate(steps)])  # at one instant, ends first
    open_steps: list[int] = []
    segments = []
    previous = None
    for t, opens, i in edges:
        if open_steps and t > previous:
            segments.append((previous, t, open_steps[-1]))
        if opens:
            open_steps.append(i)
        else:
            open_steps.remove(i)
        previous = t
    return segments


def charge_gaps(spans: list[tuple[float, float]], segments: list[tuple[float, float, int]],
                window: tuple[float, float]) -> dict[int | None, float]:
    """Idle time inside ``window`` (outside every busy span) charged to the step of the host
    segment it overlaps (by index); what no segment covers goes to None."""
    idle = []
    cursor = window[0]
    for s, e in spans:
        if e <= cursor:
            continue
        if s > cursor:
            idle.append((cursor, min(s, window[1])))
        cursor = max(cursor, e)
        if cursor >= window[1]:
            break
    if cursor < window[1]:
        idle.append((cursor, window[1]))
    charged: dict[int | None, float] = {}
    starts = [s for s, _, _ in segments]
    for a, b in idle:
        covered = 0.0
        i = max(0, bisect.bisect_right(starts, a) - 1)
        while i < len(segments) and segments[i][0] < b:
            s, e, step = segments[i]
            overlap = min(b, e) - max(a, s)
            if overlap > 0:
                charged[step] = charged.get(step, 0.0) + overlap
                covered += overlap
            i += 1
        if b - a - covered > 0:
            charged[None] = charged.get(None, 0.0) + (b - a - covered)
    return charged


def by_label(steps: list[tuple[float, float, str]], charged: dict[int | None, float]) -> dict[str, list[float]]:
    """Idle time per step label: one value per call of that step (zero when it idled nothing)."""
    table: dict[str, list[float]] = {}
    for i, (_, _, label) in enumerate(steps):
        table.setdefault(label, []).append(charged.get(i, 0.0))
    if None in charged:
        table["between steps"] = [charged[None]]
    return table


def install_step_timers(log: list[tuple[float, float, str]]) -> None:
    """Wrap HOST_STEPS so each call appends (start us, end us, label) to ``log`` (perf_counter);
    Python's garbage collections are logged as steps too."""
    collecting: list[float] = []

    def on_collection(phase: str, info: dict) -> None:
        if phase == "start":
            collecting.append(time.perf_counter_ns() / 1e3)
        elif collecting:
            log.append((collecting.pop(), time.perf_counter_ns() / 1e3, f"garbage collection, generation {info['generation']}"))

    gc.callbacks.append(on_collection)
    for owner, name, label in HOST_STEPS:
        original = getattr(owner, name)

        def timed(*args, _original=original, _label=label, **kwargs):
            began = time.perf_counter_ns() / 1e3
            try:
                return _original(*args, **kwargs)
            finally:
                log.append((began, time.perf_counter_ns() / 1e3, _label))

        setattr(owner, name, functools.wraps(original)(timed))


def requests_for(args) -> list[list]:
    """The passes to profile: per shape its sampled configs, timed for ``args.share`` of ``rep_ms``
    (below 1: a search's screening timings), in passes of ``args.batch`` configs (0: one pass)."""
    spec = load_manifest(ROOT / "tuning.yaml").kernel("gemm")
    passes = []
    for text in args.shape:
        shape = tuple(int(v) for v in text.split(","))
        requests = [request_for(spec, shape, "float16", c)
                    for c in sampled_configs(spec, shape, args.configs, random.Random(args.seed))]
        if args.share < 1:
            requests = [replace(r, settings=r.settings.screening(args.share), share=args.share) for r in requests]
        size = args.batch or len(requests)
        passes += [requests[i:i + size] for i in range(0, len(requests), size)]
    return passes


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", help="M,N,K of tuning.yaml's gemm (repeatable)")
    parser.add_argument("--configs", type=int, default=24, help="seeded sample of each shape's configs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--share", type=float, default=1.0,
                        help="time each config for this share of rep_ms (below 1: a search's screening timings)")
    parser.add_argument("--batch", type=int, default=0, help="a shape's configs in passes of this many (0: one pass)")
    parser.add_argument("--compile-only", action="store_true", help=argparse.SUPPRESS)  # the child's job
    args = parser.parse_args(argv)
    if not 0 < args.share <= 1 or args.batch < 0:
        parser.error("--share must be in (0, 1] and --batch at least 0")
    args.shape = args.shape or ["4096,4096,4096"]
    return args


def main() -> int:
    args = options()
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        raise SystemExit("tools.bench.profile_bench_pass needs a CUDA GPU; fix: run it on the GPU host")
    passes = requests_for(args)
    props = torch.cuda.get_device_properties(0)
    l2_bytes = props.L2_cache_size
    if args.compile_only:
        for requests in passes:
            list(pipeline.measure_configs(requests, Workload(requests[0], "cuda:0"), "cuda", l2_bytes))
        return 0
    subprocess.run([sys.executable, "-m", __spec__.name, "--compile-only", "--configs", str(args.configs), "--seed",
                    str(args.seed), "--share", str(args.share)] + [f"--shape={s}" for s in args.shape], check=True)
    torch.ones(1, device="cuda").add_(1)  # the CUDA context and torch's elementwise kernels, before profiling
    pipeline.warm_up_graphs("cuda:0")  # as a device worker does when it opens its GPU
    clocks = GpuClocks(str(getattr(props, "uuid", "")))  # as a device worker reads them
    steps: list[tuple[float, float, str]] = []
    install_step_timers(steps)
    results = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        marks = [time.perf_counter_ns() / 1e3]
        torch.cuda._sleep(1000)  # marker: the trace's first kernel starts about when the host issued it
        torch.cuda.synchronize()
        began = time.perf_counter()
        workload, shape = None, None  # a shape's, kept over its passes as a device worker keeps it between batches
        for requests in passes:
            if requests[0].shape != shape:
                workload, shape = Workload(requests[0], "cuda:0"), requests[0].shape
            results += list(pipeline.measure_configs(requests, workload, "cuda", l2_bytes, clocks))
        torch.cuda.synchronize()
        wall = time.perf_counter() - began
        marks.append(time.perf_counter_ns() / 1e3)
        torch.cuda._sleep(1000)  # marker: the last kernel
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start)
    offset = events[0].time_range.start - marks[0]  # GPU clock minus host clock, launch latency included
    drift = events[-1].time_range.start - marks[1] - offset
    kernels = events[1:-1]
    spans = merged([(e.time_range.start - offset, e.time_range.end - offset) for e in kernels])
    busy_us = sum(e - s for s, e in spans)
    window = (began * 1e6, began * 1e6 + wall * 1e6)
    # Only steps inside the profiled passes (the marker's set-up is outside the window).
    steps = [step for step in steps if step[0] >= window[0]]
    charged = by_label(steps, charge_gaps(spans, innermost_segments(steps), window))
    by_kind: dict[str, float] = {}
    for e in kernels:
        kind = "the configs' kernel" if "matmul_kernel" in e.name else e.name[:60]
        by_kind[kind] = by_kind.get(kind, 0.0) + (e.time_range.end - e.time_range.start) / 1e6
    samples = sum(sum(r.times_ms) * r.launches_per_sample for r in results if r.ok) / 1e3
    ok = sum(r.ok for r in results)
    timing_of = f"{args.share:g} of rep_ms" if args.share < 1 else "full timings"
    print(f"gemm {' + '.join(args.shape)} fp16, {len(results)} configs ({ok} ok) in {len(passes)} passes, "
          f"{timing_of}, {torch.cuda.get_device_name()}")
    print(f"pass wall             {wall:7.3f} s")
    print(f"timed samples         {samples:7.3f} s  {samples / wall:6.1%} of the wall")
    print(f"GPU busy (any kernel) {busy_us / 1e6:7.3f} s  {busy_us / 1e6 / wall:6.1%}")
    print(f"GPU idle              {wall - busy_us / 1e6:7.3f} s, charged to the host step running then "
          f"(clock drift over the pass {drift:.0f} us):")
    for label, values in sorted(charged.items(), key=lambda kv: -sum(kv[1])):
        total = sum(values) / 1e6
        ranked = sorted(values)
        print(f"  {total:7.3f} s  {total / wall:6.1%}  {label} ({len(values)} calls; idle per call: median "
              f"{ranked[len(ranked) // 2]:.0f} us, p90 {ranked[int(len(ranked) * 0.9)]:.0f} us, max {ranked[-1]:.0f} us)")
    print("kernel time by kind:")
    for kind, seconds in sorted(by_kind.items(), key=lambda kv: -kv[1])[:6]:
        print(f"  {seconds:7.3f} s  {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
