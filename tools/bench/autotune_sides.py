"""The two phases of tools.bench.compare_triton_autotune that run in processes of their own,
each with its own empty Triton cache and environment: Triton's autotuner tuning every shape at
its first call (phase 3), and both sides' picks re-timed interleaved with do_bench (phase 4).
Each reads its spec from a JSON file and writes its progress after every shape, so a process
cut at its deadline keeps what it measured."""
from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

#: Launch options of a config (the rest are the kernel's constexprs).
LAUNCH_OPTIONS = ("num_warps", "num_stages")
#: do_bench settings of both sides in phase 4: Triton's autotuner defaults.
DO_BENCH = {"warmup": 25, "rep": 100}


def triton_side(spec_path: Path) -> None:
    """Phase 3, in its own process: @triton.autotune over the shapes; progress saved per shape."""
    spec = json.loads(spec_path.read_text())
    os.environ["TRITON_CACHE_DIR"] = spec["cache_dir"]
    if spec["interpreter"]:
        os.environ["TRITON_INTERPRET"] = "1"
    from aot_tune import triton_compat

    triton_compat.pin_environment()  # the same cache-key environment as ours: identical code
    import torch
    import triton

    from kernels.gemm import make_inputs, matmul_kernel

    device = "cpu" if spec["interpreter"] else "cuda"
    configs = [triton.Config({k: v for k, v in c.items() if k not in LAUNCH_OPTIONS},
                             num_warps=c["num_warps"], num_stages=c["num_stages"]) for c in spec["configs"]]
    options = {"do_bench": wall_do_bench} if spec["interpreter"] else {}
    tuned = triton.autotune(configs=configs, key=["M", "N", "K"], **options)(matmul_kernel)
    progress = {"shapes": []}
    for m, n, k in spec["shapes"]:
        torch.manual_seed(0)
        a, b = make_inputs({"M": m, "N": n, "K": k}, torch.float16, device)
        c = torch.empty((m, n), dtype=torch.float16, device=device)
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
        began = time.perf_counter()
        tuned[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
        if not spec["interpreter"]:
            torch.cuda.synchronize()
        best = tuned.best_config
        progress["shapes"].append({"shape": [m, n, k], "seconds": time.perf_counter() - began,
                                   "config": {**best.kwargs, "num_warps": best.num_warps,
                                              "num_stages": best.num_stages}})
        write_json(Path(spec["progress"]), progress)


def wall_do_bench(fn, quantiles=None, **_):
    """The interpreter has no GPU benchmarker: three wall-clock runs stand in for do_bench."""
    times = []
    for _ in range(3):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1e3)
    median = statistics.median(times)
    return [median] * len(quantiles) if quantiles else median


def retime_side(spec_path: Path) -> None:
    """Phase 4, in its own process: both picks interleaved per shape, then tuned vs the rest."""
    spec = json.loads(spec_path.read_text())
    os.environ["TRITON_CACHE_DIR"] = spec["cache_dir"]
    if spec["interpreter"]:
        os.environ["TRITON_INTERPRET"] = "1"
    from aot_tune import triton_compat

    triton_compat.pin_environment()
    import torch
    import triton

    from kernels.gemm import make_inputs, matmul, vendor

    device = "cpu" if spec["interpreter"] else "cuda"
    bench = (lambda fn: wall_do_bench(fn)) if spec["interpreter"] else \
        (lambda fn: triton.testing.do_bench(fn, quantiles=(0.5, 0.2, 0.8), **DO_BENCH)[0])
    result = {"shapes": []}
    for entry in spec["shapes"]:
        m, n, k = entry["shape"]
        torch.manual_seed(0)
        a, b = make_inputs({"M": m, "N": n, "K": k}, torch.float16, device)
        expected = (a.float() @ b.float())
        sides = {name: cfg for name, cfg in (("ours", entry["ours"]), ("triton", entry["triton"])) if cfg}
        same = "triton" in sides and sides.get("ours") == sides["triton"]
        if same:  # one kernel: its two timings' spread is noise, not a difference of picks
            del sides["triton"]
        row = {"shape": entry["shape"], "configs": sides, "errors": {}, "ms": {},
               "samples": {name: [] for name in sides}}
        for name, cfg in sides.items():  # the first call compiles or loads: outside every timing
            out = matmul(a, b, config=dict(cfg)).float()
            row["errors"][name] = float(torch.linalg.vector_norm(out - expected) / torch.linalg.vector_norm(expected))
        order = list(sides)
        for repeat in range(spec["repeats"]):
            for name in (order if repeat % 2 == 0 else order[::-1]):
                row["samples"][name].append(bench(lambda cfg=sides[name]: matmul(a, b, config=dict(cfg))))
        row["ms"] = {name: statistics.median(times) for name, times in row["samples"].items()}
        if same:
            row["configs"]["triton"] = row["configs"]["ours"]
            for field in ("errors", "ms", "samples"):
                row[field]["triton"] = row[field]["ours"]
        others = {"default": entry["default"], "repo table": entry["repo_table"]}
        for name, cfg in others.items():
            if cfg:
                matmul(a, b, config=dict(cfg))
                row["ms"][name] = bench(lambda cfg=cfg: matmul(a, b, config=dict(cfg)))
        vendor(a, b)
        row["ms"]["torch.matmul"] = bench(lambda: vendor(a, b))
        result["shapes"].append(row)
        write_json(Path(spec["result"]), result)


def write_json(path: Path, data) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)
