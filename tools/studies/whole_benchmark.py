"""The seed paper's whole GEMM benchmark: every config of tuning.yaml's ``gemm`` space (576
before its constraints) on all 64 shapes ((M, N, K) each in {256, 512, 1024, 4096}), fp16.

Its exhaustive oracle does not fit one 10-minute command, so it is tuned in slices (by M), each
a cold or resumed ``doit tune``; the slices are then folded together with ``doit merge-caches``.
A budgeted run is judged against the oracle, and every strategy is replayed over it:

    python3 -m tools.studies.whole_benchmark oracle --m 256 512 --project /tmp/wb/a --out OUT
    python3 -m tools.studies.whole_benchmark oracle --m 1024 4096 --project /tmp/wb/b \\
        --compiles-from /tmp/wb/a --out OUT
    python3 -m tools.studies.whole_benchmark merge --out OUT OUT/oracle-m256-512.tuning.pb ...
    python3 -m tools.studies.whole_benchmark budgeted --search '{strategy: surrogate, budget: {configs: 40}}' \\
        --project /tmp/wb/run --out OUT
    python3 -m tools.studies.whole_benchmark judge --oracle OUT/oracle-*.tuning.pb --run OUT/budgeted-*.json \\
        [--retime /tmp/wb/run]
    python3 -m tools.studies.whole_benchmark report --oracle OUT/oracle-*.tuning.pb --real OUT/budgeted-*.json \\
        --out report

``oracle`` keeps every raw sample (``oracle-m<M...>.tuning.pb``: what replays need); ``merge``
writes the reference oracle cache as ``doit merge-caches`` merges it (statistics and seconds, no
samples), also xz-compressed: tools/studies/oracle/gemm-paper-h100.tuning.pb.xz and
gemm-paper-h200.tuning.pb.xz are the H100 and H200 hosts' (docs/bench-log.md), which ``judge``
takes as ``--oracle`` directly. ``report`` takes them too, but without samples it replays each
short probe as the full timing at its full price (on the H200 oracle the surrogate at 50 configs
read 20.5% of the bench seconds, against 7.8-8.7% in real runs): give it the raw slices.
``budgeted`` runs ``doit tune --dry-run`` and then ``doit tune`` in a fresh project (no caches,
no Triton cache: compiles included) and writes its records and numbers beside the oracle's.
``--retime`` (``budgeted --oracle ... --retime``, or ``judge --retime PROJECT``) also times each pick
that differs from the oracle's side by side with it, interleaved as the finals are: the oracle's
medians come from other batches and another day, and judge a pick by the drift it met. It then
judges the quality target. ``report`` replays random sampling, successive halving and the surrogate over the oracle at
each budget, and plots budget against quality with the real runs as stars (tools.studies.pareto).
"""
from __future__ import annotations

import argparse
import itertools
import json
import lzma
import os
import re
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

import yaml

from aot_tune import cache as cache_io
from aot_tune.manifest import load_manifest
from aot_tune.search.replay import exhaustive_seconds, geomean, keeps_samples, spent_seconds
from aot_tune.tuning_schema import TuningCache, TuningRecord
from tools.studies import pareto
from tools.studies.doit_runs import run_doit

ROOT = Path(__file__).resolve().parents[2]
SIZES = (256, 512, 1024, 4096)
KERNEL = "gemm"
DTYPE = "float16"
#: issue #40's targets: at most this share of the exhaustive bench time, within this geomean
TARGET_SHARE, TARGET_QUALITY, TARGET_WALL_S = 0.12, 1.01, 300.0


def shapes_for(ms: list[int], sizes=SIZES) -> list[tuple[int, int, int]]:
    return [(m, n, k) for m in ms for n, k in itertools.product(sizes, repeat=2)]


def project_for(where: Path, shapes, target: str, search: dict | None = None) -> Path:
    """A project with this repository's kernels and tuning.yaml's gemm entry on ``shapes``; an
    existing one is reused (a slice cut short resumes where it stopped)."""
    spec = load_manifest(ROOT / "tuning.yaml").kernel(KERNEL)
    manifest = pareto.suite_manifest(spec, shapes, DTYPE, [target], search)
    if where.exists():
        (where / "tuning.yaml").write_text(manifest)
        return where
    return pareto.make_project(where, manifest)


def copy_compiles(source: Path, project: Path) -> None:
    """The compile outputs and Triton cache of another slice: the same configs, compiled once."""
    shutil.copytree(source / ".aot_tune", project / ".aot_tune", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("bench", "doit.sqlite3*", "run.lock", "runs.json"))


def local_target(backend: str) -> tuple[str, str, str]:
    from aot_tune.bench.local.detect import detect

    device = detect(backend)
    return device.backend, device.target or "sm90", device.name


# ----------------------------------------------------------------------------- oracle slices

def oracle(args) -> int:
    backend, target, name = local_target(args.backend)
    shapes = shapes_for(args.m, args.sizes)
    fresh = not args.project.exists()
    project = project_for(args.project, shapes, target)
    if fresh and args.compiles_from:
        copy_compiles(args.compiles_from, project)
    label = "m" + "-".join(str(m) for m in args.m)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"oracle slice {label}: {len(shapes)} shapes, exhaustive, on {name} ({target}); project {project}",
          flush=True)
    wall, finished = pareto.doit_tune(project, backend, args.out / f"oracle-{label}.log", args.deadline_s)
    wanted = set(shapes)
    records = [r for r in pareto.bench_records(project, KERNEL) if tuple(r.shape) in wanted]
    path = args.out / f"oracle-{label}.tuning.pb"
    cache_io.write_cache(cache_io.sorted_cache(records), path)
    measured = sum(m.status != "invalid" for r in records for m in r.measurements)
    print(f"oracle slice {label}: {wall:.1f} s wall, {'finished' if finished else 'cut short: run it again'}; "
          f"{len(records)} of {len(shapes)} shapes, {measured} configs measured, exhaustive bench "
          f"time {exhaustive_seconds(records):.1f} s; wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)", flush=True)
    return 0 if finished else 3


def read_records(path: Path) -> list[TuningRecord]:
    """A cache file's records; ``.xz`` compressed too (the checked-in reference oracle)."""
    if path.suffix != ".xz":
        return list(cache_io.read_cache(path).records)
    cache = TuningCache()
    cache.ParseFromString(lzma.decompress(path.read_bytes()))
    return list(cache.records)


def read_oracle(paths: list[Path]) -> list[TuningRecord]:
    records = [r for p in paths for r in read_records(p) if r.kernel == KERNEL]
    if not records:
        sys.exit(f"whole_benchmark: no {KERNEL} records in {', '.join(map(str, paths))}")
    return records


def merge(args) -> int:
    """The slices folded with ``doit merge-caches`` into a project of all 64 shapes: the reference."""
    project = args.out / "merged"
    if project.exists():
        shutil.rmtree(project)
    records = read_oracle(args.slices)
    capability = records[0].device.compute_capability.replace(".", "")
    target = f"sm{capability}" if capability.isdigit() else "sm90"
    project_for(project, sorted({tuple(r.shape) for r in records}), target)
    _, proc, _ = run_doit(project, ["merge-caches", *map(str, (p.resolve() for p in args.slices))])
    print((proc.stdout + proc.stderr).strip())
    if proc.returncode:
        return proc.returncode
    merged = project / "generated" / f"{KERNEL}.tuning.pb"
    shutil.copy(merged, args.out / "oracle.tuning.pb")
    (args.out / "oracle.tuning.pb.xz").write_bytes(lzma.compress(merged.read_bytes(), preset=9))
    records = cache_io.read_cache(merged).records
    print(f"merged {len(records)} shapes into {args.out / 'oracle.tuning.pb'} (and .xz)")
    return 0


# ----------------------------------------------------------------------------- a budgeted run

def budgeted(args) -> int:
    backend, target, name = local_target(args.backend)
    search = yaml.safe_load(args.search)
    if args.project.exists():
        shutil.rmtree(args.project)
    project = project_for(args.project, shapes_for(list(args.sizes), args.sizes), target, search)
    label = args.label or re.sub(r"[^A-Za-z0-9_.-]+", "-", json.dumps(search, sort_keys=True)).strip("-")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"budgeted run {label}: {len(args.sizes) ** 3} shapes on {name} ({target}), cold project {project}", flush=True)
    dry_wall, dry, _ = run_doit(project, ["tune", "--dry-run", "--bench-backend", backend], 120)
    predicted = _predicted(dry.stdout + dry.stderr)
    print(f"  dry run: {dry_wall:.1f} s, predicted {predicted} s (exit {dry.returncode})", flush=True)
    wall, proc, finished = run_doit(project, ["tune", "--bench-backend", backend], args.deadline_s)
    log = args.out / f"budgeted-{label}.log"
    stopped = "" if finished else f"\nwhole_benchmark: stopped at the {args.deadline_s:.0f} s deadline (--deadline-s)\n"
    log.write_text(dry.stdout + dry.stderr + "\n---\n" + proc.stdout + proc.stderr + stopped)
    summary = [line for line in proc.stderr.splitlines() if line.startswith(("compile:", "bench", "search:", "end to end"))]
    print("\n".join(f"  {line}" for line in summary) or proc.stderr[-3000:], flush=True)
    if proc.returncode:
        print(f"  doit tune failed (exit {proc.returncode}{'' if finished else ', past --deadline-s'}); "
              f"log {log}", flush=True)
        return proc.returncode
    records = pareto.bench_records(project, KERNEL)
    out = {"label": label, "search": search, "device": name, "wall_s": wall, "predicted_s": predicted,
           "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "summary": summary}
    cache_io.write_cache(cache_io.sorted_cache(cache_io.without_samples(r) for r in records),
                         args.out / f"budgeted-{label}.tuning.pb")
    (args.out / f"budgeted-{label}.json").write_text(json.dumps(out, indent=1))
    print(f"  {wall:.1f} s wall (predicted {predicted} s); wrote {args.out}/budgeted-{label}.json", flush=True)
    if args.oracle:
        oracle_records = read_oracle(args.oracle)
        retimed = retimed_picks(oracle_records, records, project, backend) if args.retime else None
        print(judge_line(judged(oracle_records, records, out, retimed)))
    return 0


def _predicted(text: str) -> float | None:
    found = re.findall(r"predicted ([0-9.]+) s", text)
    return float(found[-1]) if found else None


# ----------------------------------------------------------------------------- judging and the report

def retimed_picks(oracle_records: list[TuningRecord], records: list[TuningRecord], project: Path,
                  backend: str = "cuda") -> dict:
    """The run's picks against the oracle's, each differing pair timed again side by side on this
    machine's first device (tools.studies.retune_compare.retime_picks): the oracle's medians come
    from other batches, other days, and a GPU's clocks drift between batches by more than 1%."""
    from tools.studies.retune_compare import retime_picks

    return retime_picks(with_oracle(oracle_records, records), project, backend)["all"]


def with_oracle(oracle_records: list[TuningRecord], records: list[TuningRecord]) -> list[tuple[TuningRecord, TuningRecord]]:
    """Each run record with the oracle's record of its shape and dtype; a shape the oracle lacks is
    left out (an oracle slice judges its own shapes)."""
    truth = {(r.dtype, tuple(r.shape)): r for r in oracle_records}
    return [(r, truth[(r.dtype, tuple(r.shape))]) for r in records if (r.dtype, tuple(r.shape)) in truth]


def judged(oracle_records: list[TuningRecord], records: list[TuningRecord], run: dict,
           retimed: dict | None = None) -> dict:
    """A run's picks timed by the oracle's medians, and re-timed side by side where ``retimed``
    (``retimed_picks``) is given, which then judges the quality target; its seconds (its
    measurements', the finals' included, and the strategy's compute) over the oracle's bench seconds."""
    pairs = with_oracle(oracle_records, records)
    ratios, seconds, measured = [], 0.0, 0
    for record, reference in pairs:
        medians = {m.config.id: m.median_ms for m in reference.measurements if m.status == "ok"}
        ratios.append(medians[record.best.id] / medians[reference.best.id])
        seconds += spent_seconds(record)  # the finals' included
        measured += sum(m.status != "invalid" for m in record.measurements)
    total = exhaustive_seconds(oracle_records)
    share = seconds / total
    predicted = run.get("predicted_s")
    quality = geomean(ratios)
    judged_quality = retimed["retimed_geomean"] if retimed and retimed["retimed_geomean"] is not None else quality
    return {**run, "shapes": len(pairs), "quality": quality, "worst_shape": max(ratios), "retimed": retimed,
            "same_pick": sum(r == 1.0 for r in ratios), "time_share": share, "search_seconds": seconds,
            "exhaustive_seconds": total, "configs_measured": measured,
            "dry_run_error": None if not predicted else predicted / run["wall_s"] - 1,
            "met": {"share": share <= TARGET_SHARE, "quality": judged_quality <= TARGET_QUALITY,
                    "wall": run["wall_s"] <= TARGET_WALL_S,
                    "dry_run": bool(predicted) and abs(predicted / run["wall_s"] - 1) <= 0.25}}


def judge_line(j: dict) -> str:
    dry = "no prediction" if j["dry_run_error"] is None else f"predicted {j['predicted_s']:.1f} s ({j['dry_run_error']:+.0%})"
    return (f"{j['label']}: {j['wall_s']:.1f} s wall, {dry}; {j['configs_measured']} measurements, "
            f"{j['time_share']:.1%} of the oracle's {j['exhaustive_seconds']:.1f} bench s; geomean pick / oracle pick "
            f"{j['quality']:.4f}, worst {j['worst_shape']:.3f}, same pick on {j['same_pick']}/{j['shapes']}; "
            + (f"re-timed side by side ({j['retimed']['retimed_pairs']} pairs): geomean "
               f"{j['retimed']['retimed_geomean']:.4f}, worst {j['retimed']['retimed_worst']:.3f}; "
               if j.get("retimed") and j["retimed"]["retimed_geomean"] is not None else "")
            + "targets: " + ", ".join(f"{k} {'met' if v else 'missed'}" for k, v in j["met"].items()))


def judge(args) -> int:
    oracle_records = read_oracle(args.oracle)
    for path in args.run:
        run = json.loads(path.read_text())
        records = list(cache_io.read_cache(path.with_suffix(".tuning.pb")).records)
        retimed = retimed_picks(oracle_records, records, args.retime, args.backend) if args.retime else None
        print(judge_line(judged(oracle_records, records, run, retimed)))
    return 0


def report(args) -> int:
    oracle_records = read_oracle(args.oracle)
    args.out.mkdir(parents=True, exist_ok=True)
    runs = pareto.replay_all(oracle_records, args.strategies, args.budgets, args.seeds, args.jobs)
    rows = pareto.summarize(runs)
    reals = []
    for path in args.real or []:
        run = json.loads(path.read_text())
        j = judged(oracle_records, list(cache_io.read_cache(path.with_suffix(".tuning.pb")).records), run)
        budget = (j["search"].get("budget") or {}).get("configs", "-")
        reals.append({"label": j["search"]["strategy"], "budget": budget, "line": judge_line(j),
                      "real": {"time_share": j["time_share"], "quality": j["quality"]}})
    measured = sum(m.status != "invalid" for r in oracle_records for m in r.measurements)
    title = (f"gemm fp16, the paper's 64 shapes x {measured // len(oracle_records)} configs, "
             f"{oracle_records[0].device.name}; replay of the exhaustive oracle, {args.seeds} seeds; stars: real runs")
    print(pareto.plot(rows, runs, reals, args.out / "whole_benchmark.png", title,
                      targets=((TARGET_SHARE, TARGET_QUALITY),)))
    warning = [] if keeps_samples(oracle_records) else [
        "Note: this oracle keeps no raw samples (a merged cache), so every short probe was replayed as "
        "the full timing at its full price: the shares of the strategies that screen are overstated. "
        "Replay the oracle's slices (oracle-m*.tuning.pb) instead.", ""]
    text = ["# The whole benchmark: budget against quality", "",
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; oracle {len(oracle_records)} shapes, {measured} measurements, "
            f"{exhaustive_seconds(oracle_records):.1f} s of exhaustive bench time on {oracle_records[0].device.name}", "",
            *warning, pareto.table(rows), "", *(f"- real: {r['line']}" for r in reals)]
    (args.out / "whole_benchmark.md").write_text("\n".join(text) + "\n")
    (args.out / "whole_benchmark.json").write_text(json.dumps({"rows": rows, "real": reals}, indent=1, default=str))
    print("\n".join(text))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("oracle", help="an exhaustive slice of the benchmark (by M)")
    one.add_argument("--m", type=int, nargs="+", required=True, help="the slice's M values (of --sizes)")
    one.add_argument("--project", type=Path, required=True, help="the slice's project (reused: a cut run resumes)")
    one.add_argument("--compiles-from", type=Path, help="another slice's project whose compiles this one reuses")
    two = sub.add_parser("merge", help="fold the slices with doit merge-caches")
    two.add_argument("slices", type=Path, nargs="+")
    three = sub.add_parser("budgeted", help="a cold budgeted doit tune of all 64 shapes, after its dry run")
    three.add_argument("--search", required=True, help="the search: block, as YAML")
    three.add_argument("--label")
    three.add_argument("--project", type=Path, required=True)
    three.add_argument("--oracle", type=Path, nargs="*", help="oracle slices to judge the run by")
    three.add_argument("--retime", action="store_true",
                       help="also time each pick that differs from the oracle's side by side with it, on this machine")
    four = sub.add_parser("judge", help="budgeted runs against the oracle")
    four.add_argument("--oracle", type=Path, nargs="+", required=True)
    four.add_argument("--run", type=Path, nargs="+", required=True, help="budgeted-*.json")
    four.add_argument("--retime", type=Path, metavar="PROJECT",
                      help="also time each pick that differs from the oracle's side by side with it, on this "
                           "machine's first device (PROJECT: the run's project, for its tuning.yaml)")
    four.add_argument("--backend", default="cuda", choices=["cuda", "interpreter"], help="the device --retime uses")
    five = sub.add_parser("report", help="replays over the oracle, with the real runs: table and plot")
    five.add_argument("--oracle", type=Path, nargs="+", required=True)
    five.add_argument("--real", type=Path, nargs="*")
    five.add_argument("--strategies", nargs="+", default=["random", "successive_halving", "surrogate"],
                      choices=sorted(pareto.STRATEGIES))
    five.add_argument("--budgets", type=int, nargs="+", default=[8, 15, 25, 40, 60, 90])
    five.add_argument("--seeds", type=int, default=5)
    five.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    for p in (one, two, three, four, five):
        p.add_argument("--out", type=Path, default=Path("whole-benchmark"))
    for p in (one, three):
        p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                       help="M, N and K values (the paper's: 256 512 1024 4096; small ones for the interpreter)")
        p.add_argument("--backend", default="auto", choices=["auto", "cuda", "interpreter"])
        p.add_argument("--deadline-s", type=float, default=540.0, help="stop doit tune after this long")
    args = parser.parse_args()
    return {"oracle": oracle, "merge": merge, "budgeted": budgeted, "judge": judge, "report": report}[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
