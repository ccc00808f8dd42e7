"""Bench-stage scaling over GPUs: the same manifest benchmarked on 1 GPU and on N GPUs.

1. A scratch copy of this repo's kernels and tuning.yaml (no caches) is tuned once on GPU 0, so
   every compile (and Triton's disk cache) exists.
2. For each GPU count, a fresh copy receives those compile outputs but no bench outputs or
   caches, and `doit tune` runs with CUDA_VISIBLE_DEVICES set to that many GPUs: only the bench
   stage (plus merge and generate) runs, so its wall time is the bench stage's.

Prints, per GPU count, the process wall time and the bench stage's time from `doit tune`'s
summary (first bench task's start to last one's end), in all and counted from when the device
workers were up (in a full run they start while the compiles run, so their start-up of a few
seconds is hidden there; in these bench-only runs it is not), with speedups over the smallest
count and efficiency (speedup / GPUs).

`--cold` skips step 1 and runs, for each GPU count, a full cold `doit tune` in a fresh copy: no
compile outputs, no bench outputs, and an empty Triton cache (aot_tune keeps it per project, in
.aot_tune/triton-cache), so every compile runs and the device workers start while they do, as
in any full run. There the bench stage (from its first task's start, which waits for the
first compiles) is not the measure: the table also gives the compile stage (from the run's
.aot_tune/runs.json), the stage **from its first batch with work for a device to its end** (the
summary's "from its first batch" figure: the device workers' start-up counts in it only where a
batch waited for it), and the stage's part after the last compile ended, with speedups and
efficiencies on each.

`--jobs N` passes `-n N` to every `doit tune` (parallel tasks and compile workers; default: all
cores). `--interpreter` runs the same steps on a CPU (`--bench-backend interpreter`, one
interpreter device whatever the count): a check of the tool, not a measurement. `--keep DIR`
copies the generated/ folder of the widest run to DIR: its caches hold each measurement's
seconds, the per-shape costs that tools.bench.scaling_model schedules. `--save FILE` writes the
timings and the mode (bench-only or cold) as JSON, which `python3 -m tools.bench.scaling_model
--measured FILE` checks its predictions against (they are bench-only stages). Runs where doit is
importable (pass its wheel on PYTHONPATH on a machine without it).

Usage: python3 -m tools.bench.bench_scaling --gpus 1 2 [--cold] [--jobs N] [--kernels gemm softmax] [--save FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fresh_project(where: Path) -> Path:
    where.mkdir(parents=True)
    shutil.copytree(ROOT / "kernels", where / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "tuning.yaml", where / "tuning.yaml")
    (where / "generated").mkdir()
    return where


def tune(project: Path, gpus: int, args: argparse.Namespace) -> dict:
    """One `doit tune`, its timings in seconds (a --save run): process wall, compile stage, bench
    stage, the stage after the device workers were up, the stage from its first batch, and the
    stage after the last compile ended."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    options = ["-n", str(args.jobs)] if args.jobs else []
    if args.interpreter:
        options += ["--bench-backend", "interpreter"]
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "doit", "tune", *options, *args.kernels], cwd=project, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - began
    summary = [line for line in proc.stderr.splitlines()
               if line.startswith(("compile:", "bench:", "specialize:", "bench stage:", "bench device time:"))]
    print(f"  {gpus} GPU(s): {wall:.1f} s wall; " + " | ".join(summary), flush=True)
    if proc.returncode != 0:
        sys.exit(f"bench_scaling: doit tune failed in {project}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    stage = re.search(r"bench stage: ([\d.]+)s on \d+ device\(s\), ([\d.]+)s of it after", proc.stderr)
    if not stage:
        sys.exit(f"bench_scaling: no bench stage timing in the output of {project}:\n{proc.stderr[-3000:]}")
    batches = re.search(r"([\d.]+)s from its first batch to its end", proc.stderr)
    record = json.loads((project / ".aot_tune" / "runs.json").read_text())[-1]  # this run's record
    spans = record["stages"]
    compile_start, compile_end = spans.get("compile", (0.0, 0.0))
    bench_start, bench_end = spans["bench"]
    return {"gpus": gpus, "wall_s": round(wall, 2), "compile_s": round(compile_end - compile_start, 2),
            "stage_s": float(stage.group(1)), "after_up_s": float(stage.group(2)),
            "from_first_batch_s": float(batches.group(1)) if batches else float("nan"),
            "after_compiles_s": round(bench_end - max(bench_start, compile_end), 2),
            # where the devices' held time went, summed over the devices (the summary's split)
            "device_s": {key.removeprefix("device "): round(value, 2)
                         for key, value in record.get("worker_seconds", {}).items() if key.startswith("device ")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--kernels", nargs="*", default=[])
    parser.add_argument("--cold", action="store_true", help="a full cold `doit tune` for each count (see above)")
    parser.add_argument("--jobs", type=int, help="`doit tune -n`: parallel tasks and compile workers [default: cores]")
    parser.add_argument("--interpreter", action="store_true", help="check the tool on a CPU (see above)")
    parser.add_argument("--keep", type=Path, help="copy the widest run's generated/ here")
    parser.add_argument("--save", type=Path, help="write the timings here as JSON (tools.bench.scaling_model reads it)")
    args = parser.parse_args()

    began = datetime.now(timezone.utc)
    if args.interpreter:
        device = "Triton interpreter (a check of the tool, not a measurement)"
    else:
        import torch

        device = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    mode = "cold" if args.cold else "bench-only"
    command = f"python3 -m tools.bench.bench_scaling {' '.join(sys.argv[1:])}"
    print(f"# {began:%Y-%m-%d %H:%M} UTC, {device}, {os.cpu_count()} CPU cores, {mode} runs")
    print(f"# {command}")
    with tempfile.TemporaryDirectory() as scratch:
        if not args.cold:
            base = fresh_project(Path(scratch) / "compiled")
            print("compile everything once (and bench on 1 GPU):", flush=True)
            tune(base, 1, args)
        runs = {}
        for gpus in args.gpus:
            project = fresh_project(Path(scratch) / f"gpus-{gpus}")
            if not args.cold:
                shutil.copytree(base / ".aot_tune", project / ".aot_tune",
                                ignore=shutil.ignore_patterns("bench", "doit.sqlite3*", "run.lock"))
            runs[gpus] = tune(project, gpus, args)
        if args.keep:
            shutil.copytree(Path(scratch) / f"gpus-{max(args.gpus)}" / "generated", args.keep, dirs_exist_ok=True)
    report(runs, args.cold)
    if args.save:
        args.save.write_text(json.dumps({
            "date": f"{began:%Y-%m-%d %H:%M} UTC", "device": device, "cpu_cores": os.cpu_count(), "command": command,
            "mode": mode, "kernels": args.kernels, "runs": [runs[gpus] for gpus in sorted(runs)],
        }, indent=1) + "\n")


def report(runs: dict[int, dict], cold: bool) -> None:
    """A markdown table of the runs, with speedups and efficiencies over the smallest count: of
    the bench stage and of its part after the workers were up; in cold runs also of the stage
    from its first batch and of its part after the last compile."""
    measures = {"stage": "stage_s", "after up": "after_up_s"}
    columns = {"process wall": "wall_s", "bench stage": "stage_s", "after workers up": "after_up_s"}
    if cold:
        measures.update({"from first batch": "from_first_batch_s", "after compiles": "after_compiles_s"})
        columns = {"process wall": "wall_s", "compile stage": "compile_s", "bench stage": "stage_s",
                   "after workers up": "after_up_s", "from its first batch": "from_first_batch_s",
                   "after the last compile": "after_compiles_s"}
    first = min(runs)
    print(f"\n| GPUs | {' | '.join(columns)} | speedup ({', '.join(measures)}) | efficiency |")
    print("|---" * (len(columns) + 3) + "|")
    for gpus, run in sorted(runs.items()):
        speedups = [runs[first][key] / run[key] * first if runs[first][key] > 0 and run[key] > 0 else None
                    for key in measures.values()]
        cells = [f"{run[key]:.1f} s" for key in columns.values()]
        cells.append(", ".join(f"{s:.2f}x" if s else "n/a" for s in speedups))
        cells.append(", ".join(f"{s / gpus:.0%}" if s else "n/a" for s in speedups))
        print(f"| {gpus} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
