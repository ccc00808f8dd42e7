"""The run summary's bench lines: the share of timed launches counts the configs' and the
baselines', and the split of the device time the benches held adds up to it."""
from __future__ import annotations

import re
from collections import Counter
from types import SimpleNamespace

from aot_tune.pipeline.summary import _bench_timing


def session(**seconds) -> SimpleNamespace:
    pool = SimpleNamespace(started_at=100.0, ready_at=100.5)
    return SimpleNamespace(spans={"bench": [100.0, 130.0]}, seconds=Counter(seconds), batches=7,
                           executors=SimpleNamespace(devices=pool),
                           plan=SimpleNamespace(device=SimpleNamespace(count=1)))


def test_the_share_counts_baselines_and_the_split_adds_up_to_the_held_time():
    line = _bench_timing(session(**{"measured": 16.0, "measured baselines": 2.0, "device held": 25.0,
                                    "device batches": 24.0, "device inputs": 1.0, "device loads": 0.5,
                                    "device timed span": 18.5}))
    assert "timed kernel launches 18.0s (16.0s configs, 2.0s baselines), 72% of the 25.0s" in line
    split = line.splitlines()[1]
    assert split.startswith("bench device time: 25.0s = ") and split.endswith("(7 batches)")
    parts = [float(v) for v in re.findall(r"(\d+\.\d)s", split.split("=", 1)[1])]
    # timed 18.0, gaps 0.5, checks and warm-up 4.0, inputs 1.0, loads 0.5, between batches 1.0
    assert parts == [18.0, 0.5, 4.0, 1.0, 0.5, 1.0] and abs(sum(parts) - 25.0) < 1e-9


def test_without_the_workers_split_only_the_share_is_given():
    line = _bench_timing(session(**{"measured": 8.0, "device held": 10.0}))
    assert "80% of the 10.0s" in line and "bench device time" not in line
