"""The tuning plan: which compile and bench units a manifest asks for, with their fingerprints,
where each unit's durable output lives, and which units are stale.

Staleness is decided from durable files (per-task outputs under ``.aot_tune/`` and the checked-in
caches), never from doit's dependency database alone: doit writes that database only when a run
ends, so a killed run would otherwise redo finished work, and a fresh clone would retune
everything although its caches already hold the answers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Collection, Sequence

from aot_tune.cache import record_full_shape
from aot_tune.record import replay
from aot_tune.search import strategies as search
from aot_tune.fingerprint import (RECORD_FORMAT, MeasuredOn, Toolchain, baselines_fingerprint, bench_fingerprint,
                                  measured_dependencies, spec_closure)
from aot_tune.sources import SourceIndex, digest
from aot_tune.bench.runner import DeviceModel
from aot_tune.manifest import KernelSpec, Manifest, SearchSettings
from aot_tune.runs import WORK_DIR, shape_label
from aot_tune.space import Config
from aot_tune.build.specialize import SpecializationTable, read_table
from aot_tune.tuning_schema import TuningRecord

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
    #: the config the shape's reference launches, where the manifest tells (a recorded entry's:
    #: the library's own); the compile stage starts with it, since every check waits for it
    reference_config: Config | None = None
    vendor: str = ""
    baselines_fingerprint: str = ""  # "" when no baseline is planned
    search: SearchSettings = SearchSettings()
    sources: tuple[tuple[int, ...], ...] = ()

    @property
    def name(self) -> str:
        return f"bench:{self.kernel}:{self.device}:{self.dtype}:{shape_label(self.shape)}"

    @cached_property
    def probes(self) -> tuple[Config, ...]:
        """The configs this bench may measure (all but for random draws)."""
        return self.configs if self.search.exhaustive else search.up_front(self.search, self.configs)

    @property
    def compiles_on_demand(self) -> bool:
        """Whether its configs are compiled when its search asks to measure them, not by the
        compile stage (an adaptive budgeted search: aot_tune.search.strategies.compiles_on_demand)."""
        return search.compiles_on_demand(self.search)


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
    #: Launches compiled but not measured: dtypes the interpreter cannot compute (aot_tune.dtypes)
    compile_only: dict[Launch, tuple[Config, ...]] = field(default_factory=dict)
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
        return key in device_keys and (key, record.dtype, record_full_shape(record)) not in self._planned_keys

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
        """Every planned (shape, dtype) with its configs, once however many device models bench it
        (or none: the compile-only launches)."""
        return {**self.compile_only, **{(u.shape, u.dtype): u.probes for u in self.bench_units}}

    def plan_compiles(self, toolchain: Toolchain, work: Path) -> None:
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
            fp = digest("compile", RECORD_FORMAT, self.compile_code, config.params, target, spec_id,
                        toolchain.as_dict())
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

    def compile_only_note(self) -> str:
        """One line naming the dtypes compiled but not measured on this run ("" if none)."""
        skipped = {f"{kp.spec.name} {dtype}" for kp in self.kernels for _, dtype in kp.compile_only}
        if not skipped:
            return ""
        return (f"note: the Triton interpreter cannot compute fp8 or bfloat16, so {', '.join(sorted(skipped))} "
                f"{'is' if len(skipped) == 1 else 'are'} compiled for the GPU targets but not measured here; "
                f"their tables come from GPUs")

    @cached_property
    def device_keys(self) -> frozenset[str]:
        return frozenset(d.key for d in self.devices)

    @property
    def work_dir(self) -> Path:
        return self.manifest.root / WORK_DIR

    @property
    def triton_cache_dir(self) -> Path:
        return self.work_dir / "triton-cache"

    def worker_refs(self, kp: KernelPlan) -> tuple[str, ...]:
        """The ``module:attr`` a worker imports for a kernel (the workers as they start; the
        forecast prices them): its references, less a recorded kernel that the stages rebuild from
        its recorded source instead of importing its library (aot_tune.record.replay)."""
        if self._why_imported(kp) is None:
            return tuple(ref for ref in kp.spec.module_refs if ref != kp.spec.kernel)
        return kp.spec.module_refs

    def compiles_need_torch(self) -> bool:
        return compiles_need_torch(self.manifest.root, [kp.spec for kp in self.kernels])

    def stale_sources_note(self) -> list[str]:
        """A line for each recorded kernel whose recorded source no longer matches its installed
        library: the stages import the library instead (slower, still right)."""
        return [f"{kp.spec.name}: the stages import {kp.spec.kernel.partition(':')[0]}: {why}"
                for kp in self.kernels if (why := self._why_imported(kp)) and "stale" in why]

    def _why_imported(self, kp: KernelPlan) -> str | None:
        return why_imported(self.manifest.root, kp.spec)

    @cached_property
    def toolchain(self) -> Toolchain:
        return Toolchain.installed()


def compiles_need_torch(root: Path, specs: Sequence[KernelSpec]) -> bool:
    """Whether a compile or specialize step of a run of ``specs`` needs torch: False where every
    kernel is rebuilt from its recorded source, whose compiles take stand-ins for its tensors.
    Known from the manifest alone, before the devices or the plan."""
    return any(why_imported(root, spec) is not None for spec in specs)


def why_imported(root: Path, spec: KernelSpec) -> str | None:
    """Why the stages import the kernel's module, or None where they rebuild it from its recording."""
    if not spec.launch.startswith(f"{replay.__name__}:"):
        return "not a recorded kernel"
    return replay.why_imported(str(root), spec.kernel)


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
        vendor_code = spec_closure(sources, spec, [spec.vendor])[0] if spec.vendor else ""
        kp.compile_code = spec_closure(sources, spec, [spec.kernel, spec.launch, spec.inputs], with_lines=True)[0]
        # What decides the arguments' specializations: the launch and inputs, and the kernel's
        # parameters, not its body (a kernel edit keeps the captured specializations).
        launch_code = spec_closure(sources, spec, [spec.kernel, spec.launch, spec.inputs], signatures=[spec.kernel])[0]
        kp.targets = spec.targets
        configs_per_shape: dict[tuple[int, ...], tuple[Config, ...]] = {}
        for device in devices:
            if device.target and device.target not in kp.targets:
                kp.targets = (*kp.targets, device.target)  # the bench launches need the device's arch compiled
            measured_on = MeasuredOn(device.key, device.name, device.compute_capability, device.backend,
                                     plan.toolchain.triton, plan.toolchain.torch)
            shapes = spec.shapes_for(device.backend)
            seeds = search.transfer_plan(shapes) if spec.search.strategy in ("successive_halving", "surrogate") \
                and spec.search.transfer else {}
            for shape in shapes:
                if shape not in configs_per_shape:
                    configs_per_shape[shape] = tuple(spec.space.configs_for(spec.shape_dict(shape)))
                default = spec.default_config.resolve(spec.shape_dict(shape)) if spec.default_config else None
                reference = _reference_config(spec, manifest.root, shape, configs_per_shape[shape])
                measured = spec.dtypes_for(device.backend)
                for dtype in spec.dtypes:
                    if dtype not in measured:  # the interpreter cannot compute it: compiled for the GPUs only
                        kp.compile_only[(shape, dtype)] = configs_per_shape[shape]
                        continue
                    fp = bench_fingerprint(spec, code, shape, dtype, measured_on)
                    out = work / "bench" / device.key / spec.name / f"{dtype}-{shape_label(shape)}.pb"
                    kp.bench_units.append(BenchUnit(
                        spec.name, shape, dtype, device.key, configs_per_shape[shape], fp, out,
                        default_config=default, reference_config=reference, vendor=spec.vendor or "",
                        baselines_fingerprint=baselines_fingerprint(spec, vendor_code, fp, default),
                        search=spec.search, sources=seeds.get(shape, ())))
        kp.specializations_path = work / "specialize" / f"{spec.name}.json"
        kp.specializations = read_table(kp.specializations_path,
                                        digest("specialize", RECORD_FORMAT, launch_code, plan.toolchain.as_dict()))
        kp.plan_compiles(plan.toolchain, work)
        plan.kernels.append(kp)
    return plan


def _reference_config(spec: KernelSpec, root: Path, shape: tuple[int, ...], configs: Sequence[Config]) -> Config | None:
    """The candidate config a recorded entry's reference launches for ``shape`` (None for any other
    reference: a user's reference is a function, not a config)."""
    if spec.reference != replay.REFERENCE_REF:
        return None
    chosen = replay.reference_config(str(root), spec.shape_dict(shape))
    return next((c for c in configs if chosen is not None and c.as_dict() == chosen), None)
