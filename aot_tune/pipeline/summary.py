"""What a run did, read off its session once it ends: the closing summary lines and the run log's
record (aot_tune.pipeline.runlog)."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

from aot_tune.pipeline.runlog import RunRecord
from aot_tune.workers import forking

if TYPE_CHECKING:
    from aot_tune.pipeline.forecast import Forecast
    from aot_tune.pipeline.session import TuneSession


def run_record(session: TuneSession, started: float, ended: float, ok: bool) -> RunRecord | None:
    """Where this run's time went (aot_tune.pipeline.runlog); None when no stage ran."""
    if not session.spans:
        return None
    forecast = session.forecast
    return RunRecord(
        started_at=datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="seconds"),
        wall_s=round(ended - started, 3), ok=ok, device=session.plan.device.key, backend=session.plan.device.backend,
        kernels=sorted(kp.spec.name for kp in session.plan.kernels),
        stages={stage: [round(a - started, 3), round(b - started, 3)] for stage, (a, b) in session.spans.items()},
        worker_seconds={k: round(v, 3) for k, v in sorted({**session.seconds, **_device_startup(session)}.items())},
        compile=dict(session.compile_status), bench=dict(session.bench_status), baselines=dict(session.baseline_status),
        batches=session.batches,
        predicted_s=round(forecast.predicted_s, 3) if forecast is not None else None,
        predicted=forecast.parts() if forecast is not None else {},
    )


def _device_startup(session: TuneSession) -> dict[str, float]:
    """How long the local device workers took to come up, where a bench ran (a cluster's were up
    before): once the fork server they fork from was up ("device start-up"), and, in a run that
    compiled nothing, the server's own imports they waited for first ("fork server start-up")."""
    if "bench" not in session.spans:
        return {}
    pool = session.executors.devices
    if pool.started_at is None or pool.ready_at is None:
        return {}
    server_ready = forking.ready_at
    if server_ready is None or not pool.started_at < server_ready <= pool.ready_at:
        return {"device start-up": max(0.0, pool.ready_at - pool.started_at)}
    return {"device start-up": pool.ready_at - server_ready, "fork server start-up": server_ready - pool.started_at}


def run_summary(session: TuneSession) -> str:
    """The run's closing lines: what was specialized, compiled, measured and searched."""
    lines = []
    if session.specialized:
        lines.append(f"specialize: {session.specialized['launches']} launches captured; "
                     f"{session.specialized['specializations']} specializations planned")
    if session.compile_status:
        total = sum(session.compile_status.values())
        invalid = {k: v for k, v in sorted(session.compile_status.items()) if k != "ok"}
        by_reason = ", ".join(f"{k} {v}" for k, v in invalid.items()) or "none"
        lines.append(f"compile: {total} compiled, {session.compile_status['ok']} valid, "
                     f"{sum(invalid.values())} invalid ({by_reason}); {session.seconds['compile']:.1f}s of worker time")
    if session.on_demand_candidates:
        candidates = session.on_demand_candidates.values()
        never = sum(1 for unit in candidates if not session._compile_landed(unit))
        lines.append(f"compile on demand: {session.compiled_on_demand} compiled as the budgeted searches reached "
                     f"their configs; {never} of the {len(candidates)} compiles of their candidates never needed")
    if session.baseline_status:
        measured = ", ".join(f"{k} {v}" for k, v in sorted(session.baseline_status.items()))
        lines.append(f"baselines: {measured}")
    if session.bench_status:
        total = sum(session.bench_status.values())
        failed = ", ".join(f"{k} {v}" for k, v in sorted(session.bench_status.items()) if k != "ok") or "none"
        line = f"bench: {total} config measurements, {session.bench_status['ok']} ok, failed: {failed}"
        if session.stragglers.given_up:
            line += (f" ({session.stragglers.given_up} of the invalid ones not waited for: their compiles straggled "
                     f"and they could not win)")
        if any(d.backend == "cuda" for d in session.plan.devices):
            lookups = session.cache_hits + session.cache_misses
            rate = 100.0 * session.cache_hits / lookups if lookups else 100.0
            line += f"; Triton cache hit rate {rate:.0f}% ({session.cache_hits}/{lookups})"
        lines.append(line)
        lines.append(_bench_timing(session))
    for described, tally in sorted(session.searched.items()):
        lines.append(f"search: {described}: {tally['shapes']} shapes, {tally['measured']} of "
                     f"{tally['candidates']} candidate configs measured, {tally['seconds']:.1f}s")
    return "\n".join(lines)

def end_to_end(session: TuneSession, wall_s: float, forecast: Forecast | None = None) -> str:
    """The run's last line: its wall time against its floor, the most it could not beat however
    well stages overlap: the seconds spent compiling spread over every compile worker, the slowest
    valid compile (it runs on one core), and the timed kernel launches spread over the devices.
    Start-ups (imports, CUDA) are not in the floor: they are what overlapping should hide. Then
    what the run predicted at its start, where it made a prediction."""
    seconds = session.seconds
    jobs = session.executors.compile_jobs
    spread = seconds["compiling"] / jobs
    devices = max(1, session.plan.device.count)
    timed = (seconds["measured"] + seconds["measured baselines"]) / devices
    floor = max(spread, seconds["slowest valid compile"], timed)
    parts = [f"compiling {seconds['compiling']:.1f}s / {jobs} workers = {spread:.1f}s",
             f"slowest valid compile {seconds['slowest valid compile']:.1f}s",
             f"timed launches {timed:.1f}s" + (f" a device ({devices})" if devices > 1 else "")]
    ratio = f"{wall_s / floor:.1f}x the floor" if floor >= 0.05 else "no floor to compare with"
    line = f"end to end: {wall_s:.1f}s wall, floor {floor:.1f}s (the most of: {'; '.join(parts)}): {ratio}"
    if forecast is None:
        return line
    predicted = ", ".join(f"{part} {spent:.1f}" for part, spent in forecast.parts().items())
    return f"{line}; predicted {forecast.predicted_s:.1f} s ({predicted})"


def _bench_timing(session: TuneSession) -> str:
    """The bench stage's wall time, and how much of it waited for device workers to start
    (torch and CUDA start-up: in a full run they start while the compiles run)."""
    first, last = session.spans["bench"]
    pool = session.executors.devices
    started, ready = pool.started_at, pool.ready_at
    if ready is None:  # a cluster's workers were up before the run
        return (f"bench stage: {last - first:.1f}s; timed kernel launches "
                f"{session.seconds['measured'] + session.seconds['measured baselines']:.1f}s")
    devices = session.plan.device.count
    waited = max(0.0, min(ready, last) - first)
    compiles = session.seconds["waited for compiles"]
    line = (f"bench stage: {last - first:.1f}s on {devices} device(s), "
            f"{last - first - waited:.1f}s of it after the device workers were up "
            f"(start-up {ready - (started or ready):.1f}s, {waited:.1f}s of it waited for)"
            + (f"; benches waited {compiles:.1f}s for compiles to land, without a device" if compiles >= 0.05 else ""))
    seconds = session.seconds
    timed = seconds["measured"] + seconds["measured baselines"]
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
                     f"{max(busy - seconds['device batches'], 0.0):.1f}s ({session.batches} batches)")
    return line
