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
count and efficiency (speedup / GPUs). `--keep DIR` copies the generated/ folder of the widest
run to DIR: its caches hold each measurement's seconds, the per-shape costs that
tools.bench.scaling_model schedules. `--save FILE` writes the timings as JSON, which
`python3 -m tools.bench.scaling_model --measured FILE` checks its predictions against. Runs
where doit is importable (pass its wheel on PYTHONPATH on a machine without it).

Usage: python3 -m tools.bench.bench_scaling --gpus 1 2 [--kernels gemm softmax] [--save FILE]
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


def tune(project: Path, gpus: int, kernels: list[str]) -> tuple[float, float, float]:
    """(process wall, bench stage, bench stage after the device workers were up), seconds."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "doit", "tune", *kernels], cwd=project, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - began
    summary = [line for line in proc.stderr.splitlines()
               if line.startswith(("compile:", "bench:", "specialize:", "bench stage:"))]
    print(f"  {gpus} GPU(s): {wall:.1f} s wall; " + " | ".join(summary), flush=True)
    if proc.returncode != 0:
        sys.exit(f"bench_scaling: doit tune failed in {project}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    stage = re.search(r"bench stage: ([\d.]+)s on \d+ device\(s\), ([\d.]+)s of it after", proc.stderr)
    if not stage:
        sys.exit(f"bench_scaling: no bench stage timing in the output of {project}:\n{proc.stderr[-3000:]}")
    return wall, float(stage.group(1)), float(stage.group(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--kernels", nargs="*", default=[])
    parser.add_argument("--keep", type=Path, help="copy the widest run's generated/ here")
    parser.add_argument("--save", type=Path, help="write the timings here as JSON (tools.bench.scaling_model reads it)")
    args = parser.parse_args()
    import torch

    began = datetime.now(timezone.utc)
    device = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    command = f"python3 -m tools.bench.bench_scaling {' '.join(sys.argv[1:])}"
    print(f"# {began:%Y-%m-%d %H:%M} UTC, {device}, {os.cpu_count()} CPU cores")
    print(f"# {command}")
    with tempfile.TemporaryDirectory() as scratch:
        base = fresh_project(Path(scratch) / "compiled")
        print("compile everything once (and bench on 1 GPU):", flush=True)
        tune(base, 1, args.kernels)
        walls = {}
        for gpus in args.gpus:
            project = fresh_project(Path(scratch) / f"gpus-{gpus}")
            shutil.copytree(base / ".aot_tune", project / ".aot_tune",
                            ignore=shutil.ignore_patterns("bench", "doit.sqlite3*", "run.lock"))
            walls[gpus] = tune(project, gpus, args.kernels)
        if args.keep:
            shutil.copytree(Path(scratch) / f"gpus-{max(args.gpus)}" / "generated", args.keep, dirs_exist_ok=True)
    first = min(walls)
    print("\n| GPUs | process wall | bench stage | after workers up | speedup (stage, after up) | efficiency |"
          "\n|---|---|---|---|---|---|")
    for gpus, (wall, stage, after_up) in sorted(walls.items()):
        speedups = [walls[first][i] / value * first for i, value in ((1, stage), (2, after_up))]
        print(f"| {gpus} | {wall:.1f} s | {stage:.1f} s | {after_up:.1f} s | {speedups[0]:.2f}x, {speedups[1]:.2f}x "
              f"| {speedups[0] / gpus:.0%}, {speedups[1] / gpus:.0%} |")
    if args.save:
        args.save.write_text(json.dumps({
            "date": f"{began:%Y-%m-%d %H:%M} UTC", "device": device, "cpu_cores": os.cpu_count(), "command": command,
            "kernels": args.kernels,
            "runs": [{"gpus": gpus, "wall_s": round(wall, 2), "stage_s": round(stage, 2), "after_up_s": round(after_up, 2)}
                     for gpus, (wall, stage, after_up) in sorted(walls.items())],
        }, indent=1) + "\n")


if __name__ == "__main__":
    main()
