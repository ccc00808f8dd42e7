"""A retune from other records (``search: {strategy: ranked}``, or any budgeted search) against an
exhaustive tune of the same device: per kernel, the configs it measured, its share of the
exhaustive run's bench seconds, and its picks timed by the exhaustive run itself (each pick
compared on one run's medians).

    python -m tools.studies.retune_compare --exhaustive /tmp/exhaustive/h100-sxm \\
        --retuned proj/.aot_tune/bench/h100-sxm [--retime proj] [--out result.json]

Each folder is a run's ``.aot_tune/bench/<device>``: one record per kernel, dtype and shape.
The exhaustive run's medians of two configs come from different batches, which a GPU at its power
cap runs 10-30% apart; the pick it made is its finals' (aot_tune.select.finalists), but the retune's
pick may not have been among them. ``--retime PROJECT`` (the retune's project, for its manifest)
also times each differing pair of picks again side by side, interleaved as finals are, on this
machine's first device: that judge meets the same drift for both.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from aot_tune.cache import config_from_proto, read_record, record_full_shape
from aot_tune.space import Config
from aot_tune.tuning_schema import TuningRecord


def compare(exhaustive: Path, retuned: Path) -> dict:
    """Per kernel and in total: shapes, configs measured (retuned, exhaustive), bench seconds of
    each, and the retuned picks' medians over the exhaustive picks' (geomean, worst)."""
    kernels: dict[str, dict] = {}
    for ours, full in twins(exhaustive, retuned):
        medians = {m.config.id: m.median_ms for m in full.measurements if m.status == "ok" and m.median_ms > 0}
        if ours.best.id not in medians or not medians:
            continue
        row = kernels.setdefault(ours.kernel, {"shapes": 0, "measured": 0, "candidates": 0, "seconds": 0.0,
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


def retime(exhaustive: Path, retuned: Path, project: Path, backend: str = "cuda",
           timeout_s: float = 120.0) -> dict[str, dict]:
    """Per kernel and in total: each shape's retuned pick over the exhaustive pick, both timed
    again side by side in one interleaved batch (``final_rounds``) on one device of ``backend``
    (equal picks count 1.0): geomean, worst, and how many pairs were timed."""
    return retime_picks(twins(exhaustive, retuned), project, backend, timeout_s)


def twins(exhaustive: Path, retuned: Path) -> list[tuple[TuningRecord, TuningRecord]]:
    """Each retuned record with the exhaustive run's record of the same kernel and shape (the same
    file under each run's folder); a shape the exhaustive run lacks is left out."""
    return [(read_record(path), read_record(exhaustive / path.parent.name / path.name))
            for path in sorted(retuned.glob("*/*.pb")) if (exhaustive / path.parent.name / path.name).exists()]


def retime_picks(pairs: list[tuple[TuningRecord, TuningRecord]], project: Path, backend: str = "cuda",
                 timeout_s: float = 120.0) -> dict[str, dict]:
    """Per kernel and in total, over (record, reference record) pairs of one shape: the record's
    pick over the reference's, both timed again side by side in one interleaved batch
    (``final_rounds``) on one device of ``backend``, with ``project``'s manifest (equal picks
    count 1.0; a pick the project never compiled is compiled by Triton on its first launch):
    geomean, worst, and how many pairs were timed."""
    from dataclasses import replace

    from aot_tune.bench.local.pool import DevicePool
    from aot_tune.manifest import load_manifest
    from aot_tune.pipeline.benching import bench_request
    from aot_tune.select import FINALS_ROUNDS

    manifest = load_manifest(project / "tuning.yaml")
    timed_pairs, ratios = [], {}
    for ours, reference in pairs:
        if not ours.best.id or not reference.best.id:
            continue
        ratios.setdefault(ours.kernel, [])
        if ours.best.id == reference.best.id:
            ratios[ours.kernel].append(0.0)
            continue
        spec, shape = manifest.kernel(ours.kernel), record_full_shape(ours)
        picks = [Config.from_dict(config_from_proto(best)) for best in (ours.best, reference.best)]
        requests = [replace(bench_request(spec, manifest.root, shape, ours.dtype, config, spec.bench),
                            final_rounds=FINALS_ROUNDS) for config in picks]
        timed_pairs.append((ours.kernel, requests))
    timed = {kernel: 0 for kernel in ratios}
    if timed_pairs:
        pool = DevicePool(backend, 1, str(project / ".aot_tune" / "triton-cache"))
        try:
            with pool.lease() as lease:
                for kernel, requests in timed_pairs:
                    results = {r.config_id: r for r in lease.measure_all(requests, timeout_s)}
                    ours, full = (results.get(r.config_id) for r in requests)
                    if ours is None or full is None or not (ours.ok and full.ok):
                        continue
                    ratios[kernel].append(math.log(statistics.median(ours.times_ms) / statistics.median(full.times_ms)))
                    timed[kernel] += 1
        finally:
            pool.close()
    rows = {kernel: {"retimed_pairs": timed[kernel], "log_ratios": r} for kernel, r in sorted(ratios.items())}
    rows["all"] = {"retimed_pairs": sum(timed.values()), "log_ratios": [x for r in ratios.values() for x in r]}
    for row in rows.values():
        logs = row.pop("log_ratios")
        row["retimed_geomean"] = math.exp(sum(logs) / len(logs)) if logs else None
        row["retimed_worst"] = math.exp(max(logs)) if logs else None
    return rows


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
    parser.add_argument("--retime", type=Path, metavar="PROJECT",
                        help="also time each differing pair of picks side by side on this machine's first GPU "
                             "(PROJECT: the retune's project folder, for its tuning.yaml)")
    parser.add_argument("--out", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args()
    result = compare(args.exhaustive, args.retuned)
    if args.retime:
        for name, row in retime(args.exhaustive, args.retuned, args.retime).items():
            if name in result:
                result[name].update(row)
    for name, row in result.items():
        share = row["share_of_exhaustive_seconds"]
        print(f"{name}: {row['shapes']} shapes, {row['measured']} of {row['candidates']} configs measured, "
              f"{row['seconds']:.1f} s against {row['exhaustive_seconds']:.1f} s exhaustive"
              + (f" ({share:.1%})" if share is not None else "")
              + (f"; picks geomean {row['pick_geomean']:.4f}, worst {row['pick_worst']:.4f}, "
                 f"{row['picks_equal']} the same" if row["pick_geomean"] is not None else "")
              + (f"; re-timed side by side ({row['retimed_pairs']} pairs): geomean {row['retimed_geomean']:.4f}, "
                 f"worst {row['retimed_worst']:.4f}" if row.get("retimed_geomean") is not None else ""))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
