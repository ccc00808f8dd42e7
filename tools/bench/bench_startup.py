"""Measure the fixed start-up of a cold ``doit tune``: wall time, and when the first results land.

Builds a scratch project (a copy of kernels/ and a tuning.yaml tuning kernels/gemm.py's
``matmul_kernel`` over a few small configs and shapes), then runs the same command R times, each
in a fresh copy with no caches at all (no ``.aot_tune/``, no Triton cache, no tables):

    python -m doit tune --bench-backend interpreter [-n JOBS]

Every run is a fresh process, timed from just before it is started. Besides the wall time it
reports, from the files the run writes (their modification times, on the same clock):

* ``specialized``: the specialization table written (the first task that needs a compile
  worker, ``[specialize]``, is done);
* ``first compile``: the first compile output written (a compile worker has compiled once);
* ``last compile``: the last compile output written;
* ``first bench``: the first bench output written (a device worker is up and has measured).

The work itself is small on purpose (real cross-compiles for sm90, the Triton interpreter for
the measurements), so these times are mostly the start-up of the processes the run needs.

    python -m tools.bench.bench_startup                        # 6 configs, 2 shapes, 3 runs, -n all cores
    python -m tools.bench.bench_startup --configs 12 --repeats 5 --jobs 2
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

from tools.bench.gemm_manifest import gemm_manifest

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "doit", "tune", "--bench-backend", "interpreter"]
#: BLOCK_M/N/K in {16, 32}: small enough that the interpreter measures each in well under a second.
SPACE = {"BLOCK_M": [16, 32], "BLOCK_N": [16, 32], "BLOCK_K": [16, 32], "GROUP_M": [8], "num_warps": [4],
         "num_stages": [2, 3]}


def manifest(configs: int, shapes: int) -> str:
    sizes = [(16, 16, 16), (32, 32, 32), (16, 32, 16), (32, 16, 32), (16, 16, 32), (32, 32, 16)][:shapes]
    # the first `configs` of the space's 16, by a constraint on a running index of the product
    constraint = f"(BLOCK_M // 32) * 8 + (BLOCK_N // 32) * 4 + (BLOCK_K // 32) * 2 + (num_stages - 2) < {configs}"
    return gemm_manifest("  targets: [sm90]\n  bench: {warmup_ms: 1, rep_ms: 1}\n", SPACE, constraint, sizes)


def build(project: Path, configs: int, shapes: int) -> None:
    project.mkdir(parents=True)
    shutil.copytree(ROOT / "kernels", project / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    (project / "tuning.yaml").write_text(manifest(configs, shapes))


def first_last(folder: Path, pattern: str) -> tuple[float | None, float | None, int]:
    stamps = [p.stat().st_mtime for p in folder.glob(pattern)]
    return (min(stamps), max(stamps), len(stamps)) if stamps else (None, None, 0)


def run(project: Path, env: dict, extra: list[str]) -> dict:
    began = time.time()
    start = time.perf_counter()
    proc = subprocess.run(COMMAND + extra, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        sys.exit(f"doit tune exited {proc.returncode}")
    work = project / ".aot_tune"
    specialized, _, _ = first_last(work / "specialize", "*.json")
    first_compile, last_compile, compiles = first_last(work / "compile", "**/*.json")
    first_bench, _, benches = first_last(work / "bench", "**/*.pb")
    if not benches:
        first_bench, _, benches = first_last(work / "bench", "**/*")

    def since(stamp: float | None) -> float | None:
        return None if stamp is None else stamp - began

    return {"wall": wall, "specialized": since(specialized), "first compile": since(first_compile),
            "last compile": since(last_compile), "first bench": since(first_bench),
            "compiles": compiles, "benches": benches}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=6, help="configs of the 16 in the space [default: 6]")
    parser.add_argument("--shapes", type=int, default=2, help="shapes, at most 6 [default: 2]")
    parser.add_argument("--repeats", type=int, default=3, help="cold runs [default: 3]")
    parser.add_argument("--jobs", type=int, help="-n for doit tune [default: doit tune's, all cores]")
    parser.add_argument("--keep", type=Path, help="build the projects under this folder and keep them")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    extra = ["-n", str(args.jobs)] if args.jobs else []
    keys = ("wall", "specialized", "first compile", "last compile", "first bench")
    rows = []
    with tempfile.TemporaryDirectory(prefix="aot_tune-startup-") as tmp:
        base = args.keep.resolve() if args.keep else Path(tmp)
        for i in range(args.repeats):
            project = base / f"run{i + 1}"
            build(project, args.configs, args.shapes)
            row = run(project, env, extra)
            rows.append(row)
            print(f"run {i + 1}: " + ", ".join(f"{k} {row[k]:.2f} s" for k in keys if row[k] is not None)
                  + f"  ({row['compiles']} compiles, {row['benches']} bench outputs)", flush=True)

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python", "-m", "tools.bench.bench_startup", *sys.argv[1:]])
    print(f"\n`{command}` ({now}, {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()})")
    print("| seconds from start | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for label, pick in (("median", statistics.median), ("min", min)):
        values = [pick([r[k] for r in rows if r[k] is not None]) if any(r[k] is not None for r in rows) else None
                  for k in keys]
        print(f"| {label} | " + " | ".join("-" if v is None else f"{v:.2f}" for v in values) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
