"""``RunStats``: what one ``doit tune`` measures as it runs (counts, spans, waits, worker seconds),
a record of its own so that the stages write it and the summary, the run log and the progress
read it, none of them the run's session."""
from __future__ import annotations

import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from aot_tune.runs.progress import Progress

#: When this module was imported (early in a command: the commands import it), by the wall clock
#: and by the process's own CPU time.
_IMPORTED = (time.time(), time.process_time())


@dataclass
class RunStats:
    """Counters are by outcome or by kind; ``seconds`` are worker seconds by kind (``compile``,
    ``compiling``, ``device held``, ``measured``, ``device <step>``...);
    ``spans`` each stage's [first start, last end] in ``time.time()``. The fields after
    ``progress`` describe the run around the stages and are set when it ends."""

    specialized: Counter[str] = field(default_factory=Counter)   # launches, specializations
    compile_status: Counter[str] = field(default_factory=Counter)
    bench_status: Counter[str] = field(default_factory=Counter)
    baseline_status: Counter[str] = field(default_factory=Counter)
    finals: Counter[str] = field(default_factory=Counter)  # shapes with finals, configs timed again in them
    seconds: Counter[str] = field(default_factory=Counter)
    spans: dict[str, list[float]] = field(default_factory=dict)
    searched: dict[str, Counter[str]] = field(default_factory=dict)  # strategy and budget -> shapes, configs, seconds
    cache_hits: int = 0
    cache_misses: int = 0
    batches: int = 0  # the batches benches sent to device workers
    compiled_on_demand: int = 0  # compiles the budgeted searches ran as they reached their configs
    progress: dict[str, Progress] = field(default_factory=dict)
    device: str = ""
    backend: str = ""
    kernels: list[str] = field(default_factory=list)
    devices: int = 1  # of the run's device model
    cuda: bool = False  # whether any device of the run is a GPU
    compile_jobs: int = 1
    on_demand_candidates: int = 0  # compiles the budgeted searches could have asked for
    on_demand_never: int = 0  # of which none landed
    given_up: int = 0  # straggler compiles no bench waited for
    devices_started_at: float | None = None  # the local device workers: asked to start, up (None: a cluster's)
    devices_ready_at: float | None = None
    fork_server_ready_at: float | None = None
    predicted_s: float | None = None  # what the run predicted at its start (None: nothing)
    predicted: dict[str, float] = field(default_factory=dict)
    estimates: dict[str, float] = field(default_factory=dict)  # the per-unit values the prediction took
    toolchain: str = ""  # "triton 3.9.0, torch 2.13.0"
    launch_s: float = 0.0  # the command's start before the run began
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def span(self, stage: str, start: float, end: float) -> None:
        """Widen ``stage``'s span to cover [start, end]; stages run on many threads."""
        with self._lock:
            span = self.spans.setdefault(stage, [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)

    @property
    def timed_s(self) -> float:
        """The seconds of timed kernel launches, the configs' and the baselines'."""
        return self.seconds["measured"] + self.seconds["measured baselines"]


def process_age_s() -> float:
    """How long ago this command started (its interpreter's start, imports, the manifest read
    before a run begins). The process's own start (Linux's /proc) is not the command's where a
    shell ran other work first and then replaced itself with the command: ``bash -c "pip install
    ... && doit tune"`` runs doit in bash's own process (its last command is exec'd), whose start
    was before the install (41 s before, in a fresh virtual environment). So the age counts from
    this module's import, plus the CPU time the process had used before it (the interpreter's
    start and the first imports; a shell waiting for its children uses next to none), and never
    more than the process's age where the system tells it (only Linux's /proc is read)."""
    wall, cpu = _IMPORTED
    age = cpu + time.time() - wall
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            started = int(stat.read().rpartition(")")[2].split()[19]) / os.sysconf("SC_CLK_TCK")
            age = min(age, float(uptime.read().split()[0]) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    return max(0.0, age)
