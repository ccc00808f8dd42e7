"""Progress lines for long stages: done/total, elapsed and an estimate of what is left."""
from __future__ import annotations

import sys
import threading
import time

MIN_INTERVAL_S = 2.0


class Progress:
    """Thread-safe; prints at most every MIN_INTERVAL_S seconds, and always the last step."""

    def __init__(self, stage: str, total: int, stream=None) -> None:
        self.stage = stage
        self.total = total
        self.done = 0
        self._stream = stream or sys.__stderr__
        self._start = time.monotonic()
        self._last_print = 0.0
        self._lock = threading.Lock()

    def advance(self, note: str = "") -> None:
        with self._lock:
            self.done += 1
            self.total = max(self.total, self.done)  # a task the up-front count did not foresee
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
            text += f", about {_duration(elapsed / self.done * (self.total - self.done))} left"
        return f"{text}  {note}" if note else text


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"
