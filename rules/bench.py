"""bench: one task per (kernel, shape, dtype, device model), streaming behind the compiles (no
task_dep on them: it measures its configs as their compiles land, aot_tune.pipeline.streaming;
an adaptive budgeted search compiles what it reaches, aot_tune.pipeline.searching), after the shapes
that seed a search with transfer."""
from __future__ import annotations

from typing import Iterator


def tasks(session) -> Iterator[dict]:
    staleness, plan = session.staleness, session.plan
    units = [(kp, u) for kp in session.plan.kernels for u in kp.bench_units]
    # Seeding shapes first, then the dearest first, so the last tasks on each device are short
    # ones: by the forecast's device seconds where the run has one, else by config count (a
    # config costs about warmup + rep whatever its shape). doit dispatches in this order.
    forecast = session.forecast
    units.sort(key=lambda item: (bool(item[1].sources), -_cost(forecast, item[1])))
    stale = [u for kp, u in units if not staleness.bench_done(kp, u)]
    session.start_stage("bench", len(stale), stale)
    devices = ", ".join(d.key for d in plan.devices)
    yield {"basename": "bench", "name": None, "doc": f"benchmark each shape x dtype on each device model ({devices})"}
    for kp, unit in units:
        seeds = [kp.bench_of((shape, unit.dtype), unit.device).name for shape in unit.sources]
        yield {
            "basename": "bench",
            "name": unit.name.partition(":")[2],
            "doc": f"benchmark {unit.kernel} on {unit.dtype} {unit.shape}",
            "actions": [(session.bench, (kp, unit))],
            "task_dep": seeds,
            "uptodate": [lambda kp=kp, unit=unit: staleness.bench_done(kp, unit)],
            "verbosity": 0,
        }


def _cost(forecast, unit) -> float:
    """A stale task's predicted device seconds where the run has a forecast, else its config
    count. Up-to-date tasks, which the forecast does not price, run nothing: where they sort
    does not matter."""
    seconds = forecast.task_seconds(unit) if forecast is not None else None
    return seconds if seconds is not None else _measurements(unit)


def _measurements(unit) -> int:
    """How many configs the task measures: its cost on the GPU (about warmup + rep each)."""
    budget = unit.search.budget_configs
    return len(unit.configs) if budget is None else min(budget, len(unit.configs))
