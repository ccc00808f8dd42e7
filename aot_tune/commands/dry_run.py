"""``doit tune --dry-run [KERNEL...]``: the run's plan and its predicted wall time
(aot_tune.pipeline.forecast), with nothing run or written: no doit database, nothing under
.aot_tune/, no worker process, no GPU, no torch import. The specializations of launches not
captured yet are estimated (aot_tune.pipeline.forecast.specialization_class), not captured."""
from __future__ import annotations

import sys
from collections.abc import Sequence

from aot_tune.commands.loader import ManifestLoader
from aot_tune.pipeline.forecast import DeviceWork, Forecast, forecast
from aot_tune.runs.history import read_history
from aot_tune.runs.log import read_runs
from aot_tune.runs.progress import eprint


def dry_run(loader: ManifestLoader, kernel_names: Sequence[str]) -> int:
    """Print the plan of ``doit tune`` with the loader's options, and its prediction; 0 once printed
    (a mistake the run would refuse is doit's one-line error)."""
    writes_bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # a configs: list imported from the project leaves no __pycache__
    try:
        loader.kernel_names = tuple(kernel_names)
        loader.manifest = loader.read_manifest(write_caches=False)
        deadline = loader.compile_deadline()
        plan, staleness, cluster = loader.plan_run()
        jobs = loader.compile_jobs(cluster)
        if cluster is not None:
            cluster.close()
        for change in (c for kp in plan.kernels for c in staleness.manifest_changes(kp)):
            eprint(f"aot_tune: {change.line(plan.device_keys)}")
        predicted = forecast(plan, staleness, jobs, read_runs(plan.work_dir), deadline, read_history(),
                             launch_s=loader.launch_s)
    finally:
        sys.dont_write_bytecode = writes_bytecode
    devices = ", ".join(f"{d.count} x {d.key}" for d in plan.devices)
    notices = [n for n in (*(d.notice for d in plan.devices), plan.compile_only_note()) if n]
    print("\n".join([f"dry run of {plan.manifest.path.name} on {devices}: nothing is compiled, measured or written",
                     *notices, *describe(predicted)]), flush=True)
    return 0


def describe(result: Forecast) -> list[str]:
    """The dry run's lines: per kernel its compiles (stale of total) and captures, per device model
    its bench tasks and measurements; then the parts; the last line the prediction."""
    lines = []
    for work in result.kernels:
        about, guessed = ("about ", f"; {work.estimated} guessed: launches not captured yet") if work.estimated \
            else ("", "")
        lines.append(f"{work.kernel}:")
        lines.append(f"  compile  {work.compiles_stale} of {about}{work.compiles_total} stale "
                     f"({', '.join(work.targets)}){guessed}")
        if work.on_demand_candidates:
            lines.append(f"  compile  about {work.on_demand} more on demand, as the budgeted searches reach their "
                         f"configs (of {work.on_demand_candidates} candidate compiles not made yet)")
        if work.to_capture:
            lines.append(f"  capture  {work.to_capture} launches' specializations (estimated here)")
        for device in work.devices.values():
            lines.append(f"  bench    {device.stale} of {device.total} tasks on {device.device}, "
                         f"{device.measurements} measurements{_measured(device)}")
    if result.idle:
        return lines + ["nothing to do: every compile and bench is up to date", "predicted 0.0 s"]
    device_s = sum(d.device_s for k in result.kernels for d in k.devices.values())
    measurements = sum(d.measurements for k in result.kernels for d in k.devices.values())
    captures = sum(k.to_capture for k in result.kernels)
    devices = ", ".join(f"{n} x {key}" for key, n in result.device_counts.items())
    imported = f", the kernel modules' import {result.import_s:.1f} s" if result.import_s >= 0.05 else ""
    toolchain = "triton imports: no compile needs torch" if result.calibration.light else "torch and triton imports"
    started = (f"the compile workers' start-up ({toolchain}" + imported +
               (f", {captures} launches captured" if captures else "") + ")") if result.compiles or captures \
        else f"the device workers' start-up{imported}"
    exporters = f"; the exporters' import {result.main_import_s:.1f} s" if result.main_import_s >= 0.05 else ""
    source = result.calibration.described()
    return lines + [
        f"start-up  {result.startup_s:.1f} s  {started}",
        f"compile   {result.compile_s:.1f} s  {len(result.compiles)} compiles over {result.compile_jobs} workers, "
        f"longest first (the longest {max(result.compiles, default=0.0):.1f} s)",
        f"bench     {result.bench_s:.1f} s  {measurements} measurements, {device_s:.1f} s of device time on "
        f"{devices}, beyond the compile part" + (f"; with about {len(result.on_demand)} compiles on demand "
                                                 f"({sum(result.on_demand):.1f} s)" if result.on_demand else ""),
        f"rest      {result.rest_s:.1f} s  the command's start ({result.launch_s:.1f} s, as this one's), planning, "
        f"merge, generate{exporters}",
        f"predicted {result.predicted_s:.1f} s ({source})",
    ]


def _measured(device: DeviceWork) -> str:
    """``(12 configs x 4 shapes)``: what the stale tasks measure."""
    if not device.configs:
        return ""
    low, high = min(device.configs), max(device.configs)
    configs = f"{high}" if low == high else f"{low}-{high}"
    search = f"{device.search}: " if device.search else ""
    return f" ({search}{configs} configs x {len(device.configs)} shape{'s' * (len(device.configs) != 1)})"
