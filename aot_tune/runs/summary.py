"""What a run did, read off its statistics once it ends (aot_tune.runs.stats): the closing summary
lines and the run log's record (aot_tune.runs.log)."""
from __future__ import annotations

import os
from datetime import datetime, timezone

from aot_tune.runs.log import RunRecord
from aot_tune.runs.stats import RunStats


def run_record(stats: RunStats, started: float, ended: float, ok: bool) -> RunRecord | None:
    """Where this run's time went (aot_tune.runs.log); None when no stage ran."""
    if not stats.spans:
        return None
    return RunRecord(
        started_at=datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds"),
        wall_s=round(ended - started, 3), ok=ok, device=stats.device, backend=stats.backend,
        kernels=sorted(stats.kernels),
        stages={stage: [round(a - started, 3), round(b - started, 3)] for stage, (a, b) in stats.spans.items()},
        worker_seconds={k: round(v, 3) for k, v in sorted({**stats.seconds, **_device_startup(stats)}.items())},
        compile=dict(stats.compile_status), bench=dict(stats.bench_status), baselines=dict(stats.baseline_status),
        finals=dict(stats.finals), batches=stats.batches,
        predicted_s=round(stats.predicted_s, 3) if stats.predicted_s is not None else None,
        predicted=dict(stats.predicted), estimates={k: round(v, 4) for k, v in stats.estimates.items()},
        launch_s=round(stats.launch_s, 3), jobs=stats.compile_jobs, cpus=os.cpu_count() or 1,
        toolchain=stats.toolchain,
    )


def _device_startup(stats: RunStats) -> dict[str, float]:
    """How long the local device workers took to come up, where a bench ran (a cluster's were up
    before): once the fork server they fork from was up ("device start-up"), and, in a run that
    compiled nothing, the server's own imports they waited for first ("fork server start-up")."""
    if "bench" not in stats.spans:
        return {}
    started, ready = stats.devices_started_at, stats.devices_ready_at
    if started is None or ready is None:
        return {}
    server_ready = stats.fork_server_ready_at
    if server_ready is None or not started < server_ready <= ready:
        return {"device start-up": max(0.0, ready - started)}
    return {"device start-up": ready - server_ready, "fork server start-up": server_ready - started}


def run_summary(stats: RunStats) -> str:
    """The run's closing lines: what was specialized, compiled, measured and searched."""
    lines = []
    if stats.specialized:
        lines.append(f"specialize: {stats.specialized['launches']} launches captured; "
                     f"{stats.specialized['specializations']} specializations planned")
    if stats.compile_status:
        total = sum(stats.compile_status.values())
        invalid = {k: v for k, v in sorted(stats.compile_status.items()) if k != "ok"}
        by_reason = ", ".join(f"{k} {v}" for k, v in invalid.items()) or "none"
        lines.append(f"compile: {total} compiled, {stats.compile_status['ok']} valid, "
                     f"{sum(invalid.values())} invalid ({by_reason}); {stats.seconds['compile']:.1f}s of worker time")
    if stats.on_demand_candidates:
        lines.append(f"compile on demand: {stats.compiled_on_demand} compiled as the budgeted searches reached "
                     f"their configs; {stats.on_demand_never} of the {stats.on_demand_candidates} compiles of their "
                     f"candidates never needed")
    if stats.baseline_status:
        measured = ", ".join(f"{k} {v}" for k, v in sorted(stats.baseline_status.items()))
        lines.append(f"baselines: {measured}")
    if stats.bench_status:
        total = sum(stats.bench_status.values())
        failed = ", ".join(f"{k} {v}" for k, v in sorted(stats.bench_status.items()) if k != "ok") or "none"
        line = f"bench: {total} config measurements, {stats.bench_status['ok']} ok, failed: {failed}"
        if stats.given_up:
            line += (f" ({stats.given_up} of the invalid ones not waited for: their compiles straggled "
                     f"and they could not win)")
        if stats.cuda:
            lookups = stats.cache_hits + stats.cache_misses
            rate = 100.0 * stats.cache_hits / lookups if lookups else 100.0
            line += f"; Triton cache hit rate {rate:.0f}% ({stats.cache_hits}/{lookups})"
        lines.append(line)
        if stats.finals:
            lines.append(f"finals: {stats.finals['configs']} configs of {stats.finals['shapes']} shapes timed again "
                         f"side by side, interleaved; the picks are among them")
        lines.append(bench_timing(stats))
    for described, tally in sorted(stats.searched.items()):
        lines.append(f"search: {described}: {tally['shapes']} shapes, {tally['measured']} of "
                     f"{tally['candidates']} candidate configs measured, {tally['seconds']:.1f}s")
    return "\n".join(lines)


def end_to_end(stats: RunStats, wall_s: float) -> str:
    """The run's last line: the command's wall time (``wall_s`` from the run's start, plus the
    command's own start before it, ``stats.launch_s``, which the prediction counts too) against
    its floor, the most it could not beat however well stages overlap: the seconds spent
    compiling spread over every compile worker, the slowest valid compile (it runs on one core),
    and the timed kernel launches spread over the devices. Start-ups (imports, CUDA) are not in
    the floor: they are what overlapping should hide. Then what the run predicted at its start,
    where it made a prediction."""
    launched = stats.launch_s
    wall_s += launched
    seconds = stats.seconds
    jobs = stats.compile_jobs
    spread = seconds["compiling"] / jobs
    devices = max(1, stats.devices)
    timed = stats.timed_s / devices
    floor = max(spread, seconds["slowest valid compile"], timed)
    parts = [f"compiling {seconds['compiling']:.1f}s / {jobs} workers = {spread:.1f}s",
             f"slowest valid compile {seconds['slowest valid compile']:.1f}s",
             f"timed launches {timed:.1f}s" + (f" a device ({devices})" if devices > 1 else "")]
    ratio = f"{wall_s / floor:.1f}x the floor" if floor >= 0.05 else "no floor to compare with"
    started = f" ({launched:.1f}s of it the command's start)" if launched >= 0.05 else ""
    line = f"end to end: {wall_s:.1f}s wall{started}, floor {floor:.1f}s (the most of: {'; '.join(parts)}): {ratio}"
    if stats.predicted_s is None:
        return line
    predicted = ", ".join(f"{part} {spent:.1f}" for part, spent in stats.predicted.items())
    return f"{line}; predicted {stats.predicted_s:.1f} s ({predicted})"


def bench_timing(stats: RunStats) -> str:
    """The bench stage's wall time, how much of it waited for device workers to start (torch and
    CUDA start-up: in a full run they start while the compiles run; a cluster's were up before),
    its wall from the first batch with work for a device (before it, a cold run's benches wait for
    their first compiles) and the device time no bench held in it (waiting for compiles to land,
    or with no bench left), and where the device time the benches held went: on a cluster, "between
    batches" is also each batch's trip through Dask, and the start-up of a worker's device process,
    which its first batch may wait for, is not device time held."""
    first, last = stats.spans["bench"]
    started, ready = stats.devices_started_at, stats.devices_ready_at
    devices = stats.devices
    batches = stats.spans.get("bench batches")
    if ready is None:  # a cluster's workers were up before the run; their device processes start with it
        waited = stats.seconds["device waited for start-up"]  # aot_tune.bench.runner.STARTUP_WAITED
        start_up = (" (a cluster's workers, up before the run"
                    + (f"; their first batches waited {waited:.1f}s in all for their device processes to start"
                       if waited >= 0.05 else "") + ")")
    else:
        waited = max(0.0, min(ready, last) - first)
        start_up = (f", {last - first - waited:.1f}s of it after the device workers were up "
                    f"(start-up {ready - (started or ready):.1f}s, {waited:.1f}s of it waited for)")
    seconds = stats.seconds
    line = (f"bench stage: {last - first:.1f}s on {devices} device(s){start_up}"
            + (f", {batches[1] - batches[0]:.1f}s from its first batch to its end" if batches else ""))
    if batches and seconds["device held"]:
        since = max(batches[0], ready) if ready is not None else batches[0]  # held time counts from then
        idle = devices * max(batches[1] - since, 0.0) - seconds["device held"]
        if idle >= 0.05:
            line += f" (device time idle in it {idle:.1f}s: no bench had a landed config to measure)"
    timed = stats.timed_s
    if timed:
        busy = seconds["device held"]  # by the benches, from when its worker was up
        line += (f"; timed kernel launches {timed:.1f}s ({seconds['measured']:.1f}s configs, "
                 f"{seconds['measured baselines']:.1f}s baselines), {timed / max(busy, 1e-9):.0%} of the "
                 f"{busy:.1f}s of device time the benches held")
        if seconds["device batches"]:
            span = max(seconds["device timed span"], timed)
            rest = seconds["device batches"] - seconds["device inputs"] - seconds["device loads"] - span
            line += (f"\nbench device time: {busy:.1f}s = timed launches {timed:.1f}s + gaps between them "
                     f"{span - timed:.1f}s + checks, warm-up and graph captures {max(rest, 0.0):.1f}s "
                     f"+ input sets and references {seconds['device inputs']:.1f}s"
                     + (f" (and {seconds['device prepared']:.1f}s of them built during other shapes' timed "
                        f"launches)" if seconds["device prepared"] >= 0.05 else "") + " "
                     f"+ kernel loads {seconds['device loads']:.1f}s + between batches "
                     f"{max(busy - seconds['device batches'], 0.0):.1f}s ({stats.batches} batches)")
    return line
