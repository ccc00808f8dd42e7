"""A library aot_tune did not write, tuned as a user would and read back by the library itself.

    python -m tools.studies.fla_tables.run [--project DIR] [--backend cuda|interpreter]

1. Builds a fresh project outside this checkout (``project/`` beside this file: a tuning.yaml
   and the user's ``fla_tuning.py``) for flash-linear-attention's l2norm forward kernels, from
   ``fla-core`` as installed (never edited; import it from PYTHONPATH or site-packages).
2. Runs ``aot_tune tune`` there: bench dims (rows T beside fla's key D, NB), and exports in
   fla's own config-file format (``fla_configs/<GPU>/<kernel>.json``).
3. On a GPU, runs fla twice in fresh processes with a cold Triton cache and no aot_tune import
   (``launch_fla.py``): once reading the exported files (``FLA_CACHE_MODE=strict``), once
   autotuning as it does by default; and compares the first calls' seconds. The two runs' picks
   are then timed against each other in one process, interleaved (``compare_picks.py``).

Prints a table and writes ``fla_tables.json`` to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def _env(extra: dict[str, str], path: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLA_", "TRITON_CACHE"))}
    env["PYTHONPATH"] = os.pathsep.join([*path, *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env


def tune(project: Path, backend: str) -> float:
    """``aot_tune tune`` in the project, as a user runs it; its wall seconds."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "aot_tune", "tune", "--bench-backend", backend],
                          cwd=project, env=_env({}, [str(project), str(ROOT)]), text=True)
    if proc.returncode != 0:
        sys.exit(f"aot_tune tune failed ({proc.returncode})")
    return time.perf_counter() - started


def shapes_of(project: Path) -> list[tuple[int, int, str]]:
    """(T, D, dtype) of every shape the manifest benchmarks on a GPU."""
    sys.path.insert(0, str(ROOT))
    from aot_tune.manifest import load_manifest

    manifest = load_manifest(project / "tuning.yaml")
    out = []
    for spec in manifest.kernels:
        for shape in spec.shapes:
            named = spec.shape_dict(shape)
            out += [(named["T"], named["D"], dtype) for dtype in spec.dtypes]
    return out


def run_fla(shapes: list, env: dict[str, str], label: str) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"triton-{label}-") as cache:
        proc = subprocess.run([sys.executable, str(HERE / "launch_fla.py"), json.dumps(shapes)],
                              env=_env({**env, "TRITON_CACHE_DIR": cache, "FLA_CACHE_RESULTS": "0"}, []),
                              capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"fla ({label}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, help="where to build the project (default: a fresh temp folder)")
    parser.add_argument("--backend", default="cuda", choices=("cuda", "interpreter"))
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--compare-only", type=Path, metavar="FLA_TABLES_JSON",
                        help="only time the picks of an earlier run's fla_tables.json against each other")
    args = parser.parse_args()
    if args.compare_only:
        earlier = json.loads(args.compare_only.read_text())
        compared = compare(HERE / "project", earlier["tables"], earlier["autotune"])
        report(earlier["tables"], earlier["autotune"], compared, earlier["tune_s"])
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fla_tables.json").write_text(json.dumps({**earlier, "compared": compared}, indent=1))
        return 0
    project = args.project or Path(tempfile.mkdtemp(prefix="fla-project-"))
    if project.exists() and any(project.iterdir()):
        sys.exit(f"{project} is not empty: pass a fresh folder")
    shutil.copytree(HERE / "project", project, dirs_exist_ok=True)
    tune_s = tune(project, args.backend)
    exported = sorted(str(p.relative_to(project)) for p in (project / "fla_configs").rglob("*.json"))
    print(f"aot_tune tune: {tune_s:.1f} s; exported {', '.join(exported) or 'nothing'}")
    result = {"tune_s": tune_s, "exported": exported}
    if args.backend == "cuda":
        shapes = shapes_of(project)
        (folder,) = {Path(p).parent for p in exported}
        tables = run_fla(shapes, {"FLA_CACHE_MODE": "strict", "FLA_CONFIG_DIR": str(project / folder)}, "tables")
        autotuned = run_fla(shapes, {}, "autotune")
        compared = compare(project, tables, autotuned)
        result.update(tables=tables, autotune=autotuned, compared=compared)
        report(tables, autotuned, compared, tune_s)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fla_tables.json").write_text(json.dumps(result, indent=1))
    return 0


def compare(project: Path, tables: dict, autotuned: dict) -> list[float]:
    """Per shape, the time of the tables' pick over the autotuner's, both timed in one process
    (compare_picks.py); 1.0 where both picked the same config."""
    pairs = [{"T": a["T"], "D": a["D"], "dtype": a["dtype"], "a": a["config"], "b": b["config"]}
             for a, b in zip(tables["rows"], autotuned["rows"]) if a["config"] != b["config"]]
    proc = subprocess.run([sys.executable, str(HERE / "compare_picks.py"), json.dumps(pairs)],
                          env=_env({}, [str(project), str(ROOT)]), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"compare_picks failed:\n{proc.stderr[-3000:]}")
    timed = iter(json.loads(proc.stdout.strip().splitlines()[-1]))
    ratios = []
    for a, b in zip(tables["rows"], autotuned["rows"]):
        if a["config"] == b["config"]:
            ratios.append(1.0)
        else:
            pair = next(timed)
            ratios.append(pair["ms_a"] / pair["ms_b"])
    return ratios


def report(tables: dict, autotuned: dict, compared: list[float], tune_s: float) -> None:
    print(f"fla imported aot_tune: {tables['aot_tune_imported']} (reading the tables), "
          f"{autotuned['aot_tune_imported']} (autotuning)")
    print(f"{'kernel':<22} {'dtype':<9} {'T':>7} {'D':>5}  {'first call s':>21}  {'fla call us':>17}  "
          f"{'pick ratio':>10}  picks")
    print(f"{'':<22} {'':<9} {'':>7} {'':>5}  {'tables':>10} {'autotune':>10}  {'tables':>8} {'autotune':>8}")
    ratios = compared
    for a, b, ratio in zip(tables["rows"], autotuned["rows"], ratios):
        same = "same" if a["config"] == b["config"] else f"{_short(a['config'])} vs {_short(b['config'])}"
        print(f"{a['kernel']:<22} {a['dtype']:<9} {a['T']:>7} {a['D']:>5}  {a['first_s']:>10.3f} {b['first_s']:>10.3f}"
              f"  {a['ms'] * 1e3:>8.1f} {b['ms'] * 1e3:>8.1f}  {ratio:>10.3f}  {same}")
    first_t = sum(r["first_s"] for r in tables["rows"])
    first_a = sum(r["first_s"] for r in autotuned["rows"])
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"first calls: {first_t:.1f} s reading the tables vs {first_a:.1f} s autotuning; "
          f"the tables' picks / the autotuner's, timed interleaved in one process: geomean {geo:.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}); "
          f"aot_tune tune took {tune_s:.1f} s")


def _short(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items() if k != "num_stages")


if __name__ == "__main__":
    sys.exit(main())
