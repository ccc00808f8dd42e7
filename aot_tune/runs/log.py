"""The log of tuning runs: where each `doit tune` that did work spent its time.

Records hold each bench task's seconds and compile outputs each compile's, but neither knows
the run around them: how long the whole command took, and how much of it was neither
compiling nor benchmarking (planning, start-up, merge, generate). Each run that ran any stage
appends that here, under ``.aot_tune/`` (local to the tree, like the other task outputs), for
``doit report``'s tuning-time split.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from aot_tune.fileio import write_atomic

RUNS_FILE = "runs.json"
#: Runs kept; older ones are dropped.
RUNS_KEPT = 50


@dataclass
class RunRecord:
    """One ``doit tune`` that ran a stage: its wall time, each stage's span (seconds from its start),
    worker seconds, outcomes by kind, the batches benches sent to device workers, and what the
    run predicted at its start (aot_tune.pipeline.forecast; None in runs logged before it): the
    parts, and the per-unit values the model took (``estimates``: a compile's typical seconds,
    the kernel modules' import...). ``launch_s``: the command's own start before the run began
    (its imports, reading the manifest), not in ``wall_s``; ``jobs``, ``cpus`` and ``toolchain``
    key the run in the machine's history (aot_tune.runs.history)."""

    started_at: str
    wall_s: float
    ok: bool
    device: str
    backend: str
    kernels: list[str]
    stages: dict[str, list[float]] = field(default_factory=dict)  # stage -> [start, end]
    worker_seconds: dict[str, float] = field(default_factory=dict)
    compile: dict[str, int] = field(default_factory=dict)
    bench: dict[str, int] = field(default_factory=dict)
    baselines: dict[str, int] = field(default_factory=dict)
    finals: dict[str, int] = field(default_factory=dict)  # shapes, configs (aot_tune.select.finalists)
    batches: int = 0
    predicted_s: float | None = None
    predicted: dict[str, float] = field(default_factory=dict)  # start-up, compile, bench, rest
    estimates: dict[str, float] = field(default_factory=dict)
    launch_s: float = 0.0
    jobs: int = 1
    cpus: int = 0
    toolchain: str = ""

    @classmethod
    def from_dict(cls, data: dict) -> "RunRecord | None":
        """A logged run, or None for an entry that is not one (torn, foreign, another version)."""
        try:
            known = {f.name for f in fields(cls)}
            return cls(**{k: v for k, v in data.items() if k in known})
        except TypeError:
            return None


def append_run(work_dir: Path, run: RunRecord) -> None:
    runs = [asdict(r) for r in read_runs(work_dir)] + [asdict(run)]
    write_atomic(work_dir / RUNS_FILE, json.dumps(runs[-RUNS_KEPT:], indent=1, sort_keys=True))


def read_runs(work_dir: Path) -> list[RunRecord]:
    """The logged runs, oldest first; none if the log is missing or unreadable."""
    try:
        runs = json.loads((work_dir / RUNS_FILE).read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(runs, list):
        return []
    found = (RunRecord.from_dict(r) for r in runs if isinstance(r, dict))
    return [r for r in found if r is not None]


def time_split(run: RunRecord) -> dict[str, float]:
    """The run's wall time in disjoint parts, in stage order: a stage's time excludes what a later
    stage overlaps (compiles still running while the first benches go count as bench), and
    ``other`` is what no stage covers (start-up, planning, merge, generate)."""
    stages = run.stages
    split: dict[str, float] = {}
    later: list[tuple[float, float]] = []
    for stage in reversed([s for s in STAGE_ORDER if s in stages]):
        start, end = stages[stage]
        split[stage] = max(0.0, end - start) - _overlap((start, end), later)
        later.append((start, end))
    ordered = {stage: round(split[stage], 3) for stage in STAGE_ORDER if stage in split}
    ordered["other"] = round(max(0.0, run.wall_s - sum(ordered.values())), 3)
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
