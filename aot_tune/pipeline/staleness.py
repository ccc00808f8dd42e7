"""What is stale: whether a planned unit must run, and whether a record still answers for today's
sources and manifest.

Staleness is decided from durable files (per-task outputs under ``.aot_tune/`` and the checked-in
caches), never from doit's dependency database alone: doit writes that database only when a run
ends, so a killed run would otherwise redo finished work, and a fresh clone would retune
everything although its caches already hold the answers.

A record whose key dims or params are no longer the manifest's (tuning.yaml's key or space was
edited) is stale too (aot_tune.cache.Mismatch): a run replaces the records of the devices it
tunes, and the other devices' stay, named with what changed (``ManifestChange``), until they
are retuned there or dropped with ``doit drop-device``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterable

from aot_tune import cache as cache_io
from aot_tune.cache import CheckedCache, Mismatch, record_full_shape
from aot_tune.build.compile import read_compile_result
from aot_tune.fingerprint import MeasuredOn, bench_fingerprint
from aot_tune.manifest import KernelSpec
from aot_tune.pipeline.plan import BenchUnit, CompileUnit, KernelPlan, Launch, Plan
from aot_tune.search import ranked, strategies as search
from aot_tune.space import Config
from aot_tune.tuning_schema import TuningCache, TuningRecord


@dataclass(frozen=True)
class ManifestChange:
    """An edit of a kernel's key or space, and the devices whose records (and tables) it made stale."""

    kernel: str
    what: str  # e.g. "the key changed from [n] to [n, m]"
    where: str  # e.g. "tuning.yaml:12"
    devices: tuple[str, ...]

    def line(self, retuned: Collection[str] | None = None) -> str:
        """One line for ``doit tune`` (``retuned``: the devices this run tunes), or for ``doit check``."""
        head = f"{self.kernel}: {self.what} ({self.where}): the tables of {', '.join(self.devices)} are stale"
        drop = f"doit drop-device --kernel {self.kernel}"
        if retuned is None:
            return (f"{head}; fix: retune {self.kernel} on {', '.join(self.devices)} (doit tune {self.kernel} "
                    f"there), or drop them with {drop} {' '.join(self.devices)}")
        here = [d for d in self.devices if d in retuned]
        others = [d for d in self.devices if d not in retuned]
        parts = [head]
        if here:
            whose = "this machine's device" if len(retuned) == 1 else "the devices it runs on"
            parts.append(f"doit tune retunes {whose} ({', '.join(here)})")
        if others:
            parts.append(f"retune {'the others' if here else 'them'} there, or drop them with {drop} "
                         f"{' '.join(others)}")
        return "; ".join(parts)


def manifest_changes(spec: KernelSpec, stale: Iterable[tuple[TuningRecord, Mismatch]],
                     manifest_name: str) -> list[ManifestChange]:
    """The stale records of ``spec``'s kernel grouped by what changed, each with its devices."""
    devices: dict[Mismatch, set[str]] = {}
    for record, why in stale:
        devices.setdefault(why, set()).add(record.device.key)
    changes = []
    for why in sorted(devices):
        line = spec.key_line if why.part == "key" else spec.space_line
        where = f"{manifest_name}:{line}" if line else manifest_name
        changes.append(ManifestChange(spec.name, why.what, where, tuple(sorted(devices[why]))))
    return changes


class Staleness:
    """Answers 'does this unit need to run' from durable outputs; parses each file once per change."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._caches: dict[Path, tuple[tuple[int, int], CheckedCache, dict[str, TuningRecord]]] = {}
        self._outputs: dict[Path, tuple[tuple[int, int], TuningRecord | None]] = {}
        self._to_measure: dict[Path, tuple[TuningRecord | None, list[Config], frozenset[Config]]] = {}

    def cache(self, kp: KernelPlan) -> TuningCache:
        """The kernel's merged cache, re-read only when the file changed (it is read on every check)."""
        return self._cache_entry(kp)[1].cache

    def checked(self, kp: KernelPlan) -> CheckedCache:
        """The cache with each record's mismatch against the manifest (read with it, in one pass)."""
        return self._cache_entry(kp)[1]

    def ranked_sources(self, kp: KernelPlan, unit: BenchUnit) -> list[TuningRecord]:
        """The cache's records a ``ranked`` search of this bench starts from (aot_tune.search.ranked)."""
        checked = self.checked(kp)
        return ranked.source_records(zip(checked.cache.records, checked.stale), kernel=unit.kernel,
                                     dtype=unit.dtype, shape=unit.shape, device=unit.device,
                                     fingerprint=unit.fingerprint, backend=self.plan.device_of(unit).backend)

    def manifest_changes(self, kp: KernelPlan) -> list[ManifestChange]:
        return manifest_changes(kp.spec, self.checked(kp).stale_records(), self.plan.manifest.path.name)

    def _cache_entry(self, kp: KernelPlan):
        version = _file_version(kp.cache_path)
        memo = self._caches.get(kp.cache_path)
        if memo is None or memo[0] != version:
            checked = cache_io.read_checked(kp.cache_path, kp.spec)
            memo = self._caches[kp.cache_path] = (version, checked, {r.fingerprint: r for r in checked.cache.records})
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

    def benches_stale(self, kp: KernelPlan) -> bool:
        """Whether any of the kernel's bench tasks is not done."""
        return any(not self.bench_done(kp, unit) for unit in kp.bench_units)

    def compile_only_pending(self, kp: KernelPlan) -> bool:
        """Whether a launch only compiled here (a dtype the interpreter cannot compute) still needs
        its capture or a compile: once all have results, a run has nothing of it to do."""
        if not kp.compile_only:
            return False
        if any((shape, dtype) in kp.compile_only for _, shape, dtype, _ in kp.unspecialized):
            return True
        return any(read_compile_result(unit.output, unit.fingerprint) is None for unit in kp.compile_units
                   if any(launch in kp.compile_only for launch in unit.launches))

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
        """Whether the compile stage runs this compile (``compile_when``): a compile only adaptive
        searches need is theirs to run when they reach its config: its compile task is up to date."""
        return self.compile_when(kp, unit) == "up front"

    def compile_when(self, kp: KernelPlan, unit: CompileUnit) -> str:
        """"" when the compile has a result already or no launch needs it; else "up front" when
        one of its launches needs it so (``launch_compile``), else "on demand"."""
        if read_compile_result(unit.output, unit.fingerprint) is not None:
            return ""
        whens = {self.launch_compile(kp, launch, unit.config) for launch in unit.launches}
        return "up front" if "up front" in whens else "on demand" if "on demand" in whens else ""

    def launch_compile(self, kp: KernelPlan, launch: Launch, config: Config) -> str:
        """When a launch of ``config`` is compiled: "up front" (by the compile stage) when the
        launch is compile-only or a bench of it still has to measure the config and does not
        compile on demand; else "on demand" when an adaptive search of it may still reach the
        config (``BenchUnit.compiles_on_demand``); else "" (not needed)."""
        if launch in kp.compile_only:
            return "up front"
        benches = [b for b in kp.benches_for(launch) if self.measures(kp, b, config)]
        if any(not b.compiles_on_demand for b in benches):
            return "up front"
        return "on demand" if benches else ""

    def compiles_on_demand(self, kp: KernelPlan) -> bool:
        """Whether a bench of this kernel that is not done compiles its configs on demand."""
        return any(b.compiles_on_demand and not self.bench_done(kp, b) for b in kp.bench_units)

    def launches_to_specialize(self, kp: KernelPlan) -> list[tuple[str, tuple[int, ...], str, Config]]:
        """Unspecialized launches whose config a bench still has to measure, and the compile-only
        ones: nothing else needs a compile."""
        needed = []
        for target, shape, dtype, config in kp.unspecialized:
            if (shape, dtype) in kp.compile_only or \
                    any(self.measures(kp, bench, config) for bench in kp.benches_for((shape, dtype))):
                needed.append((target, shape, dtype, config))
        return needed

    def merge_needed(self, kp: KernelPlan) -> bool:
        """Some planned result is not in the cache as planned, or it holds a local record no longer planned."""
        by_fingerprint = self._cache_entry(kp)[2]
        return any(self.replaced_here(kp)) or any(not _covers(by_fingerprint.get(u.fingerprint), u)
                                                  for u in kp.bench_units)

    def replaced_here(self, kp: KernelPlan) -> list[bool]:
        """Per record of the cache, whether this run's merge drops it: a record of a device this run
        tunes that the manifest no longer asks for (a dtype or shape it dropped, or a key or space
        it changed: this run's records replace it). Other devices' records stay, stale or not."""
        checked, devices = self.checked(kp), self.plan.device_keys
        return [kp.unplanned_local(r, devices) or (why is not None and r.device.key in devices)
                for r, why in zip(checked.cache.records, checked.stale)]


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


def _read_record(path: Path) -> TuningRecord | None:
    try:
        return cache_io.read_record(path)
    except Exception:  # a torn, foreign or forged file is simply not a finished result
        return None


def record_problem(spec: KernelSpec, code: str, record, versions_used: dict | None = None,
                   dependencies: dict[str, str] | None = None) -> str:
    """Why a record no longer answers for the current sources and manifest ('' if it does).
    The device and toolchain are the record's own unless ``versions_used`` overrides triton/torch;
    with the current ``dependencies`` (aot_tune.fingerprint), a code change names what changed."""
    versions_used = versions_used or {"triton": record.toolchain.triton, "torch": record.toolchain.torch}
    on = MeasuredOn(record.device.key, record.device.name, record.device.compute_capability,
                    record.device.backend, versions_used["triton"], versions_used["torch"])
    shape = record_full_shape(record)
    if bench_fingerprint(spec, code, shape, record.dtype, on) != record.fingerprint:
        recorded = json.loads(record.search.settings) if record.HasField("search") else {"strategy": "exhaustive"}
        if recorded != spec.search.canonical():
            return f"search settings changed (record: {_settings_text(recorded)}; manifest: " \
                   f"{_settings_text(spec.search.canonical())})"
        return _what_changed(spec, record, versions_used, dependencies)
    planned = spec.space.configs_for(spec.shape_dict(shape))
    if spec.search.exhaustive:
        if {m.config.id for m in record.measurements} != {c.id for c in planned}:
            return "config space changed"
    elif not search.covers(record, planned):
        return "config space changed"
    return ""


def _what_changed(spec: KernelSpec, record, versions_used: dict, dependencies: dict[str, str] | None) -> str:
    """Name the input that moved a record's fingerprint, as far as the record tells."""
    bench = spec.bench
    recorded_bench = (record.bench.warmup_ms, record.bench.rep_ms, record.bench.l2_flush,
                      record.bench.l2_flush_bytes or None)
    if recorded_bench != (bench.warmup_ms, bench.rep_ms, bench.l2_flush, bench.l2_flush_bytes):
        return "bench settings changed"
    toolchain = (record.toolchain.triton, record.toolchain.torch)
    if toolchain != (versions_used["triton"], versions_used["torch"]):
        return (f"toolchain changed (measured with triton {toolchain[0]}, torch {toolchain[1]}; installed: "
                f"triton {versions_used['triton']}, torch {versions_used['torch']})")
    if dependencies is not None and record.dependencies:
        before = {d.name: d.digest for d in record.dependencies}
        changed = []
        for name, part in dependencies.items():
            earlier = before.get(name)
            if earlier is None:
                changed.append(f"{name} added")
            elif earlier != part:
                changed.append(f"{name} {earlier} -> {part}" if name.startswith("distribution ") else f"{name} changed")
        changed += [f"{name} removed" for name in before if name not in dependencies]
        if changed:
            more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
            return "code changed: " + ", ".join(changed[:3]) + more
    return "kernel source, manifest or toolchain changed"


def _settings_text(settings: dict) -> str:
    """``surrogate budget={"configs":40} seed=0 transfer=true``"""
    rest = (f"{k}={json.dumps(settings[k], sort_keys=True, separators=(',', ':'))}" for k in sorted(settings)
            if k != "strategy")
    return " ".join([str(settings.get("strategy", "?")), *rest])
