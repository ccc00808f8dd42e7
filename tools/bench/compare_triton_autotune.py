"""aot_tune against Triton's autotuner: the same GEMM, configs and shapes, in one run on one GPU.

The GEMM is kernels/gemm.py's ``matmul_kernel``; the configs are sampled from the seed paper's
space (BLOCK_M/N/K in {32, 64, 128, 256}, GROUP_M 8, num_stages {3, 4, 5}, num_warps {2, 4, 8}:
576 configs); the shapes from the paper's 64 ((M, N, K) each in {256, 512, 1024, 4096}), with
4096^3 always among them; fp16. Each phase runs in a fresh process with fresh caches, and prints
its numbers (and saves them with ``--out``) as it ends, so a run cut short keeps what it measured:

1. ours, clean: ``python3 -m doit tune`` in a scratch project holding a copy of kernels/ and a
   tuning.yaml with exactly the sampled configs (a membership constraint) and shapes, no caches,
   no Triton cache. Wall time around the process; compile / bench / other from its run log.
2. ours, again: the same command, a fresh process, nothing to do.
3. Triton: a fresh process with its own empty TRITON_CACHE_DIR wraps the same kernel in
   ``@triton.autotune(configs, key=["M", "N", "K"])`` and calls it on each shape in turn, so
   every shape is tuned at its first call. It gets what is left of ``--budget-s`` less a reserve
   for phase 4; cut at that deadline, the shapes it finished are kept and the speedup is a
   lower bound.
4. re-time: a fresh process, in phase 1's Triton cache (both sides' picks are compiled there),
   times both picks of each shape interleaved (ours, Triton's, Triton's, ours, ...) with
   ``triton.testing.do_bench`` exactly as the autotuner calls it (a pick both sides share is one
   kernel, timed once: its ratio is 1, not the spread of two timings of it), checks both outputs
   against torch.matmul, and times the tuned pick against the kernel's default config (tuning.yaml),
   this repository's checked-in table pick for the GPU (if any) and torch.matmul (cuBLAS), with
   TFLOP/s and the datasheet floor.

Usage, from the repository root (doit importable, e.g. its wheel on PYTHONPATH):

    python3 -m tools.bench.compare_triton_autotune --out results      # 60 configs, 8 shapes
    python3 -m tools.bench.compare_triton_autotune --configs 576 --shapes 64 --budget-s 3600
    python3 -m tools.bench.compare_triton_autotune --interpreter --configs 2 --shapes 2 \\
        --sizes 16,32 --max-block 32        # the CPU: every phase under the Triton interpreter

The defaults fit one 10-minute command (budget 570 s): phase 1 runs to completion, phase 3 gets
what is left less 60 s for phase 4. The full paper space does not fit one command (its
sequential compiles alone take about 50 minutes on the H200 host, see docs/bench-log.md).
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from aot_tune.space import Config, ConfigSpace
from tools.bench.autotune_sides import DO_BENCH, retime_side, triton_side, write_json
from tools.bench.gemm_manifest import gemm_manifest

ROOT = Path(__file__).resolve().parents[2]

PAPER_SPACE = ConfigSpace(params=(
    ("BLOCK_M", (32, 64, 128, 256)), ("BLOCK_N", (32, 64, 128, 256)), ("BLOCK_K", (32, 64, 128, 256)),
    ("GROUP_M", (8,)), ("num_stages", (3, 4, 5)), ("num_warps", (2, 4, 8)),
))
PAPER_SIZES = (256, 512, 1024, 4096)
RESULT_NAME = "compare_triton_autotune.json"
#: Seconds kept for phase 4 (re-time) when phase 3 gets its deadline.
RETIME_RESERVE_S = 60.0
#: Phase 3 is skipped with less than this left of the budget.
MIN_TRITON_S = 10.0
TARGETS = {"speedup": 5.0, "quality": 1.01, "noop_s": 1.0, "vs_torch": 0.9}


# -- what is compared ---------------------------------------------------------------------------

def sample_configs(count: int, seed: int, max_block: int | None) -> list[Config]:
    configs = PAPER_SPACE.configs()
    if max_block:
        configs = [c for c in configs if all(v <= max_block for k, v in c.params if k.startswith("BLOCK"))]
    if count >= len(configs):
        return configs
    return sorted(random.Random(seed).sample(configs, count), key=lambda c: c.id)


def sample_shapes(count: int, seed: int, sizes: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """The largest cube first (the tuned-vs-torch target is at 4096^3), then a seeded sample."""
    every = list(itertools.product(sizes, repeat=3))
    largest = (max(sizes),) * 3
    rest = [s for s in every if s != largest]
    picked = random.Random(seed + 1).sample(rest, min(max(count - 1, 0), len(rest)))
    return [largest, *sorted(picked)]


def manifest_text(configs: list[Config], shapes: list[tuple[int, int, int]], target: str) -> str:
    """A tuning.yaml with exactly ``configs`` (the product of their values, cut down to them by a
    membership constraint) and ``shapes``, for the local target only, as Triton's autotuner
    compiles for the local GPU alone."""
    values = {name: sorted({dict(c.params)[name] for c in configs}) for name, _ in PAPER_SPACE.params}
    member = " or ".join("(" + " and ".join(f"{k} == {v}" for k, v in c.params) + ")" for c in configs)
    return gemm_manifest(f"  targets: [{target}]\n  bench: {{warmup_ms: 2, rep_ms: 20, l2_flush: true}}\n",
                         values, member, shapes,
                         header="# Written by tools.bench.compare_triton_autotune: the sampled configs and shapes, nothing else.\n")


# -- running the phases ---------------------------------------------------------------------------

def child_env(**extra: str) -> dict[str, str]:
    """This environment with the repository first on PYTHONPATH and every entry absolute (the
    children run in other folders), plus ``extra``. No TRITON_INTERPRET: `doit tune` chooses its
    backend by flag, and the other children set it from their spec before importing triton."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    entries = [str(ROOT)] + [str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(entries))
    env.update(extra)
    return env


def run_timed(argv: list[str], cwd: Path, env: dict[str, str],
              timeout: float) -> tuple[float, subprocess.CompletedProcess | None]:
    """Wall seconds around a fresh process; None for the process when it hit ``timeout``."""
    began = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
        return time.perf_counter() - began, None
    return time.perf_counter() - began, proc


def tune(project: Path, args, timeout: float) -> dict:
    backend = "interpreter" if args.interpreter else "cuda"
    wall, proc = run_timed([sys.executable, "-m", "doit", "tune", "--bench-backend", backend], project,
                           child_env(), timeout)
    if proc is None:
        return {"wall_s": wall, "ok": False, "error": f"cut at the {timeout:.0f} s limit"}
    result = {"wall_s": wall, "ok": proc.returncode == 0,
              "tasks_run": [line[3:] for line in proc.stdout.splitlines() if line.startswith(".  ")],
              "summary": [line for line in proc.stderr.splitlines()
                          if line.startswith(("[specialize]", "specialize:", "compile:", "bench:", "baselines:",
                                              "bench stage:", "bench device time:", "end to end:"))]}
    if proc.returncode != 0:
        result["error"] = (proc.stdout[-2000:] + "\n" + proc.stderr[-3000:]).strip()
    return result


def our_split(project: Path, wall: float) -> dict:
    """The clean run's wall time by part, from its run log; start-up is the time outside the
    command's own clock (interpreter start, imports, doit's loading)."""
    from aot_tune.runs.log import read_runs, time_split

    runs = read_runs(project / ".aot_tune")
    if not runs:
        return {}
    run = runs[-1]
    split = time_split(run)
    split["other"] = round(split.get("other", 0.0) + max(0.0, wall - run.wall_s), 3)
    return {"split": split, "compile_worker_s": run.worker_seconds.get("compile"),
            "specialize_startup_s": run.worker_seconds.get("specialize start-up"),
            "compile": run.compile, "bench": run.bench}


def our_picks(project: Path) -> dict[tuple[int, ...], dict]:
    from aot_tune.cache import config_from_proto, read_cache

    cache = read_cache(project / "generated" / "gemm.tuning.pb")
    return {tuple(r.shape): config_from_proto(r.best) for r in cache.records if r.HasField("best")}


# -- orchestration --------------------------------------------------------------------------------

class Results:
    """Everything measured, printed per phase and saved (with --out) as each phase ends."""

    def __init__(self, out: Path | None, header: dict) -> None:
        self.data = {"header": header}
        self.path = out / RESULT_NAME if out else None
        if out:
            out.mkdir(parents=True, exist_ok=True)

    def phase(self, name: str, data: dict, lines: list[str]) -> None:
        self.data[name] = data
        print("\n".join(lines), flush=True)
        if self.path:
            write_json(self.path, self.data)


def geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def local_target(interpreter: bool) -> tuple[str, str]:
    """(GPU target, device name), read without importing torch in this process."""
    from aot_tune.bench.local.detect import detect

    if interpreter:
        return "sm90", "Triton interpreter (CPU)"
    device = detect("cuda")
    return device.target, device.name


def orchestrate(args) -> int:
    if importlib.util.find_spec("doit") is None:
        sys.exit("compare_triton_autotune: doit is not importable, so `python3 -m doit tune` cannot run; "
                 "fix: install it, or put its wheel's folder on PYTHONPATH")
    began = time.perf_counter()
    deadline = began + args.budget_s
    configs = sample_configs(args.configs, args.seed, args.max_block)
    shapes = sample_shapes(args.shapes, args.seed, args.sizes)
    target, device_name = local_target(args.interpreter)
    header = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "device": device_name,
              "target": target, "cores": os.cpu_count(), "python": sys.version.split()[0],
              "command": "python3 -m tools.bench.compare_triton_autotune " + " ".join(sys.argv[1:]),
              "configs": [c.as_dict() for c in configs], "shapes": shapes, "seed": args.seed}
    results = Results(args.out, header)
    print(f"# {header['date']}, {device_name} ({target}), {os.cpu_count()} CPU cores\n# {header['command']}\n"
          f"{len(configs)} configs of the paper's {PAPER_SPACE.size()}, {len(shapes)} shapes, fp16, "
          f"budget {args.budget_s:.0f} s", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="aot_tune-compare-", dir=args.scratch))
    try:
        project = scratch / "ours"
        shutil.copytree(ROOT / "kernels", project / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
        (project / "tuning.yaml").write_text(manifest_text(configs, shapes, target))

        # 1. ours, clean
        clean = tune(project, args, deadline - time.perf_counter() - 30)
        clean.update(our_split(project, clean["wall_s"]))
        lines = [f"\n## 1. doit tune, clean tree: {clean['wall_s']:.1f} s wall" + ("" if clean["ok"] else " (FAILED)")]
        if clean.get("split"):
            lines.append("   " + ", ".join(f"{k} {v:.1f} s" for k, v in clean["split"].items()))
        lines += [f"   {line}" for line in clean.get("summary", [])]
        if not clean["ok"]:
            lines.append(clean.get("error", ""))
        results.phase("ours_clean", clean, lines)
        if not clean["ok"]:
            return 1
        picks = our_picks(project)

        # 2. ours, again
        again = tune(project, args, 120)
        results.phase("ours_noop", again, [f"\n## 2. doit tune again: {again['wall_s']:.2f} s wall, "
                                           f"{len(again.get('tasks_run', []))} tasks run"])

        # 3. Triton's autotuner
        theirs = run_triton(scratch, configs, shapes, args, deadline - time.perf_counter() - RETIME_RESERVE_S)
        theirs["speedup"] = None if "error" in theirs else theirs["wall_s"] / clean["wall_s"]
        results.phase("triton", theirs, triton_lines(theirs, clean, len(shapes)))

        # 4. re-time both picks, and tuned vs default vs torch
        default = repo_default_config()
        repo = repo_table(args.interpreter, device_name)
        triton_picks = {tuple(t["shape"]): t["config"] for t in theirs["shapes"]}
        spec = {"cache_dir": str(project / ".aot_tune" / "triton-cache"), "interpreter": args.interpreter,
                "repeats": args.repeats, "result": str(scratch / "retime.json"),
                "shapes": [{"shape": list(s), "ours": picks.get(tuple(s)), "triton": triton_picks.get(tuple(s)),
                            "default": default.resolve({"M": s[0], "N": s[1], "K": s[2]}).as_dict(),
                            "repo_table": repo.get((*s, "float16"))} for s in shapes]}
        write_json(scratch / "retime-spec.json", spec)
        wall, proc = run_timed([sys.executable, "-m", __spec__.name, "--internal-retime",
                                str(scratch / "retime-spec.json")], ROOT, child_env(),
                               max(deadline - time.perf_counter(), 60.0))
        retimed = json.loads(Path(spec["result"]).read_text()) if Path(spec["result"]).exists() else {"shapes": []}
        summary = summarize_retime(retimed, device_name)
        summary["wall_s"] = wall
        summary["method"] = "three wall-clock runs (the interpreter has no do_bench)" if args.interpreter else \
            f"do_bench (warmup {DO_BENCH['warmup']} ms, rep {DO_BENCH['rep']} ms, median; the autotuner's settings)"
        if proc is None or proc.returncode != 0:
            summary["error"] = "cut at its time limit" if proc is None else proc.stderr[-1500:]
        results.phase("retime", summary, retime_lines(summary))
        results.phase("targets", targets(results.data), target_lines(results.data))
        return 0
    finally:
        if args.keep_scratch:
            print(f"scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def run_triton(scratch: Path, configs: list[Config], shapes: list, args, limit: float) -> dict:
    """Phase 3 in a fresh process with an empty Triton cache, cut at ``limit`` seconds."""
    if limit < MIN_TRITON_S:
        return {"wall_s": 0.0, "limit_s": limit, "finished": False, "shapes": [],
                "error": f"skipped: {max(limit, 0):.0f} s of the budget left; fix: raise --budget-s"}
    cache = scratch / "triton-cache"
    spec = {"cache_dir": str(cache), "interpreter": args.interpreter, "configs": [c.as_dict() for c in configs],
            "shapes": shapes, "progress": str(scratch / "triton.json")}
    write_json(scratch / "triton-spec.json", spec)
    wall, proc = run_timed([sys.executable, "-m", __spec__.name, "--internal-triton",
                            str(scratch / "triton-spec.json")], ROOT, child_env(TRITON_CACHE_DIR=str(cache)), limit)
    progress = Path(spec["progress"])
    done = json.loads(progress.read_text())["shapes"] if progress.exists() else []
    result = {"wall_s": wall, "limit_s": limit, "finished": proc is not None and proc.returncode == 0, "shapes": done}
    if proc is not None and proc.returncode != 0:
        result["error"] = proc.stderr[-1500:]
    return result


def triton_lines(theirs: dict, clean: dict, shapes: int) -> list[str]:
    wall, done = theirs["wall_s"], len(theirs["shapes"])
    status = ""
    if "error" in theirs:
        status = f" (FAILED after {done} of {shapes} shapes)\n{theirs['error']}"
    elif not theirs["finished"]:
        status = f" (cut at its {theirs['limit_s']:.0f} s limit after {done} of {shapes} shapes)"
    lines = [f"\n## 3. @triton.autotune, same configs and shapes, empty Triton cache: {wall:.1f} s wall{status}"]
    lines += [f"   {'x'.join(map(str, s['shape']))}: {s['seconds']:.1f} s" for s in theirs["shapes"]]
    bound = "" if theirs["finished"] else "at least "
    lines.append(f"   end to end: Triton {wall:.1f} s / ours {clean['wall_s']:.1f} s = {bound}{_x(theirs['speedup'])} "
                 f"(target {TARGETS['speedup']:.0f}x)")
    return lines


def repo_table(interpreter: bool, device_name: str) -> dict:
    """This repository's checked-in GEMM table for this device (generated/gemm.py), if it has one."""
    from aot_tune.runtime.devices import INTERPRETER, device_key

    try:
        from generated import gemm
    except ImportError:
        return {}
    return dict(gemm.TABLES.get(INTERPRETER if interpreter else device_key(device_name), {}))


def repo_default_config():
    """The GEMM's default config as this repository's tuning.yaml declares it."""
    from aot_tune.manifest import load_manifest

    return load_manifest(ROOT / "tuning.yaml").kernel("gemm").default_config


def summarize_retime(retimed: dict, device_name: str) -> dict:
    """Per shape: the quality ratio (ours / Triton's pick), TFLOP/s of every side, the floor."""
    from aot_tune.runtime.devices import device_peak

    peak = device_peak(device_name)
    rows = []
    for row in retimed["shapes"]:
        m, n, k = row["shape"]
        flops, ms = 2.0 * m * n * k, row["ms"]
        both = "ours" in ms and "triton" in ms
        rows.append({**row, "quality": ms["ours"] / ms["triton"] if both else None,
                     "same_config": both and row["configs"]["ours"] == row["configs"]["triton"],
                     "tflops": {name: flops / (t * 1e-3) / 1e12 for name, t in ms.items()},
                     "floor_ms": flops / (peak.matrix_tflops["float16"] * 1e12) * 1e3 if peak else None,
                     "vs_torch": ms["torch.matmul"] / ms["ours"] if "ours" in ms and "torch.matmul" in ms else None})
    return {"rows": rows, "quality_geomean": geomean([r["quality"] for r in rows if r["quality"]]),
            "peak_tflops": peak.matrix_tflops["float16"] if peak else None,
            "peak_source": peak.source if peak else None}


def retime_lines(summary: dict) -> list[str]:
    lines = [f"\n## 4. picks re-timed, interleaved, with {summary['method']}: {summary['wall_s']:.1f} s", "",
             "| M x N x K | ours µs | Triton's µs | ours / Triton's | same config | rel. error ours, Triton's |",
             "|---|---|---|---|---|---|"]
    for row in summary["rows"]:
        ms, errors = row["ms"], row["errors"]
        lines.append(f"| {_shape(row)} | {_us(ms.get('ours'))} | {_us(ms.get('triton'))} | {_f(row['quality'])} | "
                     f"{'yes' if row['same_config'] else 'no'} | "
                     + ", ".join(f"{errors[s]:.1e}" for s in ("ours", "triton") if s in errors) + " |")
    geo = summary["quality_geomean"]
    lines.append(f"\nquality ratio, geometric mean of ours / Triton's: {_f(geo)} (target <= {TARGETS['quality']})")
    peak = f"{summary['peak_tflops']} TFLOP/s ({summary['peak_source']})" if summary["peak_tflops"] else "unknown"
    lines += ["", f"tuned vs default config vs torch.matmul, TFLOP/s; floor: the time at the datasheet peak, {peak}",
              "", "| M x N x K | tuned (this run) | repo table | default config | torch.matmul | tuned / torch "
              "| floor µs |",
              "|---|---|---|---|---|---|---|"]
    for row in summary["rows"]:
        cells = [_rate(row["tflops"].get(name)) for name in ("ours", "repo table", "default", "torch.matmul")]
        vs = _x(row["vs_torch"])
        lines.append(f"| {_shape(row)} | " + " | ".join(cells) + f" | {vs} | {_us(row['floor_ms'])} |")
    if summary.get("error"):
        lines.append(f"re-time stopped early: {summary['error']}")
    return lines


def _shape(row: dict) -> str:
    return "x".join(map(str, row["shape"]))


def targets(data: dict) -> dict:
    retime = data.get("retime", {})
    largest = next((r for r in retime.get("rows", []) if r["shape"] == list(data["header"]["shapes"][0])), None)
    return {
        "speedup": data.get("triton", {}).get("speedup"),
        "speedup_is_lower_bound": not data.get("triton", {}).get("finished", False),
        "quality_geomean": retime.get("quality_geomean"),
        "noop_s": data.get("ours_noop", {}).get("wall_s"),
        "tuned_vs_torch_at_largest": largest["vs_torch"] if largest else None,
    }


def target_lines(data: dict) -> list[str]:
    t = targets(data)

    def verdict(value, ok) -> str:
        return "not measured" if value is None else ("met" if ok(value) else "NOT met")

    return ["\n## targets",
            f"- end to end >= {TARGETS['speedup']:.0f}x faster: "
            f"{'at least ' if t['speedup_is_lower_bound'] else ''}{_x(t['speedup'])}, "
            f"{verdict(t['speedup'], lambda v: v >= TARGETS['speedup'])}",
            f"- picks no slower (geomean <= {TARGETS['quality']}): {_f(t['quality_geomean'])}, "
            f"{verdict(t['quality_geomean'], lambda v: v <= TARGETS['quality'])}",
            f"- no-op rerun < {TARGETS['noop_s']:.0f} s: {_f(t['noop_s'], 's')}, "
            f"{verdict(t['noop_s'], lambda v: v < TARGETS['noop_s'])}",
            f"- tuned >= {TARGETS['vs_torch']}x torch.matmul at the largest shape: "
            f"{_x(t['tuned_vs_torch_at_largest'])}, "
            f"{verdict(t['tuned_vs_torch_at_largest'], lambda v: v >= TARGETS['vs_torch'])}"]


def _us(ms: float | None) -> str:
    return "—" if ms is None else f"{ms * 1e3:.1f}"


def _rate(tflops: float | None) -> str:
    return "—" if tflops is None else f"{tflops:.1f}" if tflops >= 10 else f"{tflops:.3g}"


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _f(value: float | None, unit: str = "") -> str:
    return "—" if value is None else f"{value:.3f}{' ' + unit if unit else ''}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=60, help="configs sampled from the paper's 576 [60]")
    parser.add_argument("--shapes", type=int, default=8, help="shapes of the paper's 64, 4096^3 always included [8]")
    parser.add_argument("--seed", type=int, default=0, help="seed of both samples [0]")
    parser.add_argument("--out", type=Path, help=f"folder for {RESULT_NAME}, rewritten as each phase ends")
    parser.add_argument("--budget-s", type=float, default=570.0,
                        help="wall seconds for the whole run; Triton's phase is cut to fit [570]")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved do_bench calls per pick and shape [5]")
    parser.add_argument("--sizes", type=lambda s: tuple(int(v) for v in s.split(",")), default=PAPER_SIZES,
                        help="the sizes M, N and K take [256,512,1024,4096]")
    parser.add_argument("--max-block", type=int, help="sample only configs whose BLOCK_* are all <= this")
    parser.add_argument("--interpreter", action="store_true", help="run every phase on the CPU under the interpreter")
    parser.add_argument("--scratch", help="folder for the scratch project and caches [a temporary folder]")
    parser.add_argument("--keep-scratch", action="store_true", help="do not delete the scratch folder")
    parser.add_argument("--internal-triton", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--internal-retime", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.internal_triton:
        triton_side(args.internal_triton)
        return 0
    if args.internal_retime:
        retime_side(args.internal_retime)
        return 0
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
