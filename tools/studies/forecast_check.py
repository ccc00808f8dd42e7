"""How well a fresh project's run is foretold: ``tune --dry-run``'s prediction against the real
run's wall time (the command's, as ``time`` shows it), and the progress lines' estimate of what is
left of the run against when it really ended.

    python -m tools.studies.forecast_check TEMPLATE [--path DIR]... [--history FILE] [KERNEL...]

Copies TEMPLATE (a folder holding a tuning.yaml and the modules it names) into a fresh folder
(no .aot_tune/, no caches), runs ``python -m aot_tune tune --dry-run``, then the real run with
the same arguments, timestamping each line it prints. ``--path`` puts a folder on PYTHONPATH
(an unpacked library); ``--history`` sets AOT_TUNE_HISTORY (the machine's history: a file, or
off), else the environment's is used; ``--log FILE`` keeps the run's lines, each with its second
(the run summary's split of the device time is there). Prints the prediction, the wall time and their ratio, and
for each progress line, the run's estimate against the seconds that were left; the last line is
the largest error of those from ``--from`` of the work done on (0.2: the tasks the lines count
done, of the compiles and bench tasks the dry run counted).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_LEFT = re.compile(r"\(the run: about ([0-9hms.]+)\)")
DONE = re.compile(r"^\[(\w+)\] (\d+)/(\d+) done")


def seconds(duration: str) -> float:
    """A progress line's duration (``12.5s``, ``3m04s``, ``1h02m``) in seconds."""
    found = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:([\d.]+)s)?", duration)
    hours, minutes, secs = (float(g) if g else 0.0 for g in found.groups())
    return hours * 3600 + minutes * 60 + secs


@dataclass(frozen=True)
class Estimate:
    """One progress line's estimate of the run's end: at ``at`` seconds, with ``share`` of the
    tasks done, it said ``said`` seconds were left, and ``left`` were."""
    at: float
    share: float
    said: float
    left: float
    text: str

    @property
    def error(self) -> float:
        return self.said / self.left - 1


def estimates(lines: list[tuple[float, str]], wall: float, tasks: int) -> list[Estimate]:
    """The run's estimates in its timestamped stderr ``lines``; the share of the work done is the
    tasks the stages' lines count done, of ``tasks`` (the dry run's count) or of the stages'
    totals where they grew past it."""
    found, counts = [], {}  # stage -> its last line's done, total
    for at, text in lines:
        done = DONE.match(text)
        if done:
            counts[done.group(1)] = (int(done.group(2)), int(done.group(3)))
        said = RUN_LEFT.search(text)
        if said and at < wall:
            share = sum(d for d, _ in counts.values()) / max(1, tasks, sum(t for _, t in counts.values()))
            found.append(Estimate(at, share, seconds(said.group(1)), wall - at, text))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("template", type=Path)
    parser.add_argument("kernels", nargs="*")
    parser.add_argument("--path", action="append", default=[], help="a folder to put on PYTHONPATH")
    parser.add_argument("--history", help="AOT_TUNE_HISTORY for both runs (a file, or off)")
    parser.add_argument("--backend", default="interpreter")
    parser.add_argument("--project", type=Path, help="where to copy the template (default: a fresh temp folder)")
    parser.add_argument("--log", type=Path, help="write the run's lines here, each with its second")
    parser.add_argument("--from", dest="share", type=float, default=0.2, help="the share of the work done")
    args = parser.parse_intermixed_args()
    project = args.project or Path(tempfile.mkdtemp(prefix="forecast-check-"))
    if project.exists() and any(project.iterdir()):
        sys.exit(f"{project} is not empty: pass a fresh folder")
    shutil.copytree(args.template, project, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", ".aot_tune"))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(project), *args.path, str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if args.history is not None:
        env["AOT_TUNE_HISTORY"] = args.history
    command = [sys.executable, "-m", "aot_tune", "tune", "--bench-backend", args.backend]
    dry = subprocess.run([*command, "--dry-run", *args.kernels], cwd=project, env=env, capture_output=True, text=True)
    command += args.kernels
    if dry.returncode != 0:
        sys.exit(f"the dry run failed:\n{dry.stdout}{dry.stderr}")
    last = dry.stdout.strip().splitlines()[-1]
    # the run's tasks, as the dry run counts them: each kernel's stale compiles and bench tasks
    tasks = sum(int(m.group(1)) for m in re.finditer(r"^  (?:compile|bench) +(\d+) of ", dry.stdout, re.M))
    predicted = float(last.split()[1])
    began = time.monotonic()
    lines: list[tuple[float, str]] = []
    with subprocess.Popen(command, cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True) as child:
        for line in child.stderr:
            lines.append((time.monotonic() - began, line.rstrip()))
    wall = time.monotonic() - began
    if args.log is not None:
        args.log.write_text("".join(f"{at:7.2f} {text}\n" for at, text in lines) + f"{wall:7.2f} (exit {child.returncode})\n")
    if child.returncode != 0:
        sys.exit(f"the run failed ({child.returncode}):\n" + "\n".join(text for _, text in lines[-30:]))
    print(f"{project}: {last}")
    print(f"predicted {predicted:.1f} s, took {wall:.1f} s: ratio {predicted / wall:.2f}")
    errors = []
    for line in estimates(lines, wall, tasks):
        if line.share >= args.share:
            errors.append((line.error, line.left))
        print(f"  at {line.at:5.1f} s, {line.share:4.0%} of the tasks done: the run about {line.said:5.1f} s "
              f"left, {line.left:5.1f} s were: {line.error:+.0%}   {line.text.split(' done')[0]}")
    for least in (0.0, 5.0):
        judged = [e for e, left in errors if left >= least]
        print(f"progress estimate from {args.share:.0%} of the work done" + (f", {least:.0f} s or more left" if least
                                                                               else "")
              + ": largest error " + (f"{max(judged, key=abs):+.0%} over {len(judged)} lines" if judged else
                                      "none: no line"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
