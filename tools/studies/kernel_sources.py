"""Which of a library's autotuned kernels its recordings can rebuild without importing it: every
``@triton.autotune`` object at the top level of the package's modules, its Triton source captured
as ``aot_tune record`` captures it, then rebuilt in a fresh process that imports neither the
library nor torch, and its cache key compared with the library's.

    python -m tools.studies.kernel_sources PACKAGE [--path DIR]...

``--path`` puts a folder on the path of both processes (an unpacked library). Prints the count
captured, the rebuild's seconds and whether every key matched, then one line per kernel left to
its library's import, with the reason. A module that fails to import is counted and skipped.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

REBUILD = """
import json, sys, time
start = time.perf_counter()
from aot_tune.triton_compat import kernel_source
sources = json.load(sys.stdin)
same = sum(kernel_source.rebuild(s).cache_key == s["cache_key"] for s in sources.values())
print(json.dumps({"same": same, "seconds": time.perf_counter() - start,
                  "imported": sorted(m for m in sys.modules if m in ("torch", sys.argv[1]))}))
"""


def capture(package: str) -> tuple[dict[str, dict], dict[str, str], int]:
    """Each autotuned kernel's source by ``module:attr``, the reasons of those left out, and how
    many modules failed to import."""
    from triton.runtime.autotuner import Autotuner

    from aot_tune.triton_compat import kernel_source

    root = importlib.import_module(package)
    failed = 0
    for info in pkgutil.walk_packages(getattr(root, "__path__", []), f"{package}."):
        try:
            importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - a module the library itself cannot import here
            failed += 1
    tuners = {f"{name}:{attr}": value for name, module in list(sys.modules.items())
              if name == package or name.startswith(f"{package}.")
              for attr, value in list(vars(module).items()) if isinstance(value, Autotuner)}
    sources, refused = {}, {}
    for ref, tuner in sorted(tuners.items()):
        try:
            layers = kernel_source.heuristic_layers(tuner)
            sources[ref] = kernel_source.capture(layers[-1].fn if layers else tuner.fn)
        except kernel_source.SourceUnsupported as reason:
            refused[ref] = str(reason)
    return sources, refused, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package")
    parser.add_argument("--path", action="append", default=[], help="a folder to put on the path")
    args = parser.parse_args(argv)
    sys.path[:0] = args.path
    sources, refused, failed = capture(args.package)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([*args.path, str(ROOT), env.get("PYTHONPATH", "")])
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", REBUILD, args.package], input=json.dumps(sources), text=True,
                          capture_output=True, env=env, timeout=600)
    if proc.returncode:
        print(proc.stderr, file=sys.stderr)
        return 1
    rebuilt = json.loads(proc.stdout.splitlines()[-1])
    print(f"{args.package}: {len(sources)} of {len(sources) + len(refused)} autotuned kernels captured "
          f"({failed} modules did not import here); rebuilt in a fresh process in {rebuilt['seconds']:.2f} s "
          f"({time.perf_counter() - began:.2f} s with its start), importing {rebuilt['imported'] or 'neither torch nor it'}; "
          f"cache keys the library's: {rebuilt['same']} of {len(sources)}")
    for ref, reason in refused.items():
        print(f"  left to the library's import: {ref}: {reason}")
    return 0 if rebuilt["same"] == len(sources) else 1


if __name__ == "__main__":
    sys.exit(main())
