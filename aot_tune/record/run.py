"""``aot_tune record -- COMMAND``: the command run with every Triton autotuner in its Python
processes watched (the ``boot`` folder's ``sitecustomize`` starts the hook), then what it
recorded folded into tuning.yaml and ``recordings/``.

The command runs as it would alone, its output and exit status passed through; what it recorded
before failing is kept. The hook's raw lines go to ``.aot_tune/record/`` beside the manifest.
"""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from aot_tune.errors import TuneError
from aot_tune.record.capture import RECORD_FILE_ENV
from aot_tune.record.entries import Folded, fold, read_raw

BOOT = Path(__file__).resolve().parent / "boot"
WORK = Path(".aot_tune") / "record"


@dataclass
class Recorded:
    returncode: int
    launches: int
    kernels: int
    folded: Folded
    refused: list[str]
    seconds: float
    #: Kernels whose stages will import their library (no Triton source of their own), and why.
    imported: list[str] = field(default_factory=list)


def record(command: Sequence[str], manifest: str | os.PathLike) -> Recorded:
    """Run ``command`` with recording on, then fold its launches into ``manifest``."""
    if not command:
        raise TuneError("record needs the command to run, e.g. aot_tune record -- python train_step.py")
    manifest = Path(manifest)
    raw = manifest.parent / WORK / f"{os.getpid()}-{time.time_ns()}.jsonl"
    raw.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env[RECORD_FILE_ENV] = str(raw)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BOOT), _package_parent(), env.get("PYTHONPATH")]))
    started = time.perf_counter()
    try:
        returncode = subprocess.run(list(command), env=env).returncode
    except FileNotFoundError:
        raise TuneError(f"record: no command {command[0]!r}; fix: check its name and PATH") from None
    seconds = time.perf_counter() - started
    found = read_raw(raw)
    folded = fold(manifest, found.kernels, found.target)
    raw.unlink(missing_ok=True)
    launches = sum(len(k.launches) for k in found.kernels)
    imported = [f"{k.ref}: {k.source_refused}" for k in found.kernels if k.source_refused]
    return Recorded(returncode, launches, len(found.kernels), folded, found.refused, seconds, imported)


def _package_parent() -> str:
    """Where this aot_tune is imported from, so the recorded processes import the same one."""
    import aot_tune

    return str(Path(aot_tune.__file__).resolve().parent.parent)


def main_lines(result: Recorded, manifest: str) -> list[str]:
    """What ``aot_tune record`` prints once the command has run."""
    lines = [f"aot_tune record: {result.launches} distinct launch{'es' if result.launches != 1 else ''} of "
             f"{result.kernels} autotuned kernel{'s' if result.kernels != 1 else ''} in {result.seconds:.1f} s"
             + (f" (the command exited {result.returncode}; what it ran is kept)" if result.returncode else "")]
    lines += [f"  {line}" for line in result.folded.lines()]
    lines += [f"  left out: {why}" for why in result.refused]
    lines += [f"  tuned by importing its library (no Triton source of its own): {why}" for why in result.imported]
    if result.folded.added:
        lines.append(f"  {manifest} and recordings/ updated; next: doit tune")
    elif result.folded.timed:
        lines.append(f"  recordings/ updated; {manifest} already holds every launch")
    elif result.launches:
        lines.append(f"  nothing new: {manifest} already holds every launch")
    return lines
