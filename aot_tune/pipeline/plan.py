"""The tuning plan: which compile and bench units a manifest asks for, with their fingerprints,
where each unit's durable output lives, and which units are stale.

Staleness is decided from durable files (per-task outputs under ``.aot_tune/`` and the checked-in
caches), never from doit's dependency database alone: doit writes that database only when a run
ends, so a killed run would otherwise redo finished work, and a fresh clone would retune
everything although its caches already hold the answers.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Collection, Sequence

from aot_tune import cache as cache_io
from aot_tune.search import strategies as search
from aot_tune.codegen import describe_missing, entries_missing_from_cache
from aot_tune.build.compile import CompileResult
from aot_tune.errors import TuneError
from aot_tune.fingerprint import RECORD_FORMAT, SourceIndex, digest
from aot_tune.bench.runner import DeviceModel
from aot_tune.manifest import KernelSpec, Manifest, SearchSettings
from aot_tune.space import Config
from aot_tune.build.specialize import SpecializationTable, read_table
from aot_tune.triton_compat import PINNED_ENV, versions
from aot_tune.tuning_schema import TuningCache, TuningRecord

WORK_DIR = ".aot_tune"


def shape_label(shape: tuple[int, ...]) -> str:
    return "x".join(str(v) for v in shape)


Launch = tuple[tuple[int, ...], str]  # (shape, dtype)


@dataclass(frozen=True)
class CompileUnit:
    """Compile one config of one kernel for one specialization and target. ``launches`` are the
    planned (shape, dtype) launches that specialize alike; the first is the one compiled, and
    the Triton cache entry it leaves serves them all."""

    kernel: str
    config: Config
    target: str
    specialization: str
    launches: tuple[Launch, ...]
    fingerprint: str
    output: Path

    @property
    def name(self) -> str:
        return f"compile:{self.kernel}:{self.target}:{self.specialization}:{self.config.id}"

    @property
    def representative(self) -> Launch:
        return self.launches[0]


@dataclass(frozen=True)
class BenchUnit:
    """Search the candidate configs of one kernel on one (shape, dtype) on one device model: all
    of them (exhaustive), or within a budget; ``sources`` are the shapes whose results seed a
    budgeted search (their bench tasks run first, aot_tune.search.strategies.transfer_plan). Then the
    baselines the manifest declares (its default config, the vendor implementation)."""

    kernel: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    configs: tuple[Config, ...]
    fingerprint: str
    output: Path
    default_config: Config | None = None
    vendor: str = ""
    baselines_fingerprint: str = ""  # "" when no baseline is planned
    search: SearchSettings = SearchSettings()
    sources: tuple[tuple[int, ...], ...] = ()

    @property
    def name(self) -> str:
        return f"bench:{self.kernel}:{self.device}:{self.dtype}:{shape_label(self.shape)}"

    @cached_property
    def probes(self) -> tuple[Config, ...]:
        """The configs this bench may measure, so the ones to compile (all but for random draws)."""
        return self.configs if self.search.exhaustive else search.up_front(self.search, self.configs)


@dataclass
class KernelPlan:
    spec: KernelSpec
    cache_path: Path
    generated_path: Path
    targets: tuple[str, ...] = ()
    compile_code: str = ""
    dependencies: dict[str, str] = field(default_factory=dict)  # what the bench fingerprints' code covers
    specializations: SpecializationTable | None = None
    specializations_path: Path | None = None
    compile_units: list[CompileUnit] = field(default_factory=list)
    bench_units: list[BenchUnit] = field(default_factory=list)
    #: (target, shape, dtype, config) launches whose specialization is not known yet
    unspecialized: list[tuple[str, tuple[int, ...], str, Config]] = field(default_factory=list)
    _compile_index: dict[tuple[str, Launch, str], CompileUnit] = field(default_factory=dict, repr=False)
    _benches_by_launch: dict[Launch, list[BenchUnit]] | None = field(default=None, repr=False)
    _planned_keys: frozenset[tuple[str, str, tuple[int, ...]]] | None = field(default=None, repr=False)

    def bench_targets(self, device: DeviceModel) -> tuple[str, ...]:
        """Targets whose compiles a bench on this device uses (validity, and the warm cache)."""
        return (device.target,) if device.target else self.spec.targets

    def unplanned_local(self, record: TuningRecord, device_keys: Collection[str]) -> bool:
        """A record of a device this run tunes, for a (dtype, shape) the manifest no longer asks of it."""
        if self._planned_keys is None:
            self._planned_keys = frozenset((u.device, u.dtype, tuple(u.shape)) for u in self.bench_units)
        key = record.device.key
        return key in device_keys and (key, record.dtype, tuple(record.shape)) not in self._planned_keys

    def compiles_for(self, bench: BenchUnit, config: Config, targets: tuple[str, ...]) -> list[CompileUnit]:
        """The compile tasks whose Triton cache entries this bench's launches of ``config`` use."""
        launch = (bench.shape, bench.dtype)
        found = (self._compile_index.get((t, launch, config.id)) for t in targets)
        return [u for u in found if u is not None]

    def benches_for(self, launch: Launch) -> list[BenchUnit]:
        """The bench units of this launch: one per device model that runs its shape."""
        if self._benches_by_launch is None:
            self._benches_by_launch = {}
            for unit in self.bench_units:
                self._benches_by_launch.setdefault((unit.shape, unit.dtype), []).append(unit)
        return self._benches_by_launch.get(launch, [])

    def bench_of(self, launch: Launch, device: str) -> BenchUnit | None:
        """The bench unit of this launch on this device model."""
        return next((u for u in self.benches_for(launch) if u.device == device), None)

    def launches(self) -> dict[Launch, tuple[Config, ...]]:
        """Every planned (shape, dtype) with its configs, once however many device models bench it."""
        return {(u.shape, u.dtype): u.probes for u in self.bench_units}

    def plan_compiles(self, toolchain: dict[str, str], work: Path) -> None:
        """One compile unit per (config, specialization, target) the table knows, deduplicated
        across the launches that share it; launches it does not know are listed as unspecialized."""
        table = self.specializations
        assert table is not None
        units: dict[tuple[str, str, Config], list[Launch]] = {}
        spec_of: dict[tuple[str, Launch, str], tuple[str, str, Config]] = {}
        self.unspecialized = []
        launches = self.launches()
        for target in self.targets:
            for launch, configs in launches.items():
                shape, dtype = launch
                known = table.lookup(target, shape, dtype)
                for config in configs:
                    spec_id = known.get(config.id)
                    if spec_id is None:
                        self.unspecialized.append((target, shape, dtype, config))
                        continue
                    key = (target, spec_id, config)
                    units.setdefault(key, []).append(launch)
                    spec_of[(target, launch, config.id)] = key
        built: dict[tuple[str, str, Config], CompileUnit] = {}
        for (target, spec_id, config), launches in sorted(units.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
            # The launches are not in the fingerprint: any of them leaves the same Triton cache entry.
            fp = digest("compile", RECORD_FORMAT, self.compile_code, config.params, target, spec_id, toolchain)
            out = work / "compile" / self.spec.name / target / spec_id / f"{config.id}.json"
            built[(target, spec_id, config)] = CompileUnit(self.spec.name, config, target, spec_id,
                                                           tuple(launches), fp, out)
        self.compile_units = list(built.values())
        self._compile_index = {k: built[v] for k, v in spec_of.items()}


@dataclass
class Plan:
    manifest: Manifest
    devices: tuple[DeviceModel, ...]  # the device models benchmarked: the local one, or a cluster's
    kernels: list[KernelPlan]

    @property
    def device(self) -> DeviceModel:
        """The device model of a run on one machine (the first of a cluster's)."""
        return self.devices[0]

    def device_of(self, unit: BenchUnit) -> DeviceModel:
        return next(d for d in self.devices if d.key == unit.device)

    @cached_property
    def device_keys(self) -> frozenset[str]:
        return frozenset(d.key for d in self.devices)

    @property
    def work_dir(self) -> Path:
        return self.manifest.root / WORK_DIR

    @property
    def triton_cache_dir(self) -> Path:
        return self.work_dir / "triton-cache"

    @cached_property
    def toolchain(self) -> dict[str, str]:
        return {**versions(), **PINNED_ENV}


@dataclass(frozen=True)
class MeasuredOn:
    """The device and toolchain a measurement's fingerprint names (a record stores them too)."""

    key: str
    name: str
    compute_capability: str
    backend: str
    triton: str
    torch: str


def measured_code(sources: SourceIndex, spec: KernelSpec) -> str:
    """Hash of the source that decides a measurement: the kernel and its launch function, and the
    input builder and reference that decide what is measured and what counts as correct."""
    return measured_dependencies(sources, spec)[0]


def measured_dependencies(sources: SourceIndex, spec: KernelSpec) -> tuple[str, dict[str, str]]:
    """``measured_code`` and the pieces it covers, each with its digest (kept in every record)."""
    return sources.closure_parts([spec.kernel, spec.launch, spec.inputs, spec.reference])


def bench_fingerprint(spec: KernelSpec, code: str, shape: tuple[int, ...], dtype: str, on: MeasuredOn) -> str:
    """Everything that decides each config's measurement for one (kernel, shape, dtype) on one
    device, and for a budgeted search its strategy and settings (exhaustive adds nothing, so its
    fingerprints are those of records made before strategies existed). The config space is not
    part of it: a record lists the configs it measured (by stable id), so adding a config
    measures only that config and removing one only re-picks; a budgeted record names the
    candidates it searched, and a change of them reruns its search (aot_tune.search.strategies.covers)."""
    toolchain = {"triton": on.triton, "torch": on.torch, **PINNED_ENV}
    strategy = () if spec.search.exhaustive else (spec.search.canonical(),)
    return digest("bench", RECORD_FORMAT, code, spec.key, shape, dtype,
                  asdict(spec.bench), toolchain, on.key, on.name, on.compute_capability, on.backend,
                  spec.reference, spec.inputs, *strategy)


def baselines_fingerprint(spec: KernelSpec, vendor_code: str, bench_fp: str, default_config: Config | None) -> str:
    """What decides the baselines of one bench unit: everything its configs' fingerprint covers
    (the default config runs the kernel), the resolved default config, and the vendor function's
    source. Kept apart from the bench fingerprint, so declaring or changing a baseline measures
    the baselines alone, and records made before baselines existed keep their measurements."""
    if default_config is None and not spec.vendor:
        return ""
    return digest("baselines", RECORD_FORMAT, bench_fp, default_config.params if default_config else None,
                  spec.vendor or "", vendor_code)


def build_plan(manifest: Manifest, devices: DeviceModel | Sequence[DeviceModel],
               kernels: tuple[KernelSpec, ...]) -> Plan:
    """Expand the manifest into units, one bench unit per (shape, dtype) and device model; pure
    apart from reading kernel sources."""
    devices = (devices,) if isinstance(devices, DeviceModel) else tuple(devices)
    if len({d.key for d in devices}) != len(devices):
        raise ValueError(f"device models must be distinct: {[d.key for d in devices]}")
    plan = Plan(manifest, devices, [])
    sources = SourceIndex(manifest.root)
    work = manifest.root / WORK_DIR
    for spec in kernels:
        kp = KernelPlan(spec, manifest.root / spec.cache, manifest.root / spec.generated)
        code, kp.dependencies = measured_dependencies(sources, spec)
        vendor_code = sources.closure([spec.vendor]) if spec.vendor else ""
        kp.compile_code = sources.closure([spec.kernel, spec.launch, spec.inputs], with_lines=True)
        kp.targets = spec.targets
        configs_per_shape: dict[tuple[int, ...], tuple[Config, ...]] = {}
        for device in devices:
            if device.target and device.target not in kp.targets:
                kp.targets = (*kp.targets, device.target)  # the bench launches need the device's arch compiled
            measured_on = MeasuredOn(device.key, device.name, device.compute_capability, device.backend,
                                     plan.toolchain["triton"], plan.toolchain["torch"])
            shapes = spec.shapes_for(device.backend)
            seeds = search.transfer_plan(shapes) if spec.search.strategy in ("successive_halving", "surrogate") \
                and spec.search.transfer else {}
            for shape in shapes:
                if shape not in configs_per_shape:
                    configs_per_shape[shape] = tuple(spec.space.configs_for(spec.shape_dict(shape)))
                default = spec.default_config.resolve(spec.shape_dict(shape)) if spec.default_config else None
                for dtype in spec.dtypes:
                    fp = bench_fingerprint(spec, code, shape, dtype, measured_on)
                    out = work / "bench" / device.key / spec.name / f"{dtype}-{shape_label(shape)}.pb"
                    kp.bench_units.append(BenchUnit(
                        spec.name, shape, dtype, device.key, configs_per_shape[shape], fp, out,
                        default_config=default, vendor=spec.vendor or "",
                        baselines_fingerprint=baselines_fingerprint(spec, vendor_code, fp, default),
                        search=spec.search, sources=seeds.get(shape, ())))
        kp.specializations_path = work / "specialize" / f"{spec.name}.json"
        kp.specializations = read_table(kp.specializations_path,
                                        digest("specialize", RECORD_FORMAT, kp.compile_code, plan.toolchain))
        kp.plan_compiles(plan.toolchain, work)
        plan.kernels.append(kp)
    return plan


class Staleness:
    """Answers 'does this unit need to run' from durable outputs; parses each file once per change."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._caches: dict[Path, tuple[tuple[int, int], TuningCache, dict[str, TuningRecord]]] = {}
        self._outputs: dict[Path, tuple[tuple[int, int], TuningRecord | None]] = {}
        self._to_measure: dict[Path, tuple[TuningRecord | None, list[Config], frozenset[Config]]] = {}

    def cache(self, kp: KernelPlan) -> TuningCache:
        """The kernel's merged cache, re-read only when the file changed (it is read on every check)."""
        return self._cache_entry(kp)[1]

    def _cache_entry(self, kp: KernelPlan):
        version = _file_version(kp.cache_path)
        memo = self._caches.get(kp.cache_path)
        if memo is None or memo[0] != version:
            cache = cache_io.read_cache(kp.cache_path)
            cache_io.check_records(cache.records, kp.cache_path, kp.spec)
            memo = self._caches[kp.cache_path] = (version, cache, {r.fingerprint: r for r in cache.records})
        return memo

    def previous_record(self, kp: KernelPlan, unit: BenchUnit) -> TuningRecord | None:
        """The latest record measured under this unit's fingerprint: its own output (with raw
        samples), else the merged cache's."""
        version = _file_version(unit.output)
        memo = self._outputs.get(unit.output)
        if memo is None or memo[0] != version:
            memo = self._outputs[unit.output] = (version, _read_record(unit.output) if version != (0, 0) else None)
        if memo[1] is not None and memo[1].fingerprint == unit.fingerprint:
            return memo[1]
        return self._cache_entry(kp)[2].get(unit.fingerprint)

    def configs_to_measure(self, kp: KernelPlan, unit: BenchUnit) -> list[Config]:
        """Planned configs the previous record has not measured (memoized: asked once per compile);
        for a budgeted search that is not done, the configs it may reach and has not measured."""
        return self._to_measure_memo(kp, unit)[1]

    def measures(self, kp: KernelPlan, unit: BenchUnit, config: Config) -> bool:
        """Whether this bench still has to measure ``config`` (a set lookup: asked per compile unit)."""
        return config in self._to_measure_memo(kp, unit)[2]

    def _to_measure_memo(self, kp: KernelPlan, unit: BenchUnit):
        record = self.previous_record(kp, unit)
        memo = self._to_measure.get(unit.output)
        if memo is None or memo[0] is not record:
            measured = _measured_ids(record)
            if unit.search.exhaustive or not _covers(record, unit):
                todo = [c for c in unit.probes if c.id not in measured]
            else:
                todo = []
            memo = self._to_measure[unit.output] = (record, todo, frozenset(todo))
        return memo

    def bench_done(self, kp: KernelPlan, unit: BenchUnit) -> bool:
        """Done when a record under this fingerprint covers exactly the planned configs (for a
        budgeted search: its search under this strategy and budget, the fingerprint, chose among
        exactly the planned candidates) and holds the planned baselines."""
        record = self.previous_record(kp, unit)
        if record is None or not _has_baselines(record, unit):
            return False
        if not unit.search.exhaustive:
            return _covers(record, unit)
        return not self.configs_to_measure(kp, unit) and len(_measured_ids(record)) == len(unit.configs)

    def baselines_to_measure(self, kp: KernelPlan, unit: BenchUnit) -> bool:
        """Whether this bench must (re-)measure its baselines: planned, and not in the record yet."""
        return bool(unit.baselines_fingerprint) and not _has_baselines(self.previous_record(kp, unit), unit)

    def compile_needed(self, kp: KernelPlan, unit: CompileUnit) -> bool:
        """A compile runs only when it has no result yet and a bench of one of its launches still
        has to measure its config."""
        if read_compile_result(unit) is not None:
            return False
        return any(self.measures(kp, b, unit.config) for launch in unit.launches for b in kp.benches_for(launch))

    def launches_to_specialize(self, kp: KernelPlan) -> list[tuple[str, tuple[int, ...], str, Config]]:
        """Unspecialized launches whose config a bench still has to measure: nothing else needs a compile."""
        needed = []
        for target, shape, dtype, config in kp.unspecialized:
            if any(self.measures(kp, bench, config) for bench in kp.benches_for((shape, dtype))):
                needed.append((target, shape, dtype, config))
        return needed

    def merge_needed(self, kp: KernelPlan) -> bool:
        """Some planned result is not in the cache as planned, or it holds a local record no longer planned."""
        _, cache, by_fingerprint = self._cache_entry(kp)
        devices = self.plan.device_keys
        return any(kp.unplanned_local(r, devices) for r in cache.records) or \
            any(not _covers(by_fingerprint.get(u.fingerprint), u) for u in kp.bench_units)


def _covers(record: TuningRecord | None, unit: BenchUnit) -> bool:
    if record is None or not _has_baselines(record, unit):
        return False
    if not unit.search.exhaustive:
        return search.covers(record, unit.configs)
    return _measured_ids(record) == {c.id for c in unit.configs}


def _has_baselines(record: TuningRecord | None, unit: BenchUnit) -> bool:
    return record is not None and record.baselines_fingerprint == unit.baselines_fingerprint


def _measured_ids(record: TuningRecord | None) -> frozenset[str]:
    return frozenset(m.config.id for m in record.measurements) if record is not None else frozenset()


def _file_version(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return (0, 0)
    return (stat.st_mtime_ns, stat.st_size)


def read_compile_result(unit: CompileUnit) -> CompileResult | None:
    """The unit's compile result if its output was written under the current fingerprint."""
    try:
        data = json.loads(unit.output.read_text())
    except (OSError, ValueError):
        return None
    if data.get("fingerprint") != unit.fingerprint:
        return None
    fields = CompileResult.__dataclass_fields__
    return CompileResult(**{k: v for k, v in data.items() if k in fields})


def recorded_compile_seconds(unit: CompileUnit) -> float | None:
    """How long this unit's last compile took, under any fingerprint (an edited kernel or a new
    toolchain changes a compile's time far less than its config does); None if never compiled."""
    try:
        seconds = json.loads(unit.output.read_text()).get("seconds")
    except (OSError, ValueError, AttributeError):
        return None
    return float(seconds) if isinstance(seconds, (int, float)) and seconds >= 0 else None


def _read_record(path: Path) -> TuningRecord | None:
    try:
        return cache_io.read_record(path)
    except Exception:  # a torn, foreign or forged file is simply not a finished result
        return None


def guard_tables(plan: Plan, staleness: "Staleness") -> None:
    """Refuse to run when a generated module holds entries its cache lacks: rendering it again
    would drop those tables without anyone asking (a deleted, emptied or truncated cache)."""
    for kp in plan.kernels:
        missing = entries_missing_from_cache(kp.generated_path, staleness.cache(kp), kp.spec.name)
        if missing:
            raise TuneError(lost_tables_message(plan.manifest, kp.spec, missing))


def lost_tables_message(manifest: Manifest, spec: KernelSpec, missing: dict[str, int]) -> str:
    devices = " ".join(missing)
    return (f"{spec.generated} holds tuned entries that {spec.cache} lacks ({describe_missing(missing)}); "
            f"a run would drop them; fix: restore the cache from git (git checkout -- {spec.cache}), or drop "
            f"those tables on purpose with `doit drop-device --kernel {spec.name} {devices}` and retune")
