"""The forecast's overheads and rates (aot_tune.pipeline.forecast), calibrated from earlier runs:
first this project's own (``.aot_tune/runs.json``, the last ``CALIBRATION_RUNS`` on the backend),
then this machine's runs of any project (aot_tune.runs.history, the last ``MACHINE_RUNS`` of the
closest comparable key), then the documented defaults below; each part on its own, so a fresh
project takes what this machine showed for other kernels and its own runs take over as they come.

``observed`` reads what one logged run measured, per part; ``remember`` adds a finished run to the
machine's history with what its forecast predicted beside it. The interpreter's defaults are one
machine's CPU seconds: on another, they go at its pace (``machine_pace``), a short probe's time
against that machine's.
"""
from __future__ import annotations

import functools
import os
import statistics
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aot_tune.runs.history import CLOSENESS, HistoryEntry, MachineKey, append_history, comparable
from aot_tune.runs.log import STAGE_ORDER, RunRecord, time_split
from aot_tune.runs.progress import eprint

#: Defaults where no earlier run calibrates them, by backend. Start-up: the fork server's imports
#: took about 3 s on a 2-core CPU and 8-14 s on H100 and H200 hosts. Device workers, from when
#: they are asked for with the captures: spawned beside a server that imports torch
#: (aot_tune.bench.local.pool), 6.0-6.3 s on an H200 host whose server took 8 s; the
#: interpreter's, always spawned, about 2 s.
DEFAULT_STARTUP_S = {"cuda": 10.0, "interpreter": 4.0}
DEFAULT_DEVICE_STARTUP_S = {"cuda": 7.0, "interpreter": 2.0}
#: The same for a run whose compiles need no torch (every kernel rebuilt from its recorded source:
#: aot_tune.forking.start_server): the fork server imports Triton alone, started before the
#: planning, and is up when the captures begin on an H200 host (1.0 s on a 2-core CPU). The GPU
#: worker, spawned with the run (aot_tune.bench.local.early), is up 3.6-4.0 s after the pool
#: asks for it there (page cache dropped; 7.9-8.5 s when it was forked from the server and
#: imported torch only then).
DEFAULT_LIGHT_STARTUP_S = {"cuda": 0.5, "interpreter": 1.0}
DEFAULT_LIGHT_DEVICE_STARTUP_S = {"cuda": 4.0, "interpreter": 2.0}
#: A compile of a kernel with nothing recorded: 0.1-0.6 s for this repository's small kernels on a
#: 2-core CPU; on the H100 host, 16 at a time, 0.37 s a compile over the paper's GEMM space and
#: 0.31 s over this repository's manifest.
DEFAULT_COMPILE_S = 0.35
#: The same per KB of the kernel's code (aot_tune.build.imports.kernel_bytes), where its size is
#: known: on a 2-core CPU, 0.25-0.44 s a KB for this repository's kernels (0.3-1.5 KB) and 0.37
#: for three of fla-core's delta-rule kernels (3.5 KB on average, compiles of 0.3-6 s), whose
#: compiles the flat default put at a quarter of what they took.
DEFAULT_COMPILE_S_PER_KB = 0.35
#: A measurement beyond its timed launches: on a GPU, the check, probe, capture and load beside
#: ``warmup_ms``, which a batch's first config alone runs on its own launches (about 5 ms with
#: ``warmup_ms`` on the H100 host); on the interpreter, the whole measurement (0.042-0.066 s in six
#: fresh runs of fla-core's l2norm and this repository on a 2-core CPU).
DEFAULT_ENGINE_S = {"cuda": 0.004, "interpreter": 0.05}
#: A batch's input sets and the bench task's own work around it: 5 ms a batch on the H100 host
#: over the 832 batches of a budgeted run of the paper's whole GEMM benchmark; 2-3 ms on the
#: interpreter in those six runs.
DEFAULT_BATCH_S = {"cuda": 0.005, "interpreter": 0.003}
#: What no stage of a run covers: planning, merge and generate, 0.1-0.6 s for this repository's
#: kernels. The command's own start before the run is not calibrated: the forecasting process
#: measures its own (aot_tune.pipeline.forecast, aot_tune.runs.stats.process_age_s), as a dry run
#: starts as the run does; a run's start is what varies most between runs and machines (0.2-0.6 s
#: here, seconds on a GPU host's cold disk), and a run that counted it wrong once (45 s: a
#: shell's ``pip install`` before it) set the forecasts of other projects after it.
DEFAULT_UNSTAGED_S = 1.0
#: Of that, what follows the last stage (merge, generate, the exit): 0.3-0.4 s after fla-core's
#: workloads on the H100 host, whose time before the first stage took 6-8 s.
DEFAULT_REST_AFTER_S = 0.5
#: How a kernel library's import compares with its static estimate (aot_tune.build.imports, whose
#: constants are a quiet 2-core CPU's) where no earlier run says: on H200 hosts, 16 compile workers
#: importing fla-core's kernel modules at once on a fresh host took 5.2-6.6 s against 3.0 s
#: estimated, and the hosts' own calibration read 2.11 and 2.16 after one run (2026-11-28).
DEFAULT_IMPORT_RATIO = {"cuda": 2.0, "interpreter": 1.0}
#: The interpreter's defaults above are a 2-core CPU's, where this repository's and fla-core's
#: runs took 1.6-1.8x what they took on the 2-core CPU of 2026-12-01 (compiles 0.35 against
#: 0.19-0.20 s a KB, the workers' start-up 4.0 against 2.3-2.5 s, a measurement 0.05 against
#: 0.024-0.036 s, a kernel module's import 1.0 against 0.63 of its estimate); there the probe
#: (``probe_seconds``) took 0.021-0.022 s, so on the defaults' machine about 1.7 times that. A
#: machine with no run to calibrate a part takes that part's default at its pace: its probe's
#: time over this one. The GPU defaults are not scaled: the probe took 0.048 s on an H200 host
#: and 0.025-0.038 s on another lease of one, where the same cold run of fla-core's delta rule
#: took 18-20 s on both (its start-up is a cold disk's, its compiles run 16 at a time), and a
#: forecast at the second one's pace read -30% where the defaults as they are read -20%
#: (2026-12-02).
PROBE_REFERENCE_S = {"interpreter": 0.037}
#: A number here pins the pace instead of the probe (1: the defaults as they are; the tests' runs).
PACE_ENV = "AOT_TUNE_PACE"
PACE_BOUNDS = (0.2, 5.0)
#: Earlier runs of this project a calibration takes the median of, and of the machine's history.
CALIBRATION_RUNS = 5
MACHINE_RUNS = 10
#: Below this many predicted seconds an import's observed / predicted ratio is noise, not a rate.
IMPORT_RATIO_FLOOR_S = 0.5

#: What a logged run tells the model (``Calibration``'s fields that ``observed`` reads).
CALIBRATED = ("startup_s", "device_startup_s", "light_startup_s", "light_device_startup_s", "compile_s",
              "compile_s_per_kb", "engine_s", "engine_extra_s",
              "batch_s", "unstaged_s", "rest_after_s")


@dataclass(frozen=True)
class Calibration:
    """The model's overheads from earlier runs on one backend; None where no run told.
    ``compile_s_per_kb``: a compile's seconds per KB of the kernel's code (aot_tune.build.imports.
    kernel_bytes), which tells a kernel never compiled here from the others' compiles;
    ``import_ratio``: how long this machine's imports of kernel modules took against the static
    estimate (aot_tune.build.imports); ``sources``: per field, where it came from."""

    backend: str
    runs: int = 0  # of this project's
    startup_s: float | None = None
    device_startup_s: float | None = None
    compile_s: float | None = None
    compile_s_per_kb: float | None = None
    engine_s: float | None = None
    engine_extra_s: float | None = None  # on a GPU, beyond the warm-up: comparable across warmup_ms
    batch_s: float | None = None
    unstaged_s: float | None = None  # what no stage covers: planning, merge, generate
    rest_after_s: float | None = None  # of that, what follows the last stage
    import_ratio: float | None = None
    light_startup_s: float | None = None  # the two start-ups of runs whose compiles need no torch
    light_device_startup_s: float | None = None
    light: bool = False  # the run forecast compiles without torch: its start-ups are the light ones
    pace: float = 1.0  # how long this machine takes for the defaults' CPU seconds (machine_pace)
    machine_runs: int = 0  # of the machine's history
    closeness: int = 0  # of those (aot_tune.runs.history.MachineKey.closeness)
    sources: Mapping[str, str] = field(default_factory=dict)

    def startup(self) -> float:
        if self.light:
            return known(self.light_startup_s, self.pace * DEFAULT_LIGHT_STARTUP_S.get(self.backend, 5.0))
        return known(self.startup_s, self.pace * DEFAULT_STARTUP_S.get(self.backend, DEFAULT_STARTUP_S["cuda"]))

    def device_startup(self) -> float:
        if self.light:
            return known(self.light_device_startup_s, self.pace * DEFAULT_LIGHT_DEVICE_STARTUP_S.get(self.backend, 2.0))
        return known(self.device_startup_s, self.pace * DEFAULT_DEVICE_STARTUP_S.get(self.backend, 1.0))

    def compile(self, kernel_kb: float = 0.0) -> float:
        """A typical compile of a kernel of ``kernel_kb`` KB of code (0: not known), none of whose
        configs is recorded: from this project's runs, per KB where they tell it, else per
        compile; then likewise from the machine's history; else the default, per KB where the
        size is known."""
        for origin in ("project", "machine"):
            if kernel_kb > 0 and self.compile_s_per_kb is not None and self.sources.get("compile_s_per_kb") == origin:
                return self.compile_s_per_kb * kernel_kb
            if self.compile_s is not None and self.sources.get("compile_s") == origin:
                return self.compile_s
        if kernel_kb > 0 and self.compile_s_per_kb is not None:  # a calibration made without sources
            return self.compile_s_per_kb * kernel_kb
        if self.compile_s is not None:
            return self.compile_s
        return self.pace * (DEFAULT_COMPILE_S_PER_KB * kernel_kb if kernel_kb > 0 else DEFAULT_COMPILE_S)

    def engine(self) -> float:
        """A measurement's seconds beyond its timed launches; on a GPU, beyond the warm-up too
        (a batch's, which the forecast prices per batch), where runs told it."""
        if self.backend == "cuda":
            for origin in ("project", "machine", None):
                if self.engine_extra_s is not None and self.sources.get("engine_extra_s") == origin:
                    return self.engine_extra_s
                if self.engine_s is not None and self.sources.get("engine_s") == origin:
                    return self.engine_s
        elif self.engine_s is not None:
            return self.engine_s
        return self.pace * DEFAULT_ENGINE_S.get(self.backend, DEFAULT_ENGINE_S["interpreter"])

    def batch(self) -> float:
        return known(self.batch_s, self.pace * DEFAULT_BATCH_S.get(self.backend, DEFAULT_BATCH_S["cuda"]))

    def unstaged(self) -> float:
        return known(self.unstaged_s, self.pace * DEFAULT_UNSTAGED_S)

    def rest_after(self) -> float:
        """The part of ``unstaged`` after the last stage: what a run's progress lines still have ahead."""
        return min(self.unstaged(), known(self.rest_after_s, self.pace * DEFAULT_REST_AFTER_S))

    def imports(self, estimate_s: float) -> float:
        """The seconds an import estimated at ``estimate_s`` takes on this machine."""
        return estimate_s * known(self.import_ratio, self.pace * DEFAULT_IMPORT_RATIO.get(self.backend, 1.0))

    def described(self) -> str:
        """Where the calibration came from, for the dry run's last line."""
        told = []
        if self.runs:
            told.append(f"{self.runs} earlier run{'s' * (self.runs != 1)} on {self.backend} in .aot_tune/runs.json")
        if self.machine_runs and any(s == "machine" for s in self.sources.values()):
            told.append(f"{self.machine_runs} run{'s' * (self.machine_runs != 1)} in the machine's history "
                        f"({CLOSENESS[self.closeness]})")
        paced = f"; the defaults at this machine's pace, {self.pace:.2f}x theirs" if self.pace != 1.0 else ""
        if not told:
            return (f"uncalibrated: no earlier run on {self.backend} in .aot_tune/runs.json or the machine's "
                    f"history{paced}")
        return "calibrated from " + " and ".join(told) + paced


def calibrate(runs: Sequence[RunRecord], backend: str, history: Sequence[HistoryEntry] = (),
              key: MachineKey | None = None, light: bool = False) -> Calibration:
    """Per field, the median of what the last ``CALIBRATION_RUNS`` successful logged runs on
    ``backend`` observed (``observed``); where none told, of the machine's comparable runs.
    ``light``: for a run whose compiles need no torch."""
    told = [seen for seen in map(observed, [r for r in runs if r.backend == backend and r.ok]) if seen]
    told = told[-CALIBRATION_RUNS:]
    values: dict[str, float | None] = {name: median_of([s[name] for s in told if name in s]) for name in CALIBRATED}
    values["import_ratio"] = _ratio(told)
    sources = {name: "project" for name, value in values.items() if value is not None}
    machine: list[HistoryEntry] = []
    closeness = 0
    if history:
        key = key or MachineKey(backend, "", "", 0, 0)
        machine, closeness = comparable([h for h in history if h.key.backend == backend], key)
        machine = machine[-MACHINE_RUNS:]
        seen = [h.observed for h in machine]
        for name in (*CALIBRATED, "import_ratio"):
            if values[name] is None:
                values[name] = (_ratio(seen) if name == "import_ratio"
                                else median_of([s[name] for s in seen if name in s]))
                if values[name] is not None:
                    sources[name] = "machine"
    pace = machine_pace(backend) if any(value is None for value in values.values()) else 1.0
    return Calibration(backend, len(told), **values, light=light, pace=pace, machine_runs=len(machine),
                       closeness=closeness, sources=sources)


def observed(run: RunRecord) -> dict[str, float]:
    """What one logged run tells: the workers' start-up (``specialize start-up``; for a run whose
    compiles needed no torch ``light start-up``, kept apart), the device workers' start-up, seconds per compile and per KB of the compiled kernels' code (the run's
    ``compile_kb``: what the forecast took, over its compiles), a measurement's device seconds beyond its timed
    launches (on a GPU also beyond the warm-up the run's benches asked for, ``engine_extra_s``:
    comparable across projects' ``warmup_ms``), a batch's own seconds (the device held outside the worker's batches, and their
    input sets, less the kernel modules' import the first one paid), the kernel modules' import
    in the workers (the specialize step beyond the start-up and the captures) against its estimate
    (``import_s``, ``import_estimate_s``), the tuning process's own imports for the exporters
    (``main_import_s``), and the time no stage covers (``time_split``'s other) less those imports,
    and of it what followed the last stage (``rest_after_s``: merge, generate, the exit); not the
    command's start before the run (``launch_s``, which the forecast measures in its own process).
    Nothing from an entry that is not a run this version logs."""
    try:
        seconds = {name: float(value) for name, value in run.worker_seconds.items()}
        light = "light start-up" in seconds
        startup = seconds.get("light start-up") or seconds.get("specialize start-up") or \
            seconds.get("fork server start-up", 0.0)
        main_import = seconds.get("main imports", 0.0)
        prefix = "light_" if light else ""
        found = {f"{prefix}startup_s": startup, f"{prefix}device_startup_s": seconds.get("device start-up", 0.0),
                 "unstaged_s": max(0.0, float(time_split(run)["other"]) - main_import)}
        ends = [float(end) for stage, (_, end) in run.stages.items() if stage in STAGE_ORDER]
        if ends:
            found["rest_after_s"] = min(found["unstaged_s"], max(0.0, float(run.wall_s) - max(ends) - main_import))
        imported = 0.0
        if "specialize" in run.stages and (seconds.get("specialize start-up") or light):
            start, end = run.stages["specialize"]
            imported = max(0.0, float(end) - float(start) - startup - seconds.get("capture", 0.0) / max(1, run.jobs))
            found["import_s"] = imported
            if run.estimates.get("import_s"):
                found["import_estimate_s"] = float(run.estimates["import_s"])
        if main_import:
            found["main_import_s"] = main_import
        compiled = sum(int(n) for n in run.compile.values())
        if compiled and seconds.get("compiling"):
            found["compile_s"] = seconds["compiling"] / compiled
            if run.estimates.get("compile_kb"):
                found["compile_s_per_kb"] = found["compile_s"] / float(run.estimates["compile_kb"])
        measured = sum(int(n) for k, n in run.bench.items() if k != "invalid") + \
            sum(int(n) for n in run.baselines.values()) + int(run.finals.get("configs", 0))
        batches, inputs = seconds.get("device batches", 0.0), seconds.get("device inputs", 0.0)
        if measured and batches:
            timed = seconds.get("measured", 0.0) + seconds.get("measured baselines", 0.0)
            found["engine_s"] = max(0.0, batches - inputs - timed) / measured
            if run.backend == "cuda" and "warmup_s" in run.estimates:
                found["engine_extra_s"] = max(0.0, found["engine_s"] - float(run.estimates["warmup_s"]))
            if run.batches:
                held = seconds.get("device held", 0.0)
                found["batch_s"] = max(0.0, held - batches + max(0.0, inputs - imported)) / int(run.batches)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError):
        return {}
    return {name: value for name, value in found.items() if value > 0 or name in ("unstaged_s", "rest_after_s")}


def machine_key(run: RunRecord) -> MachineKey:
    return MachineKey(run.backend, run.device, run.toolchain, run.cpus or os.cpu_count() or 1, run.jobs)


def remember(run: RunRecord, path=None) -> bool:
    """Add a finished, successful run to the machine's history (aot_tune.runs.history): what it
    observed beside what it predicted. False when it is not added (failed, nothing observed, or
    the history is off)."""
    seen = observed(run) if run.ok else {}
    if not seen:
        return False
    predicted = {**{f"part {k}": float(v) for k, v in run.predicted.items()},
                 **{k: float(v) for k, v in run.estimates.items()}}
    if run.predicted_s is not None:
        predicted["wall_s"] = float(run.predicted_s)
    entry = HistoryEntry(machine_key(run), run.started_at, list(run.kernels), float(run.wall_s) + float(run.launch_s),
                         seen, predicted)
    return append_history(entry, path)


def _ratio(seen: Sequence[Mapping[str, float]]) -> float | None:
    """The median observed / estimated import seconds of the runs whose estimate was big enough to tell."""
    ratios = [s["import_s"] / s["import_estimate_s"] for s in seen
              if s.get("import_estimate_s", 0.0) >= IMPORT_RATIO_FLOOR_S and "import_s" in s]
    return median_of(ratios)


def machine_pace(backend: str) -> float:
    """How long this machine takes for what took a second where ``backend``'s defaults were
    measured: ``AOT_TUNE_PACE`` if set, else the probe's time over ``PROBE_REFERENCE_S`` (taken
    once a process, within ``PACE_BOUNDS``), else 1 (no reference for the backend)."""
    low, high = PACE_BOUNDS
    pinned = os.environ.get(PACE_ENV, "")
    if pinned:
        try:
            return min(max(float(pinned), low), high)
        except ValueError:
            _warn_once(f"aot_tune: warning: {PACE_ENV}={pinned!r} is not a number, so this machine's pace is "
                       f"measured instead (fix: a number, 1 for the defaults as they are, or unset it)")
    reference = PROBE_REFERENCE_S.get(backend)
    return 1.0 if reference is None else min(max(probe_seconds() / reference, low), high)


@functools.lru_cache(maxsize=None)
def _warn_once(line: str) -> None:
    eprint(line)


@functools.lru_cache(maxsize=1)
def probe_seconds() -> float:
    """A fixed piece of CPU work, timed: Python dict and string work (as in a module's import or
    the interpreter's kernels) and zlib over a text (native, branchy, as a compiler's passes),
    the least of three runs each, added: about 0.02 s on the 2-core CPU of PROBE_REFERENCE_S,
    twice that with both of its cores busy (as a run there would be too)."""
    text = " ".join(str(i * i % 10007) for i in range(30000)).encode()

    def python_work() -> int:
        table: dict[str, int] = {}
        for i in range(60000):
            key = f"k{i % 997}"
            table[key] = table.get(key, 0) + (i * 7) % 13
        return sum(table.values())

    def least(work) -> float:
        spans = []
        for _ in range(3):
            began = time.perf_counter()
            work()
            spans.append(time.perf_counter() - began)
        return min(spans)

    return least(python_work) + least(lambda: zlib.compress(text, 6))


def known(value: float | None, default: float) -> float:
    """``value``, or ``default`` where nothing told it."""
    return default if value is None else value


def median_of(values: Sequence[float]) -> float | None:
    """The median, or None for no values."""
    return statistics.median(values) if values else None
