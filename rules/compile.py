"""compile: one task per (kernel, config, specialization, target): it queues its compile for the
compile worker pool and returns (the bench tasks wait for the compiles they need). A compile only
adaptive budgeted searches need is up to date here: they run it on demand (aot_tune.pipeline.searching)."""
from __future__ import annotations

from typing import Iterator

from aot_tune.build.compile import compile_time_estimate, longest_first
from aot_tune.build.compile import recorded_compile_seconds


def tasks(session) -> Iterator[dict]:
    staleness = session.staleness
    units = [(kp, u) for kp in session.plan.kernels for u in kp.compile_units]
    stale = {u.name for kp, u in units if staleness.compile_needed(kp, u)}
    units = longest_first(  # doit dispatches in this order; only the stale units' order matters
        units, lambda item: compile_time_estimate(item[1].config.as_dict(), item[0].spec.compile_cost),
        lambda item: recorded_compile_seconds(item[1].output) if item[1].name in stale else None)
    # The compiles of the configs the shapes' references launch go first (Compiles.references);
    # then the compile queue orders the rest by what it learns of each kernel's compiles.
    references = session.compiles.references
    units.sort(key=lambda item: item[1].name not in references)
    session.start_stage("compile", len(stale), [u for _, u in units if u.name in stale])
    yield {"basename": "compile", "name": None,
           "doc": "AOT-compile the candidate configs per specialization and GPU target (all CPU cores)"}
    for kp, unit in units:
        yield {
            "basename": "compile",
            "name": unit.name.partition(":")[2],
            "doc": f"compile {unit.config.label()} for {unit.target}, specialization {unit.specialization}",
            "actions": [(session.queue_compile, (kp, unit))],
            "uptodate": [lambda kp=kp, unit=unit: not staleness.compile_needed(kp, unit)],
            "verbosity": 0,
        }

