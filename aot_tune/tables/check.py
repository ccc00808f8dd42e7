"""``doit check``: is every checked-in table in sync with the sources, the manifest and the
toolchain? For CI machines without a GPU, like a lockfile check.

For each kernel and each device that has records in its cache, every (shape, dtype) the
manifest asks of that device (``interpreter_shapes`` for the interpreter) is classified:

* tuned: a record whose fingerprint, recomputed from the current kernel source and manifest
  with the device and toolchain the record names, matches;
* stale: a record exists but its fingerprint differs (source, bench or search settings or shape
  inputs changed; or, with ``toolchain="installed"``, the installed triton/torch differ), or it
  did not measure exactly the configs the space now holds for that shape (for a budgeted
  search: did not search among exactly them);
* missing: no record.

A record whose key dims or params are no longer the manifest's (the key or the space was edited)
is stale as well, whatever its shape, with what changed; one line per change names the devices
it made stale and the fix (retune there, or ``doit drop-device``).

A device with no records at all is checked too when something asks for it: a device key the
manifest declares (``devices:``; the interpreter only when declared), and, on a GPU machine,
the GPU this machine would tune for (its key passed in as ``local_device``). Such a device is
one line naming the shapes and dtypes it lacks.

A generated module must be exactly what its cache renders to, byte for byte: a module edited
by hand (or by anything else) is flagged, and so is one holding tuned entries its cache lacks
(the cache was deleted, emptied or truncated: the next run would drop those tables), or tables
whose records the manifest made stale (aot_tune.pipeline.guard). So must every file of the
kernel's ``exports:`` (aot_tune.exports): a missing or stale one is flagged.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aot_tune import cache as cache_io
from aot_tune import exports
from aot_tune.cache import Mismatch, record_full_shape
from aot_tune.codegen import committed_as_generated, is_generated, render_kernel
from aot_tune.errors import program
from aot_tune.fingerprint import measured_dependencies
from aot_tune.sources import SourceIndex
from aot_tune.manifest import KernelSpec, Manifest
from aot_tune.runs import shape_label
from aot_tune.pipeline.staleness import ManifestChange, manifest_changes, record_problem
from aot_tune.runtime.devices import INTERPRETER
from aot_tune.pipeline.guard import entries_missing_from_cache, lost_tables_message, stale_tables_message
from aot_tune.triton_compat import versions

TOOLCHAIN_MODES = ("recorded", "installed")


@dataclass
class Coverage:
    kernel: str
    device: str
    tuned: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    #: why a device without a table is checked at all ("declared in devices:", "this machine's GPU");
    #: empty for a device that has records
    required_by: str = ""

    @property
    def ok(self) -> bool:
        return not self.stale and not self.missing

    @property
    def has_table(self) -> bool:
        return not self.required_by


@dataclass
class CheckReport:
    coverage: list[Coverage]
    outdated_modules: list[str]
    untuned_kernels: list[str]
    #: one line each: a module holding entries its cache lacks, or a file aot_tune did not write
    module_problems: list[str] = field(default_factory=list)
    #: every device key the manifest declares
    declared: list[str] = field(default_factory=list)
    #: the key of this machine's GPU, checked like a declared device (None: no GPU, not checked)
    local_device: str | None = None
    #: kernels with no table yet whose every dtype only GPUs measure (fp8): a note, not a failure,
    #: since no CPU run can make their table
    gpu_only_kernels: list[str] = field(default_factory=list)
    #: one line each: an export file missing or out of sync with its cache
    export_problems: list[str] = field(default_factory=list)
    #: edits of a kernel's key or space that left records stale, with the devices they concern
    manifest_changes: list[ManifestChange] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.coverage) and not self.outdated_modules and not self.untuned_kernels \
            and not self.module_problems and not self.export_problems and not self.manifest_changes

    def render(self) -> str:
        kw = max([16, *(len(c.kernel) + 2 for c in self.coverage)])  # recorded kernels' names run long
        dw = max([16, *(len(c.device) + 2 for c in self.coverage)])
        lines = [f"{'kernel':<{kw}}{'device':<{dw}}{'tuned':>7}{'stale':>7}{'missing':>9}"]
        for c in self.coverage:
            lines.append(f"{c.kernel:<{kw}}{c.device:<{dw}}{len(c.tuned):>7}{len(c.stale):>7}{len(c.missing):>9}")
        for c in self.coverage:
            if not c.has_table:
                lines.append(f"missing: {c.kernel} has no table for {c.device} ({c.required_by}); "
                             f"{_absent(c.missing)}")
                continue
            for what, entries in (("stale", c.stale), ("missing", c.missing)):
                for entry in entries:
                    lines.append(f"{what}: {c.kernel} on {c.device}: {entry}")
        for kernel in self.untuned_kernels:
            lines.append(f"missing: {kernel} has no tuned table on any device")
        for kernel in self.gpu_only_kernels:
            lines.append(f"note: {kernel} has no table yet; the interpreter cannot compute its dtypes, so its "
                         f"tables come from GPUs: run `{program()} tune {kernel}` on one and commit generated/")
        for change in self.manifest_changes:
            lines.append(f"stale: {change.line()}")
        for path in self.outdated_modules:
            lines.append(f"stale: {path} does not match its cache")
        for line in self.module_problems + self.export_problems:
            lines.append(f"problem: {line}")
        stale = sorted({c.kernel for c in self.coverage if not c.ok} | set(self.untuned_kernels)
                       | {p.split("/")[-1].removesuffix(".py") for p in self.outdated_modules}
                       | {c.kernel for c in self.manifest_changes})
        if (self.module_problems or self.export_problems) and not stale:
            lines.append("not in sync: fix each 'problem' line as it says")
        elif stale:
            lines.append(f"out of date: {', '.join(stale)}; fix: run `{program()} tune {' '.join(stale)}` on each "
                         f"device listed, and commit generated/")
        elif self.gpu_only_kernels:
            lines.append("every table a CPU can make is in sync with the sources, the manifest and the toolchain")
        else:
            lines.append(self._in_sync())
        return "\n".join(lines)

    def _in_sync(self) -> str:
        """What was checked, e.g. ``8 tables in sync ...; devices covered: h200, interpreter (declared: h200)``."""
        devices = sorted({c.device for c in self.coverage})
        checked = [f"declared: {', '.join(self.declared)}"] if self.declared else []
        if self.local_device:
            checked.append(f"this machine's GPU: {self.local_device}")
        extra = f" ({'; '.join(checked)})" if checked else ""
        tables = f"{len(self.coverage)} table{'s' * (len(self.coverage) != 1)}"
        return (f"{tables} in sync with the sources, the manifest and the toolchain; "
                f"devices covered: {', '.join(devices) or 'none'}{extra}")


def _absent(missing: list[str]) -> str:
    """``float16, bfloat16 for 2 shapes: 64x64, 128x128`` from a device's missing entries."""
    dtypes = list(dict.fromkeys(entry.split(" ", 1)[0] for entry in missing))
    shapes = list(dict.fromkeys(entry.split(" ", 1)[1] for entry in missing))
    return f"needs {', '.join(dtypes)} for {len(shapes)} shape{'s' * (len(shapes) != 1)}: {', '.join(shapes)}"


def check(manifest: Manifest, toolchain: str = "recorded", local_device: str | None = None) -> CheckReport:
    """``local_device``: the key of the GPU this machine would tune for, required like a declared
    device; None on a machine without one (the interpreter is required only when declared)."""
    if toolchain not in TOOLCHAIN_MODES:
        raise ValueError(f"toolchain must be one of {TOOLCHAIN_MODES}")
    installed = versions()
    sources = SourceIndex(manifest.root)
    report = CheckReport([], [], [], local_device=local_device)
    report.declared = sorted({device for spec in manifest.kernels for device in spec.devices})
    for spec in manifest.kernels:
        code, dependencies = measured_dependencies(sources, spec)
        checked = cache_io.read_checked(manifest.root / spec.cache, spec)
        cache = checked.cache
        report.manifest_changes += manifest_changes(spec, checked.stale_records(), manifest.path.name)
        devices = sorted({r.device.key for r in cache.records})
        required = {device: "declared in devices:" for device in spec.devices}
        if local_device:
            required.setdefault(local_device, "this machine's GPU")
        absent = [_absent_coverage(spec, device, why) for device, why in required.items() if device not in devices]
        if not devices and not absent:
            gpu_only = not spec.dtypes_for("interpreter")
            (report.gpu_only_kernels if gpu_only else report.untuned_kernels).append(spec.name)
        for device in devices:
            records = [(r, why) for r, why in zip(cache.records, checked.stale) if r.device.key == device]
            report.coverage.append(_device_coverage(spec, code, records, toolchain, installed, dependencies))
        report.coverage.extend(absent)
        generated = manifest.root / spec.generated
        missing = entries_missing_from_cache(generated, cache, spec)
        dropped = stale_tables_message(spec, generated, checked, manifest.path.name)
        if missing or dropped:
            report.module_problems.append(lost_tables_message(spec, missing) if missing else dropped)
        elif not is_generated(generated) and committed_as_generated(generated):
            report.module_problems.append(f"{spec.generated} lost its '# Generated by aot_tune' first line (a merge "
                                          f"conflict, or an edit), but git's HEAD holds it as aot_tune wrote it; fix: "
                                          f"run `{program()} tune {spec.name}` to rewrite it from the cache")
        elif not is_generated(generated):
            report.module_problems.append(f"{spec.generated} was not written by aot_tune (no '# Generated by "
                                          f"aot_tune' first line); fix: point generated: at another file")
        elif (devices or generated.exists()) and _module_text(generated) != \
                render_kernel(spec, checked, manifest.path.name):
            report.outdated_modules.append(spec.generated)
        report.export_problems.extend(exports.problems(manifest.root, spec, checked.current()))
    return report


def _module_text(path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _absent_coverage(spec: KernelSpec, device: str, required_by: str) -> Coverage:
    """A required device with no record: every (shape, dtype) it is asked for is missing."""
    backend = INTERPRETER if device == INTERPRETER else "cuda"
    missing = [f"{dtype} {shape_label(shape)}" for dtype in spec.dtypes_for(backend)  # none the backend cannot run
               for shape in spec.shapes_for(backend)]
    return Coverage(spec.name, device, missing=missing, required_by=required_by)


def _device_coverage(spec: KernelSpec, code: str, records: list[tuple[object, Mismatch | None]], toolchain: str,
                     installed: dict, dependencies: dict[str, str]) -> Coverage:
    """``records``: the device's records, each with its mismatch against the manifest (None: none).
    A stale record is listed once, with what changed: at its shape if the manifest still asks for
    it under this key (a space edit), else apart (a key edit, or a shape no longer asked for)."""
    first = records[0][0].device
    coverage = Coverage(spec.name, first.key)
    shapes = spec.shapes_for(first.backend)
    by_key = {(r.dtype, record_full_shape(r)): r for r, why in records if why is None}
    stale = {(r.dtype, record_full_shape(r)): why for r, why in records if why and tuple(r.key_names) == spec.key}
    for shape in shapes:
        for dtype in spec.dtypes_for(first.backend):  # the interpreter's tables lack fp8 and bfloat16
            label = f"{dtype} {shape_label(shape)}"
            record = by_key.get((dtype, tuple(shape)))
            if record is None:
                why = stale.get((dtype, tuple(shape)))
                if why:
                    coverage.stale.append(f"{label} ({why.what})")
                else:
                    coverage.missing.append(label)
                continue
            problem = record_problem(spec, code, record, installed if toolchain == "installed" else None,
                                     dependencies)
            if problem:
                coverage.stale.append(f"{label} ({problem})")
            else:
                coverage.tuned.append(label)
    asked = {(dtype, tuple(shape)) for shape in shapes for dtype in spec.dtypes_for(first.backend)}
    coverage.stale += [f"{r.dtype} {shape_label(record_full_shape(r))} ({why.what})" for r, why in records
                       if why and (tuple(r.key_names) != spec.key or (r.dtype, record_full_shape(r)) not in asked)]
    return coverage
