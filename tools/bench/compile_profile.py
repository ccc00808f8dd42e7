"""Where compile seconds go: each sampled config of the seed paper's GEMM space compiled through
every lowering stage (ttir, ttgir, llir, ptx, cubin) for a target, on a GPU or cross-compiled on
a CPU, with its validity (shared memory), registers and spills, and what the early rejection and
a compile deadline relative to the batch would do with it.

The sample is the compare tool's (tools.bench.compare_triton_autotune: same ``--configs``,
``--seed`` and ``--max-block``); every shape of the paper is a multiple of 16, so the paper's
shapes share one specialization and each config compiles once, for 4096^3. Every config is
lowered all the way, even one over the shared-memory limit, each into a fresh Triton cache,
after one warm-up compile per worker (a process's first compile pays one-time set-up):

    python -m tools.bench.compile_profile --configs 60 --seed 5 --jobs 16 --out profile.json
    nice python -m tools.bench.compile_profile --configs 60 --seed 5 --first 12 --jobs 1   # a CPU

``--report profile.json`` prints a saved profile again.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

from aot_tune.build.compile import CompileRequest, compile_config
from aot_tune.build.deadline import CompileDeadline
from aot_tune.space import Config
from tools.bench.compare_triton_autotune import sample_configs

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("ttir", "ttgir", "ttgir_check", "llir", "ptx", "cubin")
SHAPE = {"M": 4096, "N": 4096, "K": 4096}


def _request(params: dict, target: str) -> CompileRequest:
    return CompileRequest(kernel="gemm", root=str(ROOT), kernel_ref="kernels.gemm:matmul_kernel",
                          launch_ref="kernels.gemm:matmul", inputs_ref="kernels.gemm:make_inputs", config=params,
                          target=target, shapes=(SHAPE,), dtypes=("float16",))


def _worker_start(target: str) -> None:
    """A fresh Triton cache for this worker, and one compile of a config outside the sample
    (GROUP_M 4) so that the sample's first compile pays no one-time set-up."""
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="aot_tune-profile-")
    warm = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4, "num_stages": 3, "num_warps": 4}
    compile_config(_request(warm, target), "warm-up")


def _profile_one(params: dict, config_id: str, target: str) -> dict:
    result = compile_config(_request(params, target), config_id, stop_early=False)
    return {"config": params, **asdict(result)}


def profile(configs: list[Config], target: str, jobs: int) -> list[dict]:
    with ProcessPoolExecutor(max_workers=jobs, initializer=_worker_start, initargs=(target,)) as pool:
        futures = [pool.submit(_profile_one, c.as_dict(), c.id, target) for c in configs]
        rows = []
        for i, future in enumerate(futures, 1):
            rows.append(future.result())
            row = rows[-1]
            print(f"  {i}/{len(configs)} {_label(row['config'])}: {row['seconds']:.2f} s {row['status']}", flush=True)
    return rows


def early_verdict(row: dict, limit: int) -> str:
    """The stage after which the early rejection stops this config ("" if it compiles fully)."""
    if row["ttgir_shared_bound"] > limit:
        return "ttgir"
    return "llir" if row["shared_bytes"] > limit else ""


def summarize(rows: list[dict], limit: int, deadline: CompileDeadline) -> list[str]:
    total = sum(r["seconds"] for r in rows)
    stage_total = {s: sum(r["stage_seconds"].get(s, 0.0) for r in rows) for s in STAGES}
    other = total - sum(stage_total.values())
    lines = [f"{len(rows)} configs, {total:.1f} s of worker time: "
             + ", ".join(f"{s} {v:.1f} s ({v / total:.0%})" for s, v in stage_total.items() if total)
             + f", outside the stages {other:.1f} s"]
    invalid = [r for r in rows if r["status"] != "ok"]
    wrong = [r for r in rows if r["ttgir_shared_bound"] > r["shared_bytes"]]
    saved = sum(sum(r["stage_seconds"].get(s, 0.0) for s in _after(early_verdict(r, limit))) for r in rows)
    at_ttgir = sum(early_verdict(r, limit) == "ttgir" for r in rows)
    lines.append(f"invalid: {len(invalid)} ({', '.join(sorted({r['status'] for r in invalid})) or '-'}); "
                 f"stopped early: {at_ttgir} after ttgir, {sum(early_verdict(r, limit) == 'llir' for r in rows)} after llir; "
                 f"{saved:.1f} s of lowering skipped ({saved / total:.0%} of the worker time)" if total else "")
    lines.append(f"TTGIR bound above the full compile's shared memory: {len(wrong)} configs (must be 0); "
                 f"a TTGIR bound / shared memory ratio of {_ratio(rows)} over the configs with buffers")
    seconds = sorted(r["seconds"] for r in rows)
    lines.append(f"per config: median {statistics.median(seconds):.2f} s, max {seconds[-1]:.2f} s "
                 f"({seconds[-1] / statistics.median(seconds):.1f}x the median)")
    for r in sorted(rows, key=lambda r: -r["seconds"])[:5]:
        stages = " ".join(f"{s} {r['stage_seconds'].get(s, 0.0):.2f}" for s in STAGES if s in r["stage_seconds"])
        lines.append(f"  slowest: {_label(r['config'])} {r['seconds']:.2f} s [{stages}] shared {r['shared_bytes']} "
                     f"regs {r['registers']} spills {r['spills']} {r['status']}")
    cut = deadline.seconds([r["seconds"] for r in rows if r["status"] == "ok"])
    dropped = [r for r in rows if r["seconds"] > cut]
    lines.append(f"deadline ({deadline.describe()}): {cut:.1f} s; would drop {len(dropped)} configs, "
                 f"{sum(r['status'] == 'ok' for r in dropped)} of them valid: "
                 + (", ".join(_label(r["config"]) for r in dropped) or "none"))
    return lines


def _ratio(rows: list[dict]) -> str:
    ratios = [r["ttgir_shared_bound"] / r["shared_bytes"] for r in rows if r["shared_bytes"] and r["ttgir_shared_bound"]]
    return f"{min(ratios):.2f} to {max(ratios):.2f}" if ratios else "-"


def _after(stage: str) -> tuple[str, ...]:
    return {"ttgir": ("llir", "ptx", "cubin"), "llir": ("ptx", "cubin")}.get(stage, ())


def _label(params: dict) -> str:
    return (f"{params['BLOCK_M']}x{params['BLOCK_N']}x{params['BLOCK_K']} "
            f"s{params['num_stages']} w{params['num_warps']}")


def main() -> int:
    from aot_tune import triton_compat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=60, help="configs sampled from the paper's 576 [60]")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed, as the compare tool's [0]")
    parser.add_argument("--max-block", type=int, help="sample only configs whose BLOCK_* are all <= this")
    parser.add_argument("--first", type=int, help="profile only the first N of the sample (a small machine)")
    parser.add_argument("--target", default="sm90", help="GPU target [sm90]")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compile processes [all cores]")
    parser.add_argument("--deadline-factor", type=float, default=CompileDeadline().factor,
                        help=f"the compile deadline's factor over the median [{CompileDeadline().factor}]")
    parser.add_argument("--out", type=Path, help="save the profile as JSON")
    parser.add_argument("--report", type=Path, help="print a saved profile and exit")
    args = parser.parse_args()
    limit = triton_compat.shared_memory_limit(triton_compat.parse_target(args.target))
    deadline = CompileDeadline(factor=args.deadline_factor)
    if args.report:
        rows = json.loads(args.report.read_text())["rows"]
    else:
        configs = sample_configs(args.configs, args.seed, args.max_block)[:args.first]
        began = time.perf_counter()
        rows = profile(configs, args.target, args.jobs)
        print(f"{time.perf_counter() - began:.1f} s wall on {args.jobs} processes")
        if args.out:
            args.out.write_text(json.dumps({"target": args.target, "seed": args.seed, "rows": rows}, indent=1))
    print("\n".join(summarize(rows, limit, deadline)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
