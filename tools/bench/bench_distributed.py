"""The bench stage through the local executor and through a Dask cluster, on 1 and N GPUs.

1. A scratch copy of this repo's kernels and tuning.yaml (no caches) is specialized and compiled
   once (the compile stage only, on all cores, no benchmark), so every compile output and the
   Triton cache exist.
2. For each executor (local, dask) and GPU count, a fresh copy receives those compile outputs but
   no bench outputs or caches, and `doit tune` benchmarks from scratch:
   * local: `doit tune` with CUDA_VISIBLE_DEVICES set to that many GPUs;
   * dask: a scheduler on this host and one bench worker per GPU (aot_tune.bench.dask.local), started
     and registered before the timer starts (an existing cluster), then
     `doit tune --executor dask --scheduler FILE --tls-ca-file ... --tls-cert ... --tls-key ...` (the
     cluster's throwaway TLS credentials).

Prints each run's wall time (the whole `doit tune` process) and bench stage (its last progress
line), speedup over the same executor on 1 GPU, the dask run against the local one on the same
GPUs, the bench-stage Triton cache hit rate (the dask workers receive the compile stage's cache
entries; 100% means they compiled nothing), and how many picks agree with the local run on as
many GPUs. Runs are skipped, with a note, when the time left in --budget-s cannot hold them.

``--kill-after SECONDS`` adds a worker-loss run after the others, for each GPU count of 2 or
more: dask on that many GPUs again, in a fresh copy and on a fresh cluster, where SECONDS after the
first bench batch started on the workers (their log) the worker that started the latest batch is
killed with SIGKILL, as tests/pipeline/test_cluster.py does (the scheduler is left alone). The
run goes on with the other workers; the tool reports the killed worker (its name ends in its
GPU's index), `doit tune`'s exit status, how many shapes have records in generated/*.tuning.pb
against the local run on as many GPUs, which batch started again on another worker (the workers'
log), and the wall time against the dask run without a kill.

Needs doit, dask and distributed importable (on a host without them: carry their wheels, see
BENCHMARKS.md). Usage: python3 -m tools.bench.bench_distributed --gpus 1 2 [--kernels ...] [--kill-after 5]
``--interpreter`` runs the same steps on a CPU (interpreter workers instead of GPUs; the local
executor then has one device whatever the count): a check of the tool, not a measurement.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    executor: str
    gpus: int
    wall: float = float("nan")
    stage: float = float("nan")
    hit_rate: str = ""
    picks: dict | None = None
    skipped: str = ""
    kill: float | None = None  # a worker-loss run: kill a worker this long after the first batch started
    returncode: int = 0
    killed: str = ""  # the killed worker, or why none was
    killed_in: tuple[str, int] = ("", 0)  # the batch it had started last, and how many had started then
    ran_again: str = ""  # the worker that batch started again on

    @property
    def name(self) -> str:
        return f"{self.executor}, worker killed" if self.kill is not None else self.executor

    @property
    def folder(self) -> str:
        return f"{self.executor}-{self.gpus}" + ("-kill" if self.kill is not None else "")


def fresh_project(where: Path) -> Path:
    where.mkdir(parents=True)
    shutil.copytree(ROOT / "kernels", where / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "tuning.yaml", where / "tuning.yaml")
    (where / "generated").mkdir()
    return where


def subprocess_env(gpus: int | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
    return env


def compile_once(project: Path, kernels: list[str], jobs: int, backend: str) -> float:
    """The specialize and compile stages of `doit tune`, without benchmarking anything."""
    from concurrent.futures import ThreadPoolExecutor

    from aot_tune.workers.pools import Executors
    from aot_tune.bench.local.detect import detect
    from aot_tune.manifest import load_manifest
    from aot_tune.pipeline.plan import build_plan
    from aot_tune.pipeline.session import TuneSession
    from aot_tune.runs.summary import run_summary

    began = time.perf_counter()
    manifest = load_manifest(project / "tuning.yaml")
    device = detect(backend)
    plan = build_plan(manifest, device, manifest.select(tuple(kernels)) if kernels else manifest.kernels)
    plan.work_dir.mkdir(parents=True, exist_ok=True)
    executors = Executors(device, plan.triton_cache_dir, jobs)
    try:
        session = TuneSession(plan, executors)
        session.specialize()
        units = [(kp, u) for kp in plan.kernels for u in kp.compile_units if session.staleness.compile_needed(kp, u)]
        session.start_stage("compile", len(units))
        with ThreadPoolExecutor(jobs) as threads:
            list(threads.map(lambda item: session.compile(*item), units))
        print(f"  {run_summary(session.ended())}", flush=True)
    finally:
        executors.close()
    return time.perf_counter() - began


def bench_copy(base: Path, where: Path) -> Path:
    project = fresh_project(where)
    shutil.copytree(base / ".aot_tune", project / ".aot_tune",
                    ignore=shutil.ignore_patterns("bench", "doit.sqlite3*", "run.lock"))
    return project


def tune(project: Path, run: Run, kernels: list[str], extra: list[str], during=None) -> None:
    """One `doit tune`; ``during(proc)``, if given, runs in a thread while it does."""
    env = subprocess_env(run.gpus if run.executor == "local" else None)
    began = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "doit", "tune", *extra, *kernels], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher = threading.Thread(target=during, args=(proc,), daemon=True) if during else None
    if watcher:
        watcher.start()
    stdout, stderr = proc.communicate()
    run.wall = time.perf_counter() - began
    if watcher:
        watcher.join()
    run.returncode = proc.returncode
    stage = [_seconds(m.group(1)) for m in re.finditer(r"\[bench\] \d+/\d+ done, (\S+) elapsed", stderr)]
    run.stage = stage[-1] if stage else float("nan")
    rate = re.search(r"Triton cache hit rate (\d+% \(\d+/\d+\))", stderr)
    run.hit_rate = rate.group(1) if rate else "n/a"
    summary = [line for line in stderr.splitlines()
               if line.startswith(("bench:", "bench stage:", "bench device time:", "aot_tune: bench", "[cluster]"))]
    print(f"  {run.name} on {run.gpus} GPU(s): {run.wall:.1f} s wall, bench stage {run.stage:.1f} s; "
          + " | ".join(summary), flush=True)
    if proc.returncode != 0:
        failed = f"bench_distributed: doit tune failed in {project}:\n{stdout[-2000:]}\n{stderr[-3000:]}"
        if run.kill is None:
            sys.exit(failed)
        print(failed, flush=True)  # a worker-loss run that did not recover: reported, not fatal
    run.picks = picks(project)


def kill_a_worker(cluster, run: Run, proc: subprocess.Popen) -> None:
    """``run.kill`` seconds after the first bench batch started on the cluster's workers, SIGKILL
    the worker that started the latest batch (tests/pipeline/test_cluster.py's way: its pid from
    the launcher's log)."""
    while proc.poll() is None and not cluster.batches_started():
        time.sleep(0.05)
    deadline = time.monotonic() + run.kill
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if proc.poll() is not None:
        run.killed = "none: the run ended first"
        return
    started = cluster.batches_started()
    victim, label = started[-1]
    os.kill(cluster.worker_pids()[victim], signal.SIGKILL)
    run.killed, run.killed_in = victim, (label, len(started))
    print(f"  killed worker {victim} (SIGKILL) {run.kill:g} s after the first bench batch started, "
          f"in its batch {label}", flush=True)


def ran_again(cluster, run: Run) -> str:
    """The worker the killed worker's last batch first started again on after the kill (a later
    batch of the same bench task, under the same label, can only start after that one); or ""."""
    label, seen = run.killed_in
    return next((worker for worker, started in cluster.batches_started()[seen:]
                 if label and started == label and worker != run.killed), "")


def picks(project: Path) -> dict:
    from aot_tune.cache import read_cache

    found = {}
    for path in sorted((project / "generated").glob("*.tuning.pb")):
        for record in read_cache(path).records:
            found[(record.kernel, record.device.key, record.dtype, tuple(record.shape))] = record.best.id
    return found


def _seconds(duration: str) -> float:
    """'41.3s', '1m23s' or '2h05m' (aot_tune.runs.progress) in seconds."""
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:([\d.]+)s)?", duration)
    hours, minutes, seconds = (float(g or 0) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--executors", nargs="+", default=["local", "dask"], choices=["local", "dask"])
    parser.add_argument("--kernels", nargs="*", default=[], help="only these kernels of tuning.yaml")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compile workers")
    parser.add_argument("--budget-s", type=float, default=570.0,
                        help="skip runs that would end past this many seconds from the start [default: 570]")
    parser.add_argument("--interpreter", action="store_true", help="check the tool on a CPU (see above)")
    parser.add_argument("--kill-after", type=float, metavar="SECONDS",
                        help="add a worker-loss run for each count of 2 or more GPUs (see above)")
    args = parser.parse_args()
    began = time.perf_counter()
    try:
        import distributed  # noqa: F401
        import doit  # noqa: F401
    except ImportError as exc:
        sys.exit(f"bench_distributed: {exc}; fix: install doit, dask and distributed (see BENCHMARKS.md for the wheels)")
    from aot_tune.bench.dask.local import LocalCluster

    if args.interpreter:
        where = "Triton interpreter (a check of the tool, not a measurement)"
    else:
        import torch

        available = torch.cuda.device_count()
        if max(args.gpus) > available:
            sys.exit(f"bench_distributed: {max(args.gpus)} GPUs asked for, {available} visible")
        where = f"{available} x {torch.cuda.get_device_name(0)}"
    backend = ["--bench-backend", "interpreter" if args.interpreter else "cuda"]
    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {where}, {os.cpu_count()} CPU cores, "
          f"dask {distributed.__version__}")
    print(f"# python3 -m tools.bench.bench_distributed {' '.join(sys.argv[1:])}", flush=True)
    # Local runs first, then dask from the widest: if the budget runs short, what is skipped is
    # the run that compares least (dask on fewer GPUs).
    runs = [Run("local", gpus) for gpus in sorted(args.gpus) if "local" in args.executors] + \
        [Run("dask", gpus) for gpus in sorted(args.gpus, reverse=True) if "dask" in args.executors]
    if args.kill_after is not None and "dask" in args.executors:
        runs += [Run("dask", gpus, kill=args.kill_after) for gpus in sorted(args.gpus, reverse=True) if gpus >= 2]
    with tempfile.TemporaryDirectory() as scratch:
        base = fresh_project(Path(scratch) / "compiled")
        print("compile everything once (no benchmark):", flush=True)
        print(f"  compile stage: {compile_once(base, args.kernels, args.jobs, backend[1]):.1f} s", flush=True)
        for run in runs:
            elapsed = time.perf_counter() - began
            estimate = _estimate(run, runs)
            if elapsed + estimate > args.budget_s:
                run.skipped = f"skipped: {elapsed:.0f} s spent, about {estimate:.0f} s more needed, budget {args.budget_s:.0f} s"
                print(f"  {run.name} on {run.gpus} GPU(s): {run.skipped}", flush=True)
                continue
            project = bench_copy(base, Path(scratch) / run.folder)
            if run.executor == "local":
                tune(project, run, args.kernels, backend)
                continue
            started = time.perf_counter()
            workers = {"interpreter": run.gpus} if args.interpreter else {"gpus": [str(i) for i in range(run.gpus)]}
            with LocalCluster(Path(scratch) / f"cluster-{run.folder}", **workers, env=subprocess_env(None),
                              name="bench") as cluster:
                print(f"  dask cluster with {run.gpus} worker(s) up in {time.perf_counter() - started:.1f} s",
                      flush=True)
                killer = (lambda proc: kill_a_worker(cluster, run, proc)) if run.kill is not None else None
                tune(project, run, args.kernels,
                     [*backend, "--executor", "dask", *cluster.tune_args()], during=killer)
                if run.kill is not None:
                    run.ran_again = ran_again(cluster, run)
                installed = sum(int(n) for n in re.findall(r"\((\d+) Triton cache entries installed\)",
                                                           cluster.workers_log.read_text()))
                print(f"  Triton cache entries installed on the workers: {installed}", flush=True)
    report(runs)
    print(f"\ntotal {time.perf_counter() - began:.0f} s")


def _estimate(run: Run, runs: list[Run]) -> float:
    """Seconds the run will likely take: a done run of the same GPU count, else 1-GPU time / GPUs,
    else the repo's bench stage on one H200 (about 85 s) / GPUs; plus cluster start-up for dask;
    a worker-loss run as if on one GPU fewer."""
    same = [r.wall for r in runs if r.gpus == run.gpus and r.wall == r.wall]
    one = [r.wall * r.gpus / run.gpus for r in runs if r.wall == r.wall]
    guess = max(same) if same else (max(one) if one else 85.0 / run.gpus)
    if run.kill is not None:
        guess *= run.gpus / (run.gpus - 1)
    return guess * 1.1 + (15.0 if run.executor == "dask" else 0.0)


def report(runs: list[Run]) -> None:
    print("\n| executor | GPUs | wall | bench stage | speedup vs 1 GPU | efficiency | vs local | "
          "Triton cache hits | picks as local |\n|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        if run.skipped:
            print(f"| {run.name} | {run.gpus} | {run.skipped} | | | | | | |")
            continue
        base = next((r for r in runs if r.executor == run.executor and r.gpus == min(x.gpus for x in runs)
                     and not r.skipped and r.kill is None), None)
        speedup = base.wall * base.gpus / run.wall if base else float("nan")
        local = next((r for r in runs if r.executor == "local" and r.gpus == run.gpus and not r.skipped), None)
        versus = f"{run.wall / local.wall:.2f}x" if local and run is not local else ""
        agree = ""
        if local and run is not local and local.picks and run.picks:
            shared = local.picks.keys() & run.picks.keys()
            agree = f"{sum(local.picks[k] == run.picks[k] for k in shared)}/{len(shared)}"
        scaling = f"{speedup:.2f}x | {speedup / run.gpus:.0%}" if run.kill is None else " | "  # it lost a GPU midway
        print(f"| {run.name} | {run.gpus} | {run.wall:.1f} s | {run.stage:.1f} s | {scaling} | {versus} | "
              f"{run.hit_rate} | {agree} |")
    for run in runs:
        if run.kill is not None and not run.skipped:
            print(worker_loss(run, runs))


def worker_loss(run: Run, runs: list[Run]) -> str:
    """A worker-loss run in one line: what was killed, whether the run recovered, and at what cost."""
    local = next((r for r in runs if r.executor == "local" and r.gpus == run.gpus and r.picks is not None), None)
    plain = next((r for r in runs if r.executor == "dask" and r.gpus == run.gpus and r.kill is None
                  and r.picks is not None), None)
    found = run.picks or {}
    shapes = f"{len(found)} shapes with records"
    if local:
        lost = len(local.picks.keys() - found.keys())
        shapes += f" against {len(local.picks)} of local on {run.gpus} GPU(s) ({lost or 'none'} lost)"
    again = f"{run.killed_in[0]} on {run.ran_again}" if run.ran_again else "none seen in the workers' log"
    cost = f"{run.wall:.1f} s wall" + (f" against {plain.wall:.1f} s without a kill ({run.wall / plain.wall:.2f}x)"
                                       if plain else "")
    killed = f"{run.killed} (in {run.killed_in[0]})" if run.killed_in[0] else run.killed or "nothing"
    return (f"\nworker loss on {run.gpus} GPU(s): killed {killed}; doit tune exited "
            f"{run.returncode}; {shapes}; started again: {again}; {cost}")


if __name__ == "__main__":
    main()
