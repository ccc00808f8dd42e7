"""The stages after the benches: a kernel's measurements merged into its cache, and its tables
written (the generated module and the ``exports:`` files) from the records that answer the
manifest. Nothing tuned is dropped here without an ask (aot_tune.pipeline.guard)."""
from __future__ import annotations

from aot_tune import cache as cache_io, exports
from aot_tune.codegen import render_kernel, write_module
from aot_tune.errors import TuneError
from aot_tune.pipeline.plan import KernelPlan, Plan
from aot_tune.pipeline.staleness import Staleness
from aot_tune.pipeline.guard import stale_tables_message


class Tables:
    """The merge and generate stages of one run."""

    def __init__(self, plan: Plan, staleness: Staleness) -> None:
        self.plan = plan
        self.staleness = staleness

    def merge(self, kp: KernelPlan) -> None:
        """Fold this run's bench outputs into the kernel's cache; drop this device's records the
        manifest no longer asks for (another dtype, shape, key or space: this run's replace them)."""
        existing = self.staleness.cache(kp)
        kept = [r for r, gone in zip(existing.records, self.staleness.replaced_here(kp)) if not gone]
        fresh = []
        for unit in kp.bench_units:
            if unit.output.exists():
                try:
                    record = cache_io.read_record(unit.output)
                except TuneError:  # torn or foreign: not a finished result (its bench reruns next time)
                    continue
                if record.fingerprint == unit.fingerprint and cache_io.record_answers(record, kp.spec):
                    fresh.append(cache_io.without_samples(record))
        merged = cache_io.merge_records(kept, fresh)
        # a fresh clone's exports are recorded as ours before the cache moves on
        exports.claim(self.plan.manifest.root, kp.spec, self.staleness.checked(kp).current())
        cache_io.write_cache(merged, kp.cache_path)

    def generate(self, kp: KernelPlan) -> str:
        """Write the generated module and the kernel's exports, each file checked ours before any
        is written; refused (the reason, one line) while the module holds tables of devices the
        manifest made stale. '' when written."""
        checked = self.staleness.checked(kp)
        refused = stale_tables_message(kp.spec, kp.generated_path, checked, self.plan.manifest.path.name)
        if refused:
            return refused
        try:
            prepared = exports.prepare(self.plan.manifest.root, kp.spec, checked.current())
            write_module(kp.generated_path, self._render(kp))
            prepared.write()
        except TuneError as exc:
            return str(exc)
        return ""

    def generate_needed(self, kp: KernelPlan) -> bool:
        if exports.stale(self.plan.manifest.root, kp.spec, self.staleness.checked(kp).current()):
            return True
        try:
            return kp.generated_path.read_text() != self._render(kp)
        except FileNotFoundError:
            return True

    def _render(self, kp: KernelPlan) -> str:
        return render_kernel(kp.spec, self.staleness.checked(kp), self.plan.manifest.path.name)
