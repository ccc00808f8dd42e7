"""merge: fold a kernel's bench results into its protobuf cache."""
from __future__ import annotations

from typing import Iterator


def tasks(session) -> Iterator[dict]:
    yield {"basename": "merge", "name": None, "doc": "merge bench results into each kernel's protobuf cache"}
    for kp in session.plan.kernels:
        yield {
            "basename": "merge",
            "name": kp.spec.name,
            "doc": f"merge {kp.spec.name} results into {kp.cache_path.name}",
            "actions": [(session.merge, (kp,))],
            "task_dep": [u.name for u in kp.bench_units],
            "uptodate": [lambda kp=kp: not session.staleness.merge_needed(kp)],
            "verbosity": 0,
        }
