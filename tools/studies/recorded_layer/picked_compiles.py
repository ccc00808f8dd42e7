"""Seconds the compiles of the tables' configs took in `aot_tune tune`: what a first step with
the tables and a cold Triton cache must at least spend, compiling each config it launches once.

    python picked_compiles.py [PROJECT]     # the folder holding generated/ and .aot_tune/
"""
from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path


def picked_compile_seconds(project: Path) -> dict[str, float]:
    """Kernel -> the summed compile seconds of its tables' configs (every device, every target)."""
    out = {}
    for module in sorted((project / "generated").glob("*.py")):
        tables = runpy.run_path(str(module)).get("TABLES", {})
        picked = [json.dumps(c, sort_keys=True) for table in tables.values() for c in table.values()]
        seconds = 0.0
        for record in (project / ".aot_tune" / "compile" / module.stem).rglob("*.json"):
            data = json.loads(record.read_text())
            if json.dumps(data.get("config"), sort_keys=True) in picked:
                seconds += float(data.get("seconds") or 0.0)
        out[module.stem] = round(seconds, 3)
    return out


if __name__ == "__main__":
    found = picked_compile_seconds(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
    print(json.dumps({"picked_compile_seconds": round(sum(found.values()), 2), "per_kernel": found}))
