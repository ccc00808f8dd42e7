"""The tuning process's threads sampled where asked (``AOT_TUNE_PROFILE``): which thread spent
how long where in aot_tune's code."""
from __future__ import annotations

import os
import threading
import time

from aot_tune.pipeline.compile_queue import CompileQueue
from aot_tune.runs.sampler import sampled


def test_the_sampler_says_where_each_thread_waited(tmp_path):
    with sampled(""):  # not asked: nothing written
        pass
    assert not list(tmp_path.iterdir())

    release = threading.Event()
    queue = CompileQueue(1)
    with sampled(str(tmp_path / "prof")):
        queue.put("c1", "gemm", 1.0, lambda: release.wait(10))
        time.sleep(0.3)  # the compile thread sits in its job, under the queue's worker loop
        release.set()
        queue.shutdown()
    (written,) = (tmp_path / "prof").iterdir()
    assert written.name == f"tune-{os.getpid()}.txt"
    rows = [line.split(None, 2) for line in written.read_text().splitlines()[1:]]
    here = [float(seconds.rstrip("s")) for seconds, thread, place in rows
            if thread == "aot_tune-compile-N" and place.startswith("pipeline/compile_queue.py:_work:")]
    assert here and 0.1 < sum(here) < 5, rows
