"""``doit report``: what tuning bought, per kernel and device, as a self-contained HTML page and
a markdown summary.

Everything comes from files a checkout has: the kernels' caches (checked in; every device's
records with their baselines), and, where this tree ran ``doit tune``, the compile outputs and
the run log under ``.aot_tune/``. No GPU, torch or triton is needed, so CI or a laptop renders
the report of an H200 run. What a section cannot show (baselines not measured, compile times
not in this tree, plots without matplotlib) it says, with the fix.

Per kernel: the tuned config against the kernel's default config and the vendor implementation
per shape, as times and rates with the device's peak and the shape's floor (aot_tune.cost); the
tuning time split; a heatmap of each config parameter's values against performance; failures
by reason; and which shapes x dtypes each device's table covers (as ``doit check`` sees them).
An interpreter table's times are Python wall clock on the CPU, not a GPU's: its section shows the
picked configs, how many passed the check, and coverage, and no time, rate, ratio or heatmap.
"""
from __future__ import annotations

import html
import statistics
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from aot_tune import __version__
from aot_tune import cache as cache_io
from aot_tune.cache import record_bench_dims, record_shape
from aot_tune.reports import plots as report_plots
from aot_tune.reports.rows import (CompileTime, DeviceSection, FailureRow, Heatmap, KernelSection, Report,
                                    ReportPaths, RunRow, ShapeRow, Timed)
from aot_tune.tables.check import Coverage, check
from aot_tune.cost import Rate, floor_ms, rate
from aot_tune.runtime.devices import DevicePeak, device_peak
from aot_tune.select import key_pick
from aot_tune.fileio import write_atomic
from aot_tune.errors import program
from aot_tune.manifest import KernelSpec, Manifest
from aot_tune.build.compile import CompileRecord
from aot_tune.runs import WORK_DIR, shape_label
from aot_tune.runs.log import RUNS_FILE, RunRecord, read_runs, time_split
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement, TuningRecord

HTML_NAME = "index.html"
MARKDOWN_NAME = "summary.md"
#: Runs of the log shown in the time split (the most recent).
RUNS_SHOWN = 8
#: Failure messages are cut to this many characters.
MESSAGE_CHARS = 160


# -- collecting -----------------------------------------------------------------------------

def build_report(manifest: Manifest, kernels: tuple[KernelSpec, ...] | None = None) -> Report:
    """Read the caches and local outputs into the report's data; plots when matplotlib is there."""
    specs = kernels or manifest.kernels
    checked = check(manifest)
    coverage = {(c.kernel, c.device): c for c in checked.coverage}
    work_dir = manifest.root / WORK_DIR
    plots = report_plots.available()
    sections = [_kernel_section(manifest, spec, coverage, work_dir) for spec in specs]
    runs = [_run_row(r) for r in read_runs(work_dir)[-RUNS_SHOWN:]]
    report = Report(manifest=str(manifest.path), version=__version__, kernels=sections, runs=runs, plots=plots,
                    generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    names = {spec.name for spec in specs}  # stale records have no rows: the note says what changed
    report.notes += [f"stale: {c.line()}" for c in checked.manifest_changes if c.kernel in names]
    if not runs:
        report.no_runs = _no_runs(work_dir / RUNS_FILE)
    if plots:
        for section in sections:
            for device in (d for d in section.devices if d.gpu):
                device.plot = report_plots.comparison(section.name, device.key, section.unit, device.rows,
                                                      device.peak, section.dtypes)
                device.heatmap_plot = report_plots.heatmap(section.name, device.key, device.heatmap)
        report.runs_plot = report_plots.time_split([(f"{r.started_at} {r.kernels}", r.split) for r in runs])
    return report


def _kernel_section(manifest: Manifest, spec: KernelSpec, coverage: dict, work_dir: Path) -> KernelSection:
    cache = cache_io.read_checked(manifest.root / spec.cache, spec)
    by_device: dict[str, list[TuningRecord]] = {}
    for record, stale in zip(cache.cache.records, cache.stale):
        if record.kernel == spec.name and stale is None:
            by_device.setdefault(record.device.key, []).append(record)
    unit = None
    if spec.cost is not None:
        unit = "TFLOP/s" if spec.cost.flops is not None else "GB/s"
    devices = [_device_section(spec, records, coverage.get((spec.name, key)))
               for key, records in sorted(by_device.items())]
    absent = [c for (kernel, _), c in coverage.items() if kernel == spec.name and not c.has_table]
    return KernelSection(spec.name, spec.key, spec.dtypes, unit, spec.default_config is not None,
                         spec.vendor or "", devices, _compile_time(work_dir, spec.name), absent)


def _device_section(spec: KernelSpec, records: list[TuningRecord], coverage: Coverage | None) -> DeviceSection:
    records = sorted(records, key=lambda r: (r.dtype, tuple(map(_sort_key, record_shape(r)))))
    first = records[0]
    peak = device_peak(first.device.name) if first.device.backend == "cuda" else None
    by_key: dict[tuple, list[TuningRecord]] = {}
    for record in records:
        by_key.setdefault((record.dtype, record_shape(record)), []).append(record)
    # A key benchmarked on several shapes (bench dims): its table holds one pick for all of them.
    picks = {k: (picked[0].id, len(group)) for k, group in by_key.items()
             if len(group) > 1 and (picked := key_pick(group)) is not None}
    dates = sorted(r.measured_at for r in records if r.measured_at)
    return DeviceSection(
        key=first.device.key, name=first.device.name, backend=first.device.backend,
        toolchain=f"triton {first.toolchain.triton}, torch {first.toolchain.torch}", peak=peak,
        rows=[_shape_row(spec, r, peak, picks.get((r.dtype, record_shape(r)))) for r in records],
        heatmap=_heatmap(spec, records),
        failures=_failures(records), bench_seconds=sum(r.bench_seconds for r in records), records=len(records),
        measured=f"{dates[0]} .. {dates[-1]}" if dates else "unknown",
        coverage=coverage, coverage_grid=_coverage_grid(spec, first.device.backend, coverage),
    )


def _shape_row(spec: KernelSpec, record: TuningRecord, peak: DevicePeak | None,
               pick: tuple[str, int] | None = None) -> ShapeRow:
    """One measured shape. ``pick``, where the key was benchmarked on several shapes, is
    (the table's config id for the key, how many shapes): the row then times that pick and
    says what it loses against this shape's own best."""
    # Rates only for GPUs: the interpreter's times are Python wall clock, not a device's throughput.
    gpu = record.device.backend == "cuda"
    named = {**dict(zip(record.key_names, record_shape(record))), **dict(record_bench_dims(record))}
    work = spec.cost.work(named, record.dtype) if spec.cost and gpu else None
    label = " ".join([shape_label(record_shape(record))] + [f"{n}={v}" for n, v in record_bench_dims(record)])
    compute_dtype = spec.cost.peak_dtype(record.dtype) if spec.cost else record.dtype

    def timed(m: Measurement | None, missing: str) -> Timed:
        if m is None:
            return Timed(None, missing)
        config = Config.from_dict(cache_io.config_from_proto(m.config)).label() or m.config.id
        if m.status != "ok" or m.median_ms <= 0:
            return Timed(None, f"{m.status}: {_short(m.reason)}" if m.reason else m.status)
        return Timed(m.median_ms, config, rate(work, m.median_ms, peak, compute_dtype) if work else None)

    best = next((m for m in record.measurements if record.HasField("best") and m.config.id == record.best.id), None)
    tuned = timed(best, "no config passed")
    if pick is not None:
        picked = next((m for m in record.measurements if m.config.id == pick[0]), None)
        tuned = timed(picked, "the pick for the key was not measured on this shape")
        if tuned.ms is not None and best is not None and best.median_ms > 0:
            own = timed(best, "")
            tuned = Timed(tuned.ms, f"{tuned.note} (the pick for the key over {pick[1]} shapes: "
                          f"{tuned.ms / best.median_ms:.2f}x the best on this shape, {own.note})", tuned.rate)
    stale = f"not measured: the record predates the baselines; fix: run `{program()} tune` on this device"
    default_missing = stale if spec.default_config is not None else "no default_config in the manifest"
    vendor_missing = stale if spec.vendor else "no vendor in the manifest"
    return ShapeRow(
        dtype=record.dtype, shape=label, tuned=tuned,
        default=timed(record.default_baseline if record.HasField("default_baseline") else None, default_missing),
        vendor=timed(record.vendor_baseline if record.HasField("vendor_baseline") else None, vendor_missing),
        floor_ms=floor_ms(work, peak, compute_dtype) if work else None, gpu=gpu,
        passed=sum(m.status == "ok" for m in record.measurements), measured=len(record.measurements),
    )


def _heatmap(spec: KernelSpec, records: list[TuningRecord]) -> Heatmap:
    params = [name for name, values in spec.space.params if len(values) > 1] or [n for n, _ in spec.space.params]
    values = [sorted({v for v in dict(spec.space.params)[p]}, key=_sort_key) for p in params]
    per_cell: list[list[list[float]]] = [[[] for _ in vs] for vs in values]
    for record in records:
        ok = [(cache_io.config_from_proto(m.config), m.median_ms) for m in record.measurements
              if m.status == "ok" and m.median_ms > 0]
        if not ok:
            continue
        fastest = min(ms for _, ms in ok)
        for i, param in enumerate(params):
            for j, value in enumerate(values[i]):
                times = [ms for config, ms in ok if config.get(param) == value]
                if times:
                    per_cell[i][j].append(fastest / min(times))
    scores = [[statistics.geometric_mean(c) if c else None for c in row] for row in per_cell]
    counts = [[len(c) for c in row] for row in per_cell]
    return Heatmap(params, values, scores, counts)


def _failures(records: list[TuningRecord]) -> list[FailureRow]:
    """Failed measurements by reason; an invalid config's reason is the compile failure kind."""
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for record in records:
        where = f"{record.dtype} {shape_label(record_shape(record))}"
        named = [("", m) for m in record.measurements]
        named += [(f"{role} baseline ", getattr(record, f"{role}_baseline")) for role in ("default", "vendor")
                  if record.HasField(f"{role}_baseline")]
        for role, m in named:
            if m.status == "ok":
                continue
            reason = f"{role}{m.status}"
            if m.status == "invalid" and m.reason:
                reason = f"invalid: {m.reason.split(':', 1)[0]}"
            counts[reason] += 1
            examples.setdefault(reason, f"{where}, config {m.config.id}: {_short(m.reason)}")
    return [FailureRow(reason, count, examples[reason]) for reason, count in sorted(counts.items())]


def _coverage_grid(spec: KernelSpec, backend: str, coverage: Coverage | None) -> list[list[str]]:
    """Rows of [shape, status per dtype] for the shapes the manifest asks of this device."""
    if coverage is None:
        return []
    status = {}
    for what, entries in (("tuned", coverage.tuned), ("stale", coverage.stale), ("missing", coverage.missing)):
        for entry in entries:
            dtype, _, rest = entry.partition(" ")
            status[(dtype, rest.split(" ")[0])] = what
    measured = spec.dtypes_for(backend)  # the interpreter compiles fp8 and bfloat16 only
    return [[shape_label(s), *(status.get((d, shape_label(s)), "missing") if d in measured else "GPU only"
                               for d in spec.dtypes)] for s in spec.shapes_for(backend)]


def _compile_time(work_dir: Path, kernel: str) -> CompileTime | None:
    """Compile outputs of this tree (`.aot_tune/compile/<kernel>/<target>/...`); None if none."""
    folder = work_dir / "compile" / kernel
    outputs = sorted(folder.glob("*/*/*.json")) if folder.is_dir() else []
    if not outputs:
        return None
    by_target: dict[str, list[float]] = {}
    counts: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for path in outputs:
        record = CompileRecord.read(path)
        if record is None:
            continue
        target = path.parent.parent.name
        by_target.setdefault(target, []).append(float(record.result.seconds))
        if record.result.status != "ok":
            reason = f"{target} {record.result.status}"
            counts[reason] += 1
            examples.setdefault(reason, f"config {path.stem}: {_short(record.result.message)}")
    return CompileTime(
        compiles=sum(len(v) for v in by_target.values()), seconds=sum(sum(v) for v in by_target.values()),
        by_target={t: (len(v), sum(v)) for t, v in sorted(by_target.items())},
        failures=[FailureRow(r, c, examples[r]) for r, c in sorted(counts.items())],
    )


def _no_runs(log: Path) -> str:
    """Why the run log shows nothing, and what stands in for it."""
    where = "the bench time each record keeps in the caches is shown per kernel and device below"
    if log.exists():
        return f"{log} holds no readable run (it is not a list of runs this aot_tune writes); {where}."
    return (f"No run log here ({log} does not exist): `{program()} tune` appends a run to it only where it compiled or "
            f"benchmarked, so a checkout whose tables were tuned on another machine has none; {where}.")


def _run_row(run: RunRecord) -> RunRow:
    return RunRow(started_at=run.started_at, kernels=", ".join(run.kernels), device=run.device,
                  wall_s=float(run.wall_s), split=time_split(run), ok=bool(run.ok),
                  predicted_s=float(run.predicted_s) if isinstance(run.predicted_s, (int, float)) else None)


# -- rendering ------------------------------------------------------------------------------

def write_report(manifest: Manifest, output: Path, kernels: tuple[KernelSpec, ...] | None = None) -> ReportPaths:
    """Render the report into ``output`` (created if needed); returns the files written."""
    report = build_report(manifest, kernels)
    paths = ReportPaths(output / HTML_NAME, output / MARKDOWN_NAME)
    write_atomic(paths.html, _template("report.html.j2", autoescape=True).render(r=report))
    write_atomic(paths.markdown, _template("report.md.j2", autoescape=False).render(r=report))
    return paths


def _template(name: str, autoescape: bool):
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("aot_tune", "templates"), autoescape=autoescape,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(us=format_us, rate=format_rate, times=format_times, pct=format_pct, secs=format_seconds,
                       cell=heat_color, md=markdown_cell)
    return env.get_template(name)


def format_us(ms: float | None) -> str:
    """Milliseconds as microseconds with three significant digits; an em dash for none."""
    if ms is None:
        return "—"
    us = ms * 1e3
    return f"{us:.3g}" if us < 1000 else f"{us:,.0f}"


def format_rate(value: Rate | None) -> str:
    if value is None:
        return "—"
    return f"{value.value:.3g}" if value.value < 100 else f"{value.value:,.0f}"


def format_times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def format_pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def format_seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min"


def heat_color(score: float | None) -> str:
    """A CSS background for a heatmap cell: green at 1.0 (the fastest), through yellow, to red."""
    if score is None:
        return "#eeeeee"
    t = max(0.0, min(1.0, (score - 0.5) / 0.5))  # 0.5 or worse: full red
    hue = 120 * t
    return f"hsl({hue:.0f}, 70%, 75%)"


def markdown_cell(text: object) -> str:
    return html.escape(str(text)).replace("|", "\\|").replace("\n", " ")


def _short(message: str) -> str:
    message = " ".join(message.split())
    return message if len(message) <= MESSAGE_CHARS else message[:MESSAGE_CHARS - 1] + "…"


def _sort_key(value: object) -> tuple:
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))
