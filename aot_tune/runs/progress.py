"""Progress lines for long stages: done/total, elapsed and an estimate of what is left; and
``eprint``, the run's other lines, on the real stderr like them (doit captures ``sys.stderr``).

With the run's prediction (aot_tune.pipeline.forecast) the estimate is the predicted seconds of
the tasks left, spread over the stage's lanes (compile workers, devices), scaled by how long the
finished tasks took against their prediction: a bench stage whose first tasks waited for
compiles no longer reads as slow. Without one it is elapsed / done x left.
"""
from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping

MIN_INTERVAL_S = 2.0


class Progress:
    """Thread-safe; prints at most every MIN_INTERVAL_S seconds, and always the last step.
    ``expected``: the predicted seconds of each of the stage's tasks (by name), run ``lanes`` at a time."""

    def __init__(self, stage: str, total: int, stream=None, expected: Mapping[str, float] | None = None,
                 lanes: int = 1) -> None:
        self.stage = stage
        self.total = total
        self.done = 0
        self._stream = stream or sys.__stderr__
        self._start = time.monotonic()
        self._last_print = 0.0
        self._lock = threading.Lock()
        self._expected = dict(expected or {})
        self._lanes = max(1, lanes)
        self._took: dict[str, float] = {}  # finished tasks with a prediction -> their seconds

    def advance(self, note: str = "", task: str = "", seconds: float | None = None) -> None:
        """One task done; ``task`` and the ``seconds`` it took (its own, not its waits) tell the estimate."""
        with self._lock:
            self.done += 1
            self.total = max(self.total, self.done)  # a task the up-front count did not foresee
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
        return f"{text}  {note}" if note else text

    def left_s(self, elapsed: float) -> float:
        """The estimate of the seconds left (see the module doc)."""
        left = [s for task, s in self._expected.items() if task not in self._took]
        if not self._expected or not left:
            return elapsed / max(self.done, 1) * (self.total - self.done)
        predicted = sum(self._expected[task] for task in self._took)
        took = sum(self._took.values())
        scale = took / predicted if predicted > 0 and took > 0 else 1.0
        return max(sum(left) / self._lanes, max(left)) * scale


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def eprint(message: str) -> None:
    print(message, file=sys.__stderr__, flush=True)
