"""A retune from other records (``search: {strategy: ranked}``, or any budgeted search) against an
exhaustive tune of the same device: per kernel, the configs it measured, its share of the
exhaustive run's bench seconds, and its picks timed by the exhaustive run itself (which measured
every config, so each pick is compared on one run's medians, with no re-timing noise).

    python -m tools.studies.retune_compare --exhaustive /tmp/exhaustive/h100-sxm \\
        --retuned proj/.aot_tune/bench/h100-sxm [--out result.json]

Each folder is a run's ``.aot_tune/bench/<device>``: one record per kernel, dtype and shape.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from aot_tune.cache import read_record


def compare(exhaustive: Path, retuned: Path) -> dict:
    """Per kernel and in total: shapes, configs measured (retuned, exhaustive), bench seconds of
    each, and the retuned picks' medians over the exhaustive picks' (geomean, worst)."""
    kernels: dict[str, dict] = {}
    for path in sorted(retuned.glob("*/*.pb")):
        twin = exhaustive / path.parent.name / path.name
        if not twin.exists():
            continue
        ours, full = read_record(path), read_record(twin)
        medians = {m.config.id: m.median_ms for m in full.measurements if m.status == "ok" and m.median_ms > 0}
        if ours.best.id not in medians or not medians:
            continue
        row = kernels.setdefault(path.parent.name, {"shapes": 0, "measured": 0, "candidates": 0, "seconds": 0.0,
                                                    "exhaustive_seconds": 0.0, "log_ratios": []})
        row["shapes"] += 1
        row["measured"] += sum(1 for m in ours.measurements if m.status != "invalid")
        row["candidates"] += sum(1 for m in full.measurements if m.status != "invalid")
        row["seconds"] += sum(m.seconds for m in ours.measurements)
        row["exhaustive_seconds"] += sum(m.seconds for m in full.measurements)
        row["log_ratios"].append(math.log(medians[ours.best.id] / min(medians.values())))
    total = {"shapes": 0, "measured": 0, "candidates": 0, "seconds": 0.0, "exhaustive_seconds": 0.0, "log_ratios": []}
    for row in kernels.values():
        for key in total:
            total[key] += row[key]
    return {name: _finish(row) for name, row in [*sorted(kernels.items()), ("all", total)]}


def _finish(row: dict) -> dict:
    ratios = row.pop("log_ratios")
    row["share_of_exhaustive_seconds"] = row["seconds"] / row["exhaustive_seconds"] if row["exhaustive_seconds"] else None
    row["pick_geomean"] = math.exp(sum(ratios) / len(ratios)) if ratios else None
    row["pick_worst"] = math.exp(max(ratios)) if ratios else None
    row["picks_equal"] = sum(1 for r in ratios if r == 0.0)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exhaustive", type=Path, required=True, help="the exhaustive run's .aot_tune/bench/<device>")
    parser.add_argument("--retuned", type=Path, required=True, help="the retune's .aot_tune/bench/<device>")
    parser.add_argument("--out", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args()
    result = compare(args.exhaustive, args.retuned)
    for name, row in result.items():
        share = row["share_of_exhaustive_seconds"]
        print(f"{name}: {row['shapes']} shapes, {row['measured']} of {row['candidates']} configs measured, "
              f"{row['seconds']:.1f} s against {row['exhaustive_seconds']:.1f} s exhaustive"
              + (f" ({share:.1%})" if share is not None else "")
              + (f"; picks geomean {row['pick_geomean']:.4f}, worst {row['pick_worst']:.4f}, "
                 f"{row['picks_equal']} the same" if row["pick_geomean"] is not None else ""))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
