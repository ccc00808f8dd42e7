"""The run summary's lines: the share of timed launches counts the configs' and the baselines',
the split of the device time the benches held adds up to it, and the end-to-end line counts the
command's own start."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

from aot_tune.pipeline.forecast import Calibration, Forecast
from aot_tune.runs.stats import RunStats
from aot_tune.runs.summary import bench_timing, end_to_end, run_record

REPO = Path(__file__).resolve().parents[2]


def session(**seconds) -> RunStats:
    return RunStats(spans={"bench": [100.0, 130.0]}, seconds=Counter(seconds), batches=7, compile_jobs=16,
                    devices=1, devices_started_at=100.0, devices_ready_at=100.5)


def test_the_share_counts_baselines_and_the_split_adds_up_to_the_held_time():
    line = bench_timing(session(**{"measured": 16.0, "measured baselines": 2.0, "device held": 25.0,
                                    "device batches": 24.0, "device inputs": 1.0, "device loads": 0.5,
                                    "device timed span": 18.5}))
    assert "timed kernel launches 18.0s (16.0s configs, 2.0s baselines), 72% of the 25.0s" in line
    split = line.splitlines()[1]
    assert split.startswith("bench device time: 25.0s = ") and split.endswith("(7 batches)")
    parts = [float(v) for v in re.findall(r"(\d+\.\d)s", split.split("=", 1)[1])]
    # timed 18.0, gaps 0.5, checks and warm-up 4.0, inputs 1.0, loads 0.5, between batches 1.0
    assert parts == [18.0, 0.5, 4.0, 1.0, 0.5, 1.0] and abs(sum(parts) - 25.0) < 1e-9


def test_a_cluster_run_splits_its_device_time_too_without_a_start_up():
    """A cluster's workers were up before the run; the split still says where the held time went
    (between batches there includes each batch's trip through Dask)."""
    stats = session(**{"measured": 16.0, "measured baselines": 2.0, "device held": 25.0, "device batches": 22.0,
                       "device inputs": 1.0, "device loads": 0.5, "device timed span": 18.5})
    stats.devices, stats.devices_started_at, stats.devices_ready_at = 4, None, None
    line = bench_timing(stats)
    assert line.startswith("bench stage: 30.0s on 4 device(s) (a cluster's workers, up before the run)")
    assert "start-up" not in line and "72% of the 25.0s" in line
    assert line.splitlines()[1].endswith("+ between batches 3.0s (7 batches)")
    # their device processes start with the run: what the first batches waited for them is said
    stats.seconds["device waited for start-up"] = 7.7
    assert bench_timing(stats).startswith("bench stage: 30.0s on 4 device(s) (a cluster's workers, up before the "
                                          "run; their first batches waited 7.7s in all for their device processes "
                                          "to start)")


def test_without_the_workers_split_only_the_share_is_given():
    line = bench_timing(session(**{"measured": 8.0, "device held": 10.0}))
    assert "80% of the 10.0s" in line and "bench device time" not in line


def test_end_to_end_names_the_floor_and_the_ratio():
    # 149.4s of compiling on 16 workers (9.3s) is the floor, over the 7.8s of timed launches
    line = end_to_end(session(**{"compiling": 149.4, "slowest valid compile": 3.0, "measured": 7.0,
                                 "measured baselines": 0.8}), 40.8)
    assert line.startswith("end to end: 40.8s wall, floor 9.3s (")
    assert "compiling 149.4s / 16 workers = 9.3s; slowest valid compile 3.0s; timed launches 7.8s" in line
    assert line.endswith(": 4.4x the floor")


def test_end_to_end_counts_the_commands_own_start_as_the_prediction_does():
    stats = session(**{"compiling": 149.4, "slowest valid compile": 3.0, "measured": 7.0, "measured baselines": 0.8})
    stats.launch_s = 1.2
    line = end_to_end(stats, 39.6)
    assert line.startswith("end to end: 40.8s wall (1.2s of it the command's start), floor 9.3s (")
    assert line.endswith(": 4.4x the floor")


def test_end_to_end_floor_is_the_slowest_compile_when_it_dominates():
    line = end_to_end(session(**{"compiling": 20.0, "slowest valid compile": 12.5, "measured": 2.0}), 25.0)
    assert "floor 12.5s" in line and line.endswith("2.0x the floor")


def predicted() -> Forecast:
    return Forecast(Calibration("cuda"), [], 16, {"h100-sxm": 1}, startup_s=10.0, compile_s=9.0, bench_s=20.0,
                    rest_s=1.0)


def with_prediction(stats: RunStats, forecast: Forecast | None) -> RunStats:
    """The run's statistics with what it predicted at its start, as the session leaves them when it ends."""
    stats.predicted_s = forecast.predicted_s if forecast is not None else None
    stats.predicted = forecast.parts() if forecast is not None else {}
    return stats


def test_end_to_end_ends_with_what_the_run_predicted():
    line = end_to_end(with_prediction(session(**{"compiling": 149.4, "slowest valid compile": 3.0, "measured": 7.0}),
                                      predicted()), 40.8)
    assert line.startswith("end to end: 40.8s wall, floor 9.3s (")
    assert line.endswith(": 4.4x the floor; predicted 40.0 s (start-up 10.0, compile 9.0, bench 20.0, rest 1.0)")


def test_the_run_log_keeps_the_prediction_beside_the_wall_time():
    ran = with_prediction(session(**{"device held": 25.0}), predicted())
    ran.device, ran.backend, ran.bench_status = "h100-sxm", "cuda", Counter(ok=3)
    record = run_record(ran, 1000.0, 1040.8, ok=True)
    assert record.wall_s == 40.8 and record.predicted_s == 40.0 and record.batches == 7
    assert record.predicted == {"start-up": 10.0, "compile": 9.0, "bench": 20.0, "rest": 1.0}
    assert record.worker_seconds["device start-up"] == 0.5  # the device pool's, from asked to up
    ran = with_prediction(ran, None)  # a run that predicted nothing
    assert run_record(ran, 1000.0, 1040.8, ok=True).predicted_s is None


def test_the_commands_start_is_not_the_shells_that_ran_other_work_first():
    """``bash -c "pip install ... && doit tune"`` execs doit in bash's own process, which started
    before the install: the command's start is still its own (a 3 s sleep stands for the install)."""
    probe = "from aot_tune.runs.stats import process_age_s; print(process_age_s())"
    script = f"sleep 3 && {shlex.quote(sys.executable)} -c {shlex.quote(probe)}"
    ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert ran.returncode == 0, ran.stderr
    assert 0.0 < float(ran.stdout) < 2.0, ran.stdout


def test_the_bench_stage_says_how_long_its_devices_idled_from_the_first_batch_on():
    """The device time no bench held from the first batch with work (or the workers' start, if
    later) to the end: what compiles that had not landed cost the device."""
    stats = session(**{"measured": 16.0, "device held": 25.0})
    stats.spans["bench batches"] = [100.2, 130.0]  # asked before the worker was up (100.5)
    line = bench_timing(stats)
    assert "29.8s from its first batch to its end (device time idle in it 4.5s: no bench had a landed config" in line
    stats.devices = 2  # both devices' time from then on
    assert "(device time idle in it 34.0s:" in bench_timing(stats)
    stats.devices, stats.seconds["device held"] = 1, 29.5
    assert "idle in it" not in bench_timing(stats)
