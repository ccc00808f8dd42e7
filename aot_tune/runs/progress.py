"""Progress lines for long stages: done/total, elapsed and an estimate of what is left, of the
stage and of the whole run; and ``eprint``, the run's other lines, on the real stderr like them
(doit captures ``sys.stderr``).

With the run's prediction (aot_tune.pipeline.forecast) a stage's estimate is the predicted seconds
of its tasks left, spread over the stage's lanes (compile workers, devices), scaled by how long
its finished tasks took against their prediction, the kernel's own where any finished
(``Progress.scale``: the first task of each lane is left out, since a worker's first compile also
warms Triton up and a device's first bench loads its kernels and builds Triton's launchers): a
bench stage whose first tasks waited for compiles no longer reads as slow, and a machine that
compiles twice as slow as predicted reads so after its first compiles. A task that has started
counts only what is left of its prediction, at least ``RUNNING_FLOOR`` of it: the last slow
compile of a stage, 8 s into its predicted 8 s, leaves about nothing, not 8 s; one that outran
the pace its kernel's finished tasks set (below 1) goes by its unscaled prediction. How far it has
come is its wall time since ``start`` (a compile), or the seconds of its own it reported last
(``spent``: a bench task's device time held, since streaming benches wait for compiles without a
device, most of them at once, and a task's wall time says nothing of its measurements). A bench
task that has measured some of the configs predicted for it (``measurements``) has the rest of
them left, that share of its scaled prediction (at least ``RUNNING_FLOOR`` of it): its device
time says less, since a device that measures faster than predicted has done more than its
seconds tell (fla-core's l2norm under the interpreter: 0.03 s a measurement against 0.1
predicted, and the run's estimate 37-61% long once the benches had measured most of their
configs while the compiles landed). Without a prediction it is elapsed / done x left.

The run's estimate (``RunClock``) follows the stages as they overlap: while compiles are left,
the later of the compile stage's estimate with what the benches add after the last compile, and
the devices' predicted readiness and the bench stage's estimate of their work left, the tail
scaled as the finished benches tell; then the rest (merge, generate, the exporters' imports:
as predicted). Once the compiles are done, the bench stage's estimate and the rest.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping

MIN_INTERVAL_S = 2.0
#: The least share of its predicted seconds a running task is still expected to take, however
#: long it has run (one past its prediction is not about to end).
RUNNING_FLOOR = 0.1


class Progress:
    """Thread-safe; prints at most every MIN_INTERVAL_S seconds, and always the last step.
    ``expected``: the predicted seconds of each of the stage's tasks (by name), run ``lanes`` at a
    time; ``run``: the run's clock, whose estimate the line adds."""

    def __init__(self, stage: str, total: int, stream=None, expected: Mapping[str, float] | None = None,
                 lanes: int = 1, run: "RunClock | None" = None, measurements: Mapping[str, int] | None = None) -> None:
        self.stage = stage
        self.total = total
        self.done = 0
        self._stream = stream or sys.__stderr__
        self._start = time.monotonic()
        self._last_print = 0.0
        self._lock = threading.Lock()
        self._expected = dict(expected or {})
        self._lanes = max(1, lanes)
        self._took: dict[str, float] = {}  # finished tasks with a prediction -> their seconds, in order
        self._started: dict[str, float] = {}  # running tasks -> when they started (time.monotonic())
        self._spent: dict[str, float] = {}  # running tasks -> the seconds of their own they reported so far
        self._planned = dict(measurements or {})  # bench tasks -> the measurements predicted for them
        self._measured: dict[str, int] = {}  # running bench tasks -> their measurements so far
        self.run = run
        if run is not None:
            run.stages[stage] = self

    def start(self, task: str) -> None:
        """``task`` runs from now on (a compile handed to its worker)."""
        with self._lock:
            self._started[task] = time.monotonic()

    def spent(self, task: str, seconds: float, measured: int | None = None) -> None:
        """``task`` runs and has spent ``seconds`` of its own so far (a bench: its device time held),
        and made ``measured`` of its measurements."""
        with self._lock:
            self._spent[task] = seconds
            if measured is not None:
                self._measured[task] = measured

    def advance(self, note: str = "", task: str = "", seconds: float | None = None) -> None:
        """One task done; ``task`` and the ``seconds`` it took (its own, not its waits) tell the estimate."""
        with self._lock:
            self.done += 1
            self.total = max(self.total, self.done)  # a task the up-front count did not foresee
            self._started.pop(task, None)
            self._spent.pop(task, None)
            self._measured.pop(task, None)
            if task in self._expected and seconds is not None:
                self._took[task] = seconds
            now = time.monotonic()
            if self.done < self.total and now - self._last_print < MIN_INTERVAL_S:
                return
            self._last_print = now
            self._stream.write(self.line(now, note) + "\n")
            self._stream.flush()

    def line(self, now: float, note: str = "") -> str:
        elapsed = now - self._start
        text = f"[{self.stage}] {self.done}/{self.total} done, {_duration(elapsed)} elapsed"
        if 0 < self.done < self.total:
            text += f", about {_duration(self.left_s(elapsed))} left"
            run = self.run.left_s() if self.run is not None else None
            if run is not None:
                text += f" (the run: about {_duration(run)})"
        return f"{text}  {note}" if note else text

    @property
    def predicted(self) -> bool:
        """Whether the stage's tasks come with the run's prediction (else the estimate is a pace)."""
        return bool(self._expected)

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    def left_now(self) -> float:
        return self.left_s(time.monotonic() - self._start)

    @property
    def started(self) -> float:
        """When the stage began (``time.monotonic()``)."""
        return self._start

    def scale(self, group: str | None = None) -> float:
        """How long the finished tasks took against their prediction: their seconds over their
        predicted seconds, without each lane's first task (a worker's first compile warms Triton
        up, a device's first bench loads its kernels and builds Triton's launchers); 1 until others finished. With
        ``group`` (a task name's kernel), of that kernel's tasks where any finished: kernels are
        mispredicted each their own way (a compile's seconds follow the kernel's code); else the
        others' pace where it is slower than predicted, and 1 where it is faster."""
        took = list(self._took.copy().items())[self._lanes:]  # another stage's line reads it too, unlocked
        own = group is not None and any(_group(task) == group for task, _ in took)
        if own:
            took = [(task, seconds) for task, seconds in took if _group(task) == group]
        predicted = sum(self._expected[task] for task, _ in took)
        spent = sum(seconds for _, seconds in took)
        pace = spent / predicted if predicted > 0 and spent > 0 else 1.0
        # Other kernels' pace slows a kernel none of whose tasks finished, never speeds it up: the
        # first tasks to finish are those that ran faster than predicted (fla-core's slowest kernel
        # compiles last, at 1.2x its prediction, while the others ran at 0.4-0.6x theirs).
        return pace if own or group is None else max(pace, 1.0)

    def left_s(self, elapsed: float) -> float:
        """The estimate of the seconds left (see the module doc)."""
        took = self._took.copy()
        left = [(task, s) for task, s in self._expected.items() if task not in took]
        if not self._expected or not left:
            return elapsed / max(self.done, 1) * (self.total - self.done)
        scales = {group: self.scale(group) for group in {_group(task) for task, _ in left}}
        started, spent, now = self._started.copy(), self._spent.copy(), time.monotonic()
        ran = {task: spent[task] if task in spent else now - started[task] for task in {*started, *spent}}
        measured = self._measured.copy()
        seconds = [_unmeasured(s * scales[_group(task)], measured[task], self._planned[task])
                   if measured.get(task) and self._planned.get(task) else
                   _still(s, s * scales[_group(task)], ran.get(task, 0.0)) for task, s in left]
        return max(sum(seconds) / self._lanes, max(seconds))


def _still(predicted: float, scaled: float, ran: float) -> float:
    """What is left of a task predicted at ``predicted`` seconds, ``scaled`` by its kernel's pace,
    that has run ``ran``. One that outran its scaled prediction is not as fast as the tasks that
    set the pace (they finish first: fla-core's smallest config of its slowest kernel, at half the
    kernel's recorded compile, while its largest runs on), so it goes by its own prediction again."""
    expected = scaled if ran <= scaled else max(scaled, predicted)
    return max(expected - ran, RUNNING_FLOOR * expected)


def _unmeasured(scaled: float, measured: int, planned: int) -> float:
    """What is left of a bench task predicted at ``scaled`` seconds that has made ``measured`` of
    its ``planned`` measurements."""
    return max(scaled * (1 - measured / planned), RUNNING_FLOOR * scaled)


def _group(task: str) -> str:
    """A task's kernel: ``compile:KERNEL:...``, ``bench:KERNEL:...``."""
    return task.split(":", 2)[1] if task.count(":") >= 2 else ""


class RunClock:
    """The run's estimate of its seconds left, from its stages' ``Progress`` and its prediction
    (aot_tune.pipeline.forecast's): ``bench_after_s`` what the benches add after the last compile,
    ``rest_s`` what follows the stages (merge, generate, the exit; not the planning before them,
    which the progress lines come after). With ``device_wait_s`` (when the device workers are
    ready for a first bench, from the compiles' start) and ``tail_s`` (what the benches add after
    the last compile however early they were), the benches end at the later of two: the compiles'
    end and the tail, and the devices' readiness and the device work left (the bench stage's
    estimate, which counts the device time each running bench task held: a device that waits for
    compiles has not done the work the time since its readiness would say)."""

    def __init__(self, bench_after_s: float, rest_s: float, device_wait_s: float | None = None,
                 tail_s: float = 0.0) -> None:
        self.bench_after_s = bench_after_s
        self.rest_s = rest_s
        self.device_wait_s = device_wait_s
        self.tail_s = tail_s
        self.stages: dict[str, Progress] = {}

    def left_s(self) -> float | None:
        """None before any stage has a task to count."""
        compiles, benches = self.stages.get("compile"), self.stages.get("bench")
        bench_scale = benches.scale() if benches is not None else 1.0
        if compiles is not None and compiles.total and not compiles.finished:
            compiled = compiles.left_now()
            if benches is None or not benches.total or benches.finished:
                return compiled + self.rest_s
            if self.device_wait_s is None or not benches.predicted:
                return compiled + self.bench_after_s * bench_scale + self.rest_s
            ready_in = max(0.0, self.device_wait_s - (time.monotonic() - compiles.started))
            return max(compiled + self.tail_s * bench_scale, ready_in + benches.left_now()) + self.rest_s
        if benches is not None and benches.total and not benches.finished:
            return benches.left_now() + self.rest_s
        return None


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def eprint(message: str) -> None:
    print(message, file=sys.__stderr__, flush=True)
