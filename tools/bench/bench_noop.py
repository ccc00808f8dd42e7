"""Measure the wall time of a no-op ``doit tune``: nothing changed, every task up to date.

Builds a scratch project (a copy of kernels/ and a synthetic tuning.yaml with one kernel,
``vector_add``, over N/2 distinct shapes x 2 dtypes = N bench tasks), runs
``python -m doit tune --bench-backend interpreter`` once for real to populate the caches, then
runs the same command R more times and times each. Every timed run is a fresh process, so the
times include interpreter start-up, imports, manifest parsing, planning and the staleness checks:
what a user waits for. Exits 1 if a no-op run executes any task. Target: 1000 bench tasks < 3 s.

    python -m tools.bench.bench_noop                            # 1000 bench tasks, 3 no-op runs
    python -m tools.bench.bench_noop --bench-tasks 40 --repeats 2
    python -m tools.bench.bench_noop --keep /tmp/noop-project   # keep the scratch project
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "doit", "tune", "--bench-backend", "interpreter"]
PYPROJECT = '[tool.doit]\nloader = "aot_tune"\nbackend = "sqlite3"\ndep_file = ".aot_tune/doit.sqlite3"\n'


def manifest(shapes: int) -> str:
    lines = [
        "version: 1", "kernels:", "  vector_add:",
        "    kernel: kernels.vector_add:add_kernel", "    launch: kernels.vector_add:add",
        "    inputs: kernels.vector_add:make_inputs", "    reference: kernels.vector_add:reference",
        "    key: [n]", "    space: {BLOCK_SIZE: [256], num_warps: [4]}",
        "    bench: {warmup_ms: 0.1, rep_ms: 0.1}", "    targets: [sm90]", "    dtypes: [float16, float32]",
        "    shapes:",
    ]
    lines += [f"      - {{n: {1000 + 37 * i}}}" for i in range(shapes)]
    return "\n".join(lines) + "\n"


def build(project: Path, shapes: int) -> None:
    project.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "kernels", project / "kernels", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (project / "tuning.yaml").write_text(manifest(shapes))
    (project / "pyproject.toml").write_text(PYPROJECT)


def run(project: Path, env: dict, extra: list[str]) -> tuple[float, int, int, int]:
    """One ``doit tune``: (wall seconds, tasks executed, tasks up to date, bench tasks loaded)."""
    start = time.perf_counter()
    proc = subprocess.run(COMMAND + extra, check=False, cwd=project, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        sys.exit(f"doit tune exited {proc.returncode}")
    lines = proc.stdout.splitlines()
    ran = [ln[3:] for ln in lines if ln.startswith(".  ")]
    skipped = [ln[3:] for ln in lines if ln.startswith("-- ")]
    bench = sum(name.startswith("bench:") for name in ran + skipped)
    return wall, len(ran), len(skipped), bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-tasks", type=int, default=1000, help="bench tasks (2 dtypes x N/2 shapes) [default: 1000]")
    parser.add_argument("--repeats", type=int, default=3, help="timed no-op runs [default: 3]")
    parser.add_argument("--keep", type=Path, help="build the project in this folder and keep it")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="-n of the populate run [default: all cores]")
    args = parser.parse_args()

    shapes = max(1, args.bench_tasks // 2)
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)

    with tempfile.TemporaryDirectory(prefix="aot_tune-noop-") as tmp:
        project = args.keep.resolve() if args.keep else Path(tmp)
        build(project, shapes)
        print(f"project {project}: {shapes} shapes x 2 dtypes = {2 * shapes} bench tasks", flush=True)

        populate, ran, skipped, bench = run(project, env, ["-n", str(args.jobs)])
        print(f"populate (-n {args.jobs}): {populate:.1f} s, {ran} tasks executed, {skipped} up to date, "
              f"{ran + skipped} loaded ({bench} bench)", flush=True)

        times, failed = [], False
        for i in range(args.repeats):
            wall, ran, skipped, bench = run(project, env, [])
            times.append(wall)
            failed |= ran != 0
            print(f"no-op {i + 1}: {wall:.2f} s, {ran} tasks executed, {ran + skipped} loaded ({bench} bench)"
                  + ("  <-- NOT A NO-OP" if ran else ""), flush=True)

    median = statistics.median(times) if times else float("nan")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print("\n| | |\n|---|---|")
    print(f"| command | `python -m tools.bench.bench_noop --bench-tasks {args.bench_tasks} --repeats {args.repeats}` |")
    print(f"| timed | `{' '.join(['python'] + COMMAND[1:])}` (no-op), fresh process each |")
    print(f"| bench tasks | {2 * shapes} ({shapes} shapes x 2 dtypes), {ran + skipped} tasks loaded |")
    print(f"| populate | {populate:.1f} s (-n {args.jobs}) |")
    print(f"| no-op runs | {', '.join(f'{t:.2f} s' for t in times)}; median {median:.2f} s |")
    print(f"| machine | {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()} |")
    print(f"| date | {now} |")
    if failed:
        print("FAIL: a no-op run executed tasks", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
