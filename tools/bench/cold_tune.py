"""A cold ``doit tune`` in a scratch project, as the workload tools run it: a copy of kernels/ (and
any extra files), the given manifest, no caches and no Triton cache; prints the run's summary
lines (the bench share, the end-to-end line) and its wall time."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
SUMMARY_PREFIXES = ("[specialize]", "specialize:", "compile:", "bench", "baselines:", "aot_tune:", "end to end",
                    "ERROR")


def main(doc: str, manifest: Callable[[str], str], prefix: str, extra_files: tuple[Path, ...] = ()) -> int:
    """The command line of a workload tool: ``--print-manifest``, ``--keep DIR``, ``--target``,
    ``--backend``; ``manifest(target)`` is the workload's tuning.yaml."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args()
    if args.print_manifest:
        print(manifest(args.target), end="")
        return 0
    return run(manifest(args.target), prefix, args, extra_files)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="sm90", help="the GPU's target [sm90]")
    parser.add_argument("--print-manifest", action="store_true", help="print the manifest and exit")
    parser.add_argument("--keep", type=Path, help="build the project in this folder and keep it")
    parser.add_argument("--backend", default="auto", help="--bench-backend of doit tune [auto]")


def run(manifest_text: str, prefix: str, args: argparse.Namespace, extra_files: tuple[Path, ...] = ()) -> int:
    """A cold ``doit tune`` of ``manifest_text`` in a scratch project; prints its summary lines."""
    with tempfile.TemporaryDirectory(prefix=f"aot_tune-{prefix}-") as tmp:
        project = args.keep.resolve() if args.keep else Path(tmp) / "project"
        project.mkdir(parents=True, exist_ok=True)
        shutil.copytree(ROOT / "kernels", project / "kernels", ignore=shutil.ignore_patterns("__pycache__"),
                        dirs_exist_ok=True)
        for extra in extra_files:
            shutil.copy(extra, project / extra.name)
        (project / "tuning.yaml").write_text(manifest_text)
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        env["TRITON_CACHE_DIR"] = str(project / ".triton-cache")
        began = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "doit", "tune", "--bench-backend", args.backend], cwd=project,
                              env=env, capture_output=True, text=True)
        wall = time.perf_counter() - began
        summary = [line for line in proc.stderr.splitlines() if line.startswith(SUMMARY_PREFIXES)]
        print("\n".join(summary) or proc.stderr[-4000:])
        print(f"cold doit tune: {wall:.1f} s wall (with the process start), exit {proc.returncode}")
        return proc.returncode
