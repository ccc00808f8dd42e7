"""Tuning time against quality for each search strategy on a GEMM suite (the seed paper's
Table 6 and Figure 3), from one exhaustive run and replays of it.

1. exhaustive: a scratch project (this repo's kernels, tuning.yaml's entry for --kernel with the
   suite's shapes, one dtype, compiled for the local GPU's target only) is tuned by `doit tune`:
   every config of every shape measured, every raw sample kept under .aot_tune/bench/.
2. replay: every strategy and budget (configs per shape) is replayed over those samples with
   aot_tune.search.replay, over --seeds seeds each, on all cores: the strategies' own code runs, short
   timings are prefixes of the recorded samples, and the strategies' compute is timed for real.
   Quality is the geometric mean over shapes of (exhaustive median of the pick) / (exhaustive
   median of the exhaustive pick); time is the search's seconds over the exhaustive run's
   (the sum of every measurement's seconds).
3. validate: real budgeted `doit tune` runs (the project's compiles reused, no bench results) of
   the --validate strategies, compared with their replays (seed 0).
4. report: pareto.md (tables), pareto.png (matplotlib, if installed), pareto.json (everything),
   exhaustive.tuning.pb (the exhaustive records with their samples: `--records` replays them
   again on any machine) under --out.

Each phase prints its results as it ends. Runs where doit is importable (carry its wheel on
PYTHONPATH where it is not installed). --deadline-s skips validation runs that would not finish
in time. `--backend interpreter` runs the flow on a CPU (tiny shapes, e.g. --kernel vector_add).

`--ranked-from CACHE` also replays the ranked strategy (after an upgrade), ranking from that
cache's records of other devices or toolchains: its share of the exhaustive time and its picks.

Usage: python3 -m tools.studies.pareto --out pareto-out
       python3 -m tools.studies.pareto --out again --records pareto-out/exhaustive.tuning.pb
       python3 -m tools.studies.pareto --out h100 --records h100.tuning.pb --ranked-from generated/gemm.tuning.pb
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from aot_tune import cache as cache_io
from aot_tune.manifest import SearchSettings, load_manifest
from aot_tune.search.replay import exhaustive_seconds, geomean, priced_in_seconds, replay_suite, spent_seconds
from aot_tune.tuning_schema import TuningCache, TuningRecord
from tools.studies.doit_runs import run_doit

ROOT = Path(__file__).resolve().parents[2]

#: label -> settings other than the budget and seed
STRATEGIES = {
    "random": {"strategy": "random"},
    "successive_halving": {"strategy": "successive_halving"},
    "surrogate": {"strategy": "surrogate"},
    "surrogate-no-transfer": {"strategy": "surrogate", "transfer": False},
    "successive_halving-no-transfer": {"strategy": "successive_halving", "transfer": False},
}
DEFAULT_STRATEGIES = ["random", "successive_halving", "surrogate", "surrogate-no-transfer"]
TARGETS = ((0.25, 1.02), (0.10, 1.05))  # (time share at most, geomean ratio at most)
#: Fixed cost of a validation run beyond its bench seconds (doit start-up, device worker, merge).
RUN_OVERHEAD_S = 20.0
#: Time kept after the exhaustive run for the replays and the report, should it run long.
REPORT_RESERVE_S = 90.0


# ----------------------------------------------------------------------------- suite and runs

def parse_shape(text: str, dims: int) -> tuple[int, ...]:
    shape = tuple(int(v) for v in text.lower().split("x"))
    if len(shape) != dims or min(shape) < 1:
        raise SystemExit(f"pareto: shape {text!r} needs {dims} positive sizes joined by 'x'")
    return shape


def suite_shapes(args, key: tuple[str, ...]) -> list[tuple[int, ...]]:
    if args.shapes:
        return list(dict.fromkeys(parse_shape(s, len(key)) for s in args.shapes))
    if tuple(key) != ("M", "N", "K"):
        raise SystemExit(f"pareto: kernel {args.kernel!r} has key {key}: give --shapes")
    return [(m, *parse_shape(nk, 2)) for nk in args.nk for m in args.m]


def suite_manifest(spec, shapes, dtype: str, targets: list[str], search: dict | None = None) -> str:
    import yaml

    entry = {
        "kernel": spec.kernel, "launch": spec.launch, "inputs": spec.inputs, "reference": spec.reference,
        "key": list(spec.key),
        "space": {name: list(values) for name, values in spec.space.params},
        "constraints": [c.text for c in spec.space.constraints],
        "shapes": [dict(zip(spec.key, s)) for s in shapes],
        "interpreter_shapes": [dict(zip(spec.key, s)) for s in shapes],
        "dtypes": [dtype], "targets": targets, "bench": asdict(spec.bench),
    }
    if search:
        entry["search"] = search
    return yaml.safe_dump({"version": 1, "kernels": {spec.name: entry}}, sort_keys=False)


def make_project(where: Path, manifest: str) -> Path:
    where.mkdir(parents=True)
    shutil.copytree(ROOT / "kernels", where / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    (where / "tuning.yaml").write_text(manifest)
    # Registers the commands even where aot_tune is on PYTHONPATH but not installed.
    (where / "pyproject.toml").write_text(
        '[tool.doit]\nbackend = "sqlite3"\ndep_file = ".aot_tune/doit.sqlite3"\n\n'
        '[tool.doit.plugins.command]\ntune = "aot_tune.commands.tune:TuneCommand"\n')
    return where


def doit_tune(project: Path, backend: str, log: Path, timeout_s: float | None = None) -> tuple[float, bool]:
    """Run `doit tune` in the project; (wall seconds, finished). Past ``timeout_s`` the run and
    its workers are killed: the bench results written so far stay (each is written atomically)."""
    wall, proc, finished = run_doit(project, ["tune", "--bench-backend", backend], timeout_s)
    stdout, stderr = proc.stdout, proc.stderr
    log.write_text(stdout + stderr)
    if not finished:
        print(f"  doit tune: stopped at the deadline after {wall:.1f} s", flush=True)
        return wall, False
    summary = [line for line in stderr.splitlines() if line.startswith(("compile:", "bench:", "search:"))]
    print(f"  doit tune: {wall:.1f} s wall; " + " | ".join(summary), flush=True)
    if proc.returncode != 0:
        sys.exit(f"pareto: doit tune failed in {project}:\n{stdout[-2000:]}\n{stderr[-3000:]}")
    return wall, True


def bench_records(project: Path, kernel: str) -> list[TuningRecord]:
    records = [cache_io.read_record(p) for p in sorted((project / ".aot_tune" / "bench").glob(f"*/{kernel}/*.pb"))]
    if not records:
        sys.exit(f"pareto: no bench records under {project / '.aot_tune' / 'bench'}")
    return records


def records_of_device(records, device: str | None, kernel: str) -> list[TuningRecord]:
    """The kernel's records of one device: --device, else the GPU with the most records."""
    mine = [r for r in records if r.kernel == kernel]
    counts = {}
    for r in mine:
        counts[r.device.key] = counts.get(r.device.key, 0) + 1
    if not counts:
        sys.exit(f"pareto: no records of kernel {kernel!r} in --records")
    if device is None:
        device = max(counts, key=lambda d: (d != "interpreter", counts[d], d))
    if device not in counts:
        sys.exit(f"pareto: no {kernel} records of device {device!r} (found: {', '.join(sorted(counts))})")
    return [r for r in mine if r.device.key == device]


# ----------------------------------------------------------------------------- replay

_RECORDS: list[TuningRecord] = []


def _load_records(blob: bytes) -> None:
    global _RECORDS
    cache = TuningCache()
    cache.ParseFromString(blob)
    _RECORDS = list(cache.records)


def settings_for(label: str, budget: int, seed: int) -> SearchSettings:
    return SearchSettings(**STRATEGIES[label], budget_configs=budget, seed=seed)


def _replay_job(job: tuple[str, int, int]) -> dict:
    label, budget, seed = job
    result = replay_suite(_RECORDS, settings_for(label, budget, seed))
    return {"label": label, "budget": budget, "seed": seed, "time_share": result.time_share,
            "quality": result.quality, "worst_shape": result.worst, "seconds": result.seconds,
            "compute_seconds": sum(s.compute_seconds for s in result.shapes),
            "shapes": [{"shape": list(s.shape), "dtype": s.dtype, "pick": s.pick, "ratio": s.ratio,
                        "seconds": s.seconds, "configs": s.configs_measured} for s in result.shapes]}


def replay_all(records: list[TuningRecord], labels: list[str], budgets: list[int], seeds: int,
               jobs: int) -> list[dict]:
    blob = cache_io.sorted_cache(records).SerializeToString()
    work = [(label, budget, seed) for label in labels for budget in budgets for seed in range(seeds)]
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with context.Pool(max(1, min(jobs, len(work))), initializer=_load_records, initargs=(blob,)) as pool:
        return list(pool.imap(_replay_job, work))


def summarize(runs: list[dict]) -> list[dict]:
    """Per (strategy, budget): means over seeds, and the worst seed."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for run in runs:
        groups.setdefault((run["label"], run["budget"]), []).append(run)
    rows = []
    for (label, budget), group in groups.items():
        rows.append({"label": label, "budget": budget, "seeds": len(group),
                     "time_share": statistics.fmean(r["time_share"] for r in group),
                     "quality": geomean(r["quality"] for r in group),
                     "worst_seed": max(r["quality"] for r in group),
                     "best_seed": min(r["quality"] for r in group),
                     "worst_shape": max(r["worst_shape"] for r in group),
                     "compute_share": statistics.fmean(r["compute_seconds"] / r["seconds"] if r["seconds"] else 0.0
                                                       for r in group)})
    return rows


def targets_met(rows: list[dict]) -> list[dict]:
    out = []
    for share, ratio in TARGETS:
        hits = [r for r in rows if r["time_share"] <= share and r["quality"] <= ratio]
        best = min(hits, key=lambda r: (r["time_share"], r["quality"])) if hits else None
        out.append({"time_share_at_most": share, "ratio_at_most": ratio, "met": best is not None,
                    "by": None if best is None else {k: best[k] for k in ("label", "budget", "time_share", "quality")}})
    return out


def table(rows: list[dict]) -> str:
    lines = ["| strategy | budget (configs per shape) | tuning time (share of exhaustive) | geomean pick / exhaustive "
             "pick | worst seed | worst shape | strategy compute |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["label"], r["budget"])):
        lines.append(f"| {r['label']} | {r['budget']} | {r['time_share']:.1%} | {r['quality']:.4f} | "
                     f"{r['worst_seed']:.4f} | {r['worst_shape']:.3f} | {r['compute_share']:.1%} |")
    return "\n".join(lines)


def targets_text(met: list[dict]) -> str:
    lines = []
    for t in met:
        head = f"within {t['ratio_at_most'] - 1:.0%} at <= {t['time_share_at_most']:.0%} of the exhaustive time: "
        by = t["by"]
        lines.append(head + (f"met by {by['label']} at {by['budget']} configs per shape "
                             f"({by['time_share']:.1%}, {by['quality']:.4f})" if by else "not met"))
    return "\n".join(lines)


# ----------------------------------------------------------------------------- validation

def choose_budget(rows: list[dict], label: str, requested: str) -> int | None:
    """'auto': the cheapest budget whose replay is within 2% (geomean over seeds), else the one
    whose replayed time is nearest 25% of the exhaustive time."""
    mine = [r for r in rows if r["label"] == label]
    if not mine:
        return None
    if requested != "auto":
        return int(requested)
    share, ratio = TARGETS[0]
    good = [r for r in mine if r["quality"] <= ratio]
    if good:
        return min(good, key=lambda r: r["time_share"])["budget"]
    return min(mine, key=lambda r: abs(r["time_share"] - share))["budget"]


def validate(base: Path, scratch: Path, spec, shapes, dtype, targets, backend, label, budget,
             exhaustive: list[TuningRecord], replayed: dict, logs: Path) -> dict:
    settings = settings_for(label, budget, 0)
    project = make_project(scratch / f"validate-{label}-{budget}",
                           suite_manifest(spec, shapes, dtype, targets, settings.canonical()))
    shutil.copytree(base / ".aot_tune", project / ".aot_tune",
                    ignore=shutil.ignore_patterns("bench", "doit.sqlite3*", "run.lock"))
    wall = doit_tune(project, backend, logs / f"validate-{label}-{budget}.log")
    records = bench_records(project, spec.name)
    truth = {(r.dtype, tuple(r.shape)): r for r in exhaustive}
    ratios, seconds, same = [], 0.0, 0
    replay_picks = {(s["dtype"], tuple(s["shape"])): s["pick"] for s in replayed["shapes"]}
    for record in records:
        full = {m.config.id: m.median_ms for m in truth[(record.dtype, tuple(record.shape))].measurements}
        reference = truth[(record.dtype, tuple(record.shape))]
        ratios.append(full[record.best.id] / full[reference.best.id])
        seconds += spent_seconds(record)  # as the replay prices it, the finals' included
        same += replay_picks.get((record.dtype, tuple(record.shape))) == record.best.id
    total = exhaustive_seconds(exhaustive)
    return {"label": label, "budget": budget, "seed": 0, "wall_s": wall,
            "real": {"time_share": seconds / total, "quality": geomean(ratios), "worst_shape": max(ratios),
                     "seconds": seconds},
            "replay": {k: replayed[k] for k in ("time_share", "quality", "worst_shape", "seconds")},
            "same_pick_shapes": same, "shapes": len(records),
            "records": cache_io.sorted_cache(cache_io.without_samples(r) for r in records)}


# ----------------------------------------------------------------------------- plot

def plot(rows: list[dict], runs: list[dict], validations: list[dict], path: Path, title: str,
         targets: tuple[tuple[float, float], ...] = TARGETS) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for i, label in enumerate(sorted({r["label"] for r in rows})):
        mine = sorted((r for r in rows if r["label"] == label), key=lambda r: r["time_share"])
        xs = [100 * r["time_share"] for r in mine]
        ys = [100 * (r["quality"] - 1) for r in mine]
        low = [100 * (r["quality"] - r["best_seed"]) for r in mine]
        high = [100 * (r["worst_seed"] - r["quality"]) for r in mine]
        color = f"C{i}"
        ax.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=3, color=color, label=label)
        for r, x, y in zip(mine, xs, ys):
            ax.annotate(str(r["budget"]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color=color)
    for v in validations:
        ax.scatter([100 * v["real"]["time_share"]], [100 * (v["real"]["quality"] - 1)], marker="*", s=160,
                   color="black", zorder=5)
        ax.annotate(f"real {v['label']} {v['budget']}", (100 * v["real"]["time_share"], 100 * (v["real"]["quality"] - 1)),
                    textcoords="offset points", xytext=(6, -10), fontsize=7)
    for share, ratio in targets:
        ax.add_patch(plt.Rectangle((0, 0), 100 * share, 100 * (ratio - 1), fill=True, alpha=0.08, color="green"))
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xlabel("tuning time (% of the exhaustive bench time)")
    ax.set_ylabel("pick slower than the exhaustive pick (%, geomean over shapes)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    return f"wrote {path}"


# ----------------------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for pareto.md/.json/.png and the records")
    parser.add_argument("--kernel", default="gemm")
    parser.add_argument("--m", type=int, nargs="+", default=[32, 128, 512, 2048], help="GEMM M values")
    parser.add_argument("--nk", nargs="+", default=["4096x4096", "4096x1024", "1024x4096"], help="GEMM NxK pairs")
    parser.add_argument("--shapes", nargs="+", help="explicit shapes (AxBxC...), instead of --m x --nk")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--strategies", nargs="+", default=DEFAULT_STRATEGIES, choices=sorted(STRATEGIES))
    parser.add_argument("--budgets", type=int, nargs="+", default=[8, 15, 25, 40, 60, 90], help="configs per shape")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--validate", nargs="*", default=["surrogate:auto", "successive_halving:auto"],
                        help="STRATEGY:BUDGET|auto real budgeted runs (auto: the cheapest budget replayed within "
                             "2%%, else the one nearest 25%% of the exhaustive time)")
    parser.add_argument("--records", type=Path, help="replay these exhaustive records (a cache with samples) instead "
                                                      "of measuring; no validation runs")
    parser.add_argument("--device", help="with --records: the device key whose records to replay (default: the GPU "
                                         "with the most)")
    parser.add_argument("--ranked-from", type=Path, help="also replay the ranked strategy, ranking from this cache's "
                                                         "records of other devices or toolchains")
    parser.add_argument("--backend", default="auto", choices=["auto", "cuda", "interpreter"])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="replay processes")
    parser.add_argument("--deadline-s", type=float, default=570.0,
                        help="seconds the whole command may take: the exhaustive run stops 90 s before it (the "
                             "shapes measured by then are replayed), and real runs that would end later are skipped")
    args = parser.parse_args()
    began = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    spec = load_manifest(ROOT / "tuning.yaml").kernel(args.kernel)
    report: dict = {"command": "python3 -m tools.studies.pareto " + " ".join(sys.argv[1:]),
                    "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "kernel": args.kernel,
                    "dtype": args.dtype, "cpu_cores": os.cpu_count(), "phases_s": {}}
    print(f"# {report['date']}, {report['command']}", flush=True)

    with tempfile.TemporaryDirectory(prefix="pareto-") as tmp:
        scratch = Path(tmp)
        if args.records:
            records = records_of_device(cache_io.read_cache(args.records).records, args.device, args.kernel)
            shapes = sorted({tuple(r.shape) for r in records})
            report["device"] = records[0].device.name
            base = targets = backend = None
        else:
            from aot_tune.bench.local.detect import detect

            device = detect(args.backend)
            backend = device.backend
            targets = [device.target or "sm90"]
            shapes = suite_shapes(args, spec.key)
            report["device"] = device.name
            print(f"phase 1: exhaustive doit tune of {len(shapes)} shapes on {device.name} ({backend}), "
                  f"target {targets[0]}", flush=True)
            base = make_project(scratch / "exhaustive", suite_manifest(spec, shapes, args.dtype, targets))
            budget_s = args.deadline_s - REPORT_RESERVE_S - (time.perf_counter() - began)
            report["phases_s"]["exhaustive_tune"], finished = doit_tune(base, backend, scratch / "exhaustive.log",
                                                                        budget_s)
            records = bench_records(base, spec.name)
            if not finished:
                print(f"  stopped at the deadline with {len(records)} of {len(shapes)} shapes measured: replaying "
                      f"those, no real runs (grow --deadline-s or shrink the suite)", flush=True)
                args.validate = []
                shapes = sorted({tuple(r.shape) for r in records})
            cache_io.write_cache(cache_io.sorted_cache(records), args.out / "exhaustive.tuning.pb")
        total = exhaustive_seconds(records)
        report["priced_in"] = "seconds" if priced_in_seconds(records) else "timings"
        if report["priced_in"] == "timings":
            print("  these records carry no measurement seconds or samples (a merged cache): time is counted in "
                  "timings (1 each, short or full) and short timings see full medians", flush=True)
        report["shapes"] = [list(s) for s in shapes]
        report["exhaustive"] = {"seconds": total, "per_shape": [
            {"shape": list(r.shape), "dtype": r.dtype, "configs": len(r.measurements),
             "measured": sum(m.status != "invalid" for m in r.measurements),
             "seconds": sum(m.seconds for m in r.measurements), "pick": r.best.id,
             "pick_ms": next(m.median_ms for m in r.measurements if m.config.id == r.best.id)} for r in records]}
        print(f"  exhaustive bench time (sum of measurement seconds): {total:.1f} s over {len(records)} shapes and "
              f"dtypes, {sum(p['measured'] for p in report['exhaustive']['per_shape'])} configs measured", flush=True)

        print(f"phase 2: replay {len(args.strategies)} strategies x {len(args.budgets)} budgets x {args.seeds} seeds "
              f"on {args.jobs} processes", flush=True)
        start = time.perf_counter()
        runs = replay_all(records, args.strategies, args.budgets, args.seeds, args.jobs)
        report["phases_s"]["replay"] = time.perf_counter() - start
        rows = summarize(runs)
        report["replay"], report["summary"] = runs, rows
        report["targets"] = targets_met(rows)
        print(table(rows) + "\n" + targets_text(report["targets"]), flush=True)
        print(f"  replayed in {report['phases_s']['replay']:.1f} s", flush=True)
        if args.ranked_from:
            report["ranked"] = replay_ranked(records, cache_io.read_cache(args.ranked_from).records)
            print(report["ranked"]["line"], flush=True)

        report["validation"] = []
        if base is not None:
            for item in args.validate:
                label, _, requested = item.partition(":")
                if label not in STRATEGIES:
                    sys.exit(f"pareto: --validate {item}: unknown strategy (known: {', '.join(STRATEGIES)})")
                budget = choose_budget(rows, label, requested or "auto")
                if budget is None:
                    print(f"phase 3: {label} was not replayed; add it to --strategies to validate it", flush=True)
                    continue
                replayed = next((r for r in runs if (r["label"], r["budget"], r["seed"]) == (label, budget, 0)), None)
                if replayed is None:
                    replayed = _replay_with(records, label, budget)
                expected = replayed["seconds"] + RUN_OVERHEAD_S
                elapsed = time.perf_counter() - began
                if elapsed + expected > args.deadline_s:
                    print(f"phase 3: skipped {label} at {budget} configs: about {expected:.0f} s more would pass "
                          f"the {args.deadline_s:.0f} s deadline ({elapsed:.0f} s spent)", flush=True)
                    continue
                print(f"phase 3: real doit tune with {label}, {budget} configs per shape (seed 0)", flush=True)
                result = validate(base, scratch, spec, shapes, args.dtype, targets, backend, label, budget,
                                  records, replayed, scratch)
                cache_io.write_cache(result.pop("records"), args.out / f"validate-{label}-{budget}.tuning.pb")
                report["validation"].append(result)
                real, rep = result["real"], result["replay"]
                print(f"  real: {real['time_share']:.1%} of the exhaustive time, geomean {real['quality']:.4f}, "
                      f"worst shape {real['worst_shape']:.3f}; replay: {rep['time_share']:.1%}, {rep['quality']:.4f}, "
                      f"{rep['worst_shape']:.3f}; same pick on {result['same_pick_shapes']}/{result['shapes']} shapes",
                      flush=True)

    title = (f"{args.kernel} {args.dtype}, {len(shapes)} shapes, {report['device']}; replay of one exhaustive run, "
             f"{args.seeds} seeds (bars: best/worst seed); stars: real runs"
             + ("; time counted in timings" if report["priced_in"] == "timings" else ""))
    print(plot(rows, runs, report["validation"], args.out / "pareto.png", title), flush=True)
    report["phases_s"]["total"] = time.perf_counter() - began
    (args.out / "pareto.json").write_text(json.dumps(report, indent=1, default=str))
    md = [f"# {args.kernel} search strategies: tuning time against quality", "",
          f"{report['date']}, {report['device']}, `{report['command']}`"
          + (" (time counted in timings: the records carry no seconds)" if report["priced_in"] == "timings" else ""),
          "", table(rows), "",
          targets_text(report["targets"]), ""]
    for v in report["validation"]:
        md.append(f"- real `doit tune`, {v['label']} at {v['budget']} configs per shape: "
                  f"{v['real']['time_share']:.1%} of the exhaustive time, geomean {v['real']['quality']:.4f} "
                  f"(replay: {v['replay']['time_share']:.1%}, {v['replay']['quality']:.4f}); same pick on "
                  f"{v['same_pick_shapes']}/{v['shapes']} shapes")
    if "ranked" in report:
        md.append(f"- {report['ranked']['line']}")
    (args.out / "pareto.md").write_text("\n".join(md) + "\n")
    print(f"wrote {args.out}/pareto.md, pareto.json; total {report['phases_s']['total']:.1f} s", flush=True)


def replay_ranked(records: list[TuningRecord], foreign: list[TuningRecord]) -> dict:
    """The ranked strategy replayed over ``records``, ranking from ``foreign`` (aot_tune.search.ranked)."""
    own = {(r.device.key, r.fingerprint) for r in records}
    foreign = [r for r in foreign if r.kernel == records[0].kernel and r.device.backend == records[0].device.backend
               and (r.device.key, r.fingerprint) not in own]
    result = replay_suite(records, SearchSettings("ranked"), foreign=foreign)
    valid = sum(m.status != "invalid" for r in records for m in r.measurements)
    measured = sum(s.configs_measured for s in result.shapes)
    origins = sorted({f"{r.device.key} (triton {r.toolchain.triton})" for r in foreign})
    line = (f"ranked from {', '.join(origins) or 'nothing'}: {measured} of {valid} configs measured, "
            f"{result.time_share:.1%} of the exhaustive time; geomean pick / exhaustive pick {result.quality:.4f}, "
            f"worst shape {result.worst:.3f}")
    return {"line": line, "time_share": result.time_share, "configs_measured": measured, "configs": valid,
            "quality": result.quality, "worst_shape": result.worst,
            "shapes": [{"shape": list(s.shape), "dtype": s.dtype, "pick": s.pick, "ratio": s.ratio,
                        "configs": s.configs_measured} for s in result.shapes]}


def _replay_with(records: list[TuningRecord], label: str, budget: int) -> dict:
    _load_records(cache_io.sorted_cache(records).SerializeToString())
    return _replay_job((label, budget, 0))


if __name__ == "__main__":
    main()
