"""The log of tuning runs: where each `doit tune` that did work spent its time.

Records hold each bench task's seconds and compile outputs each compile's, but neither knows
the run around them: how long the whole command took, and how much of it was neither
compiling nor benchmarking (planning, start-up, merge, generate). Each run that ran any stage
appends that here, under ``.aot_tune/`` (local to the tree, like the other task outputs), for
``doit report``'s tuning-time split.
"""
from __future__ import annotations

import json
from pathlib import Path

from aot_tune.fileio import write_atomic

RUNS_FILE = "runs.json"
#: Runs kept; older ones are dropped.
RUNS_KEPT = 50


def append_run(work_dir: Path, run: dict) -> None:
    runs = read_runs(work_dir)
    write_atomic(work_dir / RUNS_FILE, json.dumps((runs + [run])[-RUNS_KEPT:], indent=1, sort_keys=True))


def read_runs(work_dir: Path) -> list[dict]:
    """The logged runs, oldest first; none if the log is missing or unreadable."""
    try:
        runs = json.loads((work_dir / RUNS_FILE).read_text())
    except (OSError, ValueError):
        return []
    return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


def time_split(run: dict) -> dict[str, float]:
    """The run's wall time in disjoint parts, in stage order: a stage's time excludes what a later
    stage overlaps (compiles still running while the first benches go count as bench), and
    ``other`` is what no stage covers (start-up, planning, merge, generate)."""
    stages = run.get("stages", {})
    split: dict[str, float] = {}
    later: list[tuple[float, float]] = []
    for stage in reversed([s for s in STAGE_ORDER if s in stages]):
        start, end = stages[stage]
        split[stage] = max(0.0, end - start) - _overlap((start, end), later)
        later.append((start, end))
    ordered = {stage: round(split[stage], 3) for stage in STAGE_ORDER if stage in split}
    ordered["other"] = round(max(0.0, run.get("wall_s", 0.0) - sum(ordered.values())), 3)
    return ordered


STAGE_ORDER = ("specialize", "compile", "bench")


def _overlap(span: tuple[float, float], others: list[tuple[float, float]]) -> float:
    """Length of ``span`` covered by the union of ``others``."""
    covered, reach = 0.0, span[0]
    for start, end in sorted(others):
        start, end = max(start, reach), min(end, span[1])
        if end > start:
            covered += end - start
            reach = end
    return covered
