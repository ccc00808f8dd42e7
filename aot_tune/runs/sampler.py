"""Where the tuning process's threads spend a run, for ``AOT_TUNE_PROFILE=DIR doit tune``.

cProfile follows one thread, and the tuning process runs on many: doit's task threads (the
benches), the compile queue's threads, the device pool's. A sampler reads every thread's stack
every ``INTERVAL_S`` and leaves ``DIR/tune-<pid>.txt`` when the run ends: per thread (numbers in
its name folded) and place in aot_tune's code (the innermost ``DEPTH`` frames there), the seconds
sampled there. On a 4-GPU host this showed the bench threads 65 s waiting for their batches,
60 s polling for compiles, and under 4 s in their own work while holding a device.
"""
from __future__ import annotations

import collections
import contextlib
import os
import re
import sys
import threading
from pathlib import Path
from typing import Iterator

INTERVAL_S = 0.01
DEPTH = 4
LINES = 300
_PACKAGE = str(Path(__file__).resolve().parents[1])  # aot_tune/


class ThreadSampler:
    def __init__(self, folder: str, interval_s: float = INTERVAL_S) -> None:
        self.folder, self.interval_s = folder, interval_s
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="aot_tune-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> Path:
        """Stop sampling and write the file; its path."""
        self._stop.set()
        self._thread.join()
        os.makedirs(self.folder, exist_ok=True)
        path = Path(self.folder) / f"tune-{os.getpid()}.txt"
        lines = [f"{count * self.interval_s:9.2f}s  {thread:40s} {place}"
                 for (thread, place), count in self.counts.most_common(LINES)]
        path.write_text(f"# seconds sampled (every {self.interval_s * 1e3:.0f} ms), thread, where in aot_tune\n"
                        + "\n".join(lines) + "\n")
        return path

    def _sample(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval_s):
            names = {thread.ident: thread.name for thread in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident != me:
                    self.counts[(re.sub(r"\d+", "N", names.get(ident, "?")), _where(frame))] += 1


#: a code object's file -> its path inside aot_tune ("" outside it), resolved once per file
_INSIDE: dict[str, str] = {}


def _inside(filename: str) -> str:
    inside = _INSIDE.get(filename)
    if inside is None:
        real = os.path.realpath(filename)  # an editable or symlinked install names files its own way
        inside = _INSIDE[filename] = os.path.relpath(real, _PACKAGE) if real.startswith(_PACKAGE + os.sep) else ""
    return inside


def _where(frame) -> str:
    """The innermost ``DEPTH`` frames in aot_tune's code, innermost first ("-" for none)."""
    places = []
    while frame is not None and len(places) < DEPTH:
        inside = _inside(frame.f_code.co_filename)
        if inside:
            places.append(f"{inside}:{frame.f_code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return " < ".join(places) or "-"


@contextlib.contextmanager
def sampled(folder: str) -> Iterator[None]:
    """Sample the process's threads while the block runs, if ``folder`` is set."""
    if not folder:
        yield
        return
    sampler = ThreadSampler(folder)
    sampler.start()
    try:
        yield
    finally:
        sampler.stop()
