"""generate: render each kernel's cache into generated/<kernel>.py and its exports: files."""
from __future__ import annotations

from typing import Iterator


def tasks(session) -> Iterator[dict]:
    yield {"basename": "generate", "name": None,
           "doc": "write generated/<kernel>.py tables and the exports: files from the caches"}
    for kp in session.plan.kernels:
        yield {
            "basename": "generate",
            "name": kp.spec.name,
            "doc": f"write {kp.generated_path.name} for {kp.spec.name}",
            "actions": [(session.generate, (kp,))],
            "task_dep": [f"merge:{kp.spec.name}"],
            "uptodate": [lambda kp=kp: not session.generate_needed(kp)],
            "verbosity": 0,
        }
