"""Add up what ``AOT_TUNE_GPU_PROFILE=DIR doit tune`` wrote: where the device workers' GPU time
went over a run's batches (aot_tune.bench.local.gpu_profile), in all, for the finals' batches apart,
and per kernel.

    AOT_TUNE_GPU_PROFILE=/tmp/gpu doit tune
    python -m tools.bench.gpu_split /tmp/gpu
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

#: The columns, in the order they are printed (seconds, added up over the batches).
COLUMNS = ("window", "busy", "timed", "own untimed", "spin", "torch", "copies", "idle")


def read_batches(folder: Path) -> list[dict]:
    """Every batch line the device workers wrote into ``folder``."""
    lines = []
    for path in sorted(folder.glob("gpu-device*.jsonl")):
        lines += [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines() if text.strip()]
    return lines


def totals(batches: list[dict]) -> Counter:
    """The batches' seconds added up per column, with their count and their configs."""
    total: Counter = Counter()
    for batch in batches:
        total.update({column: batch[column] for column in COLUMNS})
        total["batches"] += 1
        total["configs measured"] += batch["configs"]
    return total


def row(label: str, total: Counter) -> str:
    window = total["window"] or 1e-9
    per = 1e3 / max(total["configs measured"], 1)
    cells = "  ".join(f"{column} {total[column]:.2f}s ({total[column] / window:.0%})" for column in COLUMNS[1:])
    return (f"{label}: {total['batches']} batches, {total['configs measured']} measurements, window "
            f"{total['window']:.2f}s: {cells}; the configs' own kernels outside their samples {total['own untimed'] * per:.2f} ms "
            f"a measurement")


def report(batches: list[dict]) -> list[str]:
    lines = [row("all", totals(batches))]
    for finals, label in ((False, "configs' batches"), (True, "finals' batches")):
        chosen = [b for b in batches if b["finals"] == finals]
        if chosen:
            lines.append(row(label, totals(chosen)))
    by_kernel: dict[str, list[dict]] = defaultdict(list)
    for batch in batches:
        by_kernel[batch["kernel"]].append(batch)
    lines += [row(f"  {kernel}", totals(chosen)) for kernel, chosen in sorted(by_kernel.items())]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the folder AOT_TUNE_GPU_PROFILE named")
    args = parser.parse_args(argv)
    batches = read_batches(args.folder)
    if not batches:
        print(f"error: no gpu-device*.jsonl in {args.folder}; fix: run `AOT_TUNE_GPU_PROFILE={args.folder} doit tune` "
              f"on a GPU host first", file=sys.stderr)
        return 1
    print("\n".join(report(batches)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
