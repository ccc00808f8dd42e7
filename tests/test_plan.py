"""The plan and its staleness checks, on this repository's manifest and checked-in H200 tables."""
from __future__ import annotations

import time

import pytest
from tunerun import REPO

from aot_tune import plan as plan_module
from aot_tune.cache import read_cache
from aot_tune.hardware import LocalDevice
from aot_tune.manifest import load_manifest


def h200_plan(monkeypatch):
    manifest = load_manifest(REPO / "tuning.yaml")
    records = [r for r in read_cache(REPO / "generated" / "gemm.tuning.pb").records if r.device.key == "h200"]
    if not records:
        pytest.skip("no H200 table checked in")
    device = LocalDevice("cuda", "h200", records[0].device.name, records[0].device.compute_capability, 1)
    versions = {"triton": records[0].toolchain.triton, "torch": records[0].toolchain.torch}
    monkeypatch.setattr(plan_module, "versions", lambda: versions)
    return plan_module.build_plan(manifest, device, manifest.kernels)


def test_checked_in_gpu_tables_make_a_fresh_tree_a_fast_no_op(monkeypatch, tmp_path):
    """A fresh clone on the GPU host: no .aot_tune/ outputs, every answer in the caches. No config
    is stale, no launch needs its specialization captured (that would import torch), and deciding
    so for ~2700 launches and 23 bench units must stay far under a second. The only work a bench
    may have left is its baselines, if its record was measured before they were declared."""
    monkeypatch.setattr(plan_module, "WORK_DIR", str(tmp_path / "no-outputs"))
    plan = h200_plan(monkeypatch)
    staleness = plan_module.Staleness(plan)
    start = time.perf_counter()
    to_specialize = [launch for kp in plan.kernels for launch in staleness.launches_to_specialize(kp)]
    stale_compiles = [u.name for kp in plan.kernels for u in kp.compile_units if staleness.compile_needed(kp, u)]
    configs_left = [u.name for kp in plan.kernels for u in kp.bench_units if staleness.configs_to_measure(kp, u)]
    stale_benches = {u.name for kp in plan.kernels for u in kp.bench_units if not staleness.bench_done(kp, u)}
    baselines_only = {u.name for kp in plan.kernels for u in kp.bench_units if staleness.baselines_to_measure(kp, u)}
    merges = {kp.spec.name for kp in plan.kernels if staleness.merge_needed(kp)}
    elapsed = time.perf_counter() - start
    assert (to_specialize, stale_compiles, configs_left) == ([], [], [])
    assert stale_benches == baselines_only
    assert merges == {name.split(":")[1] for name in baselines_only}
    assert sum(len(kp.unspecialized) for kp in plan.kernels) > 2000  # all unknown, none needed
    assert elapsed < 0.5, f"staleness checks took {elapsed:.2f} s"


def test_a_new_config_is_the_only_one_to_measure(monkeypatch):
    plan = h200_plan(monkeypatch)
    staleness = plan_module.Staleness(plan)
    kp = next(k for k in plan.kernels if k.spec.name == "gemm")
    unit = kp.bench_units[0]
    extra = type(unit.configs[0]).from_dict({**unit.configs[0].as_dict(), "GROUP_M": 4})
    grown = type(unit)(unit.kernel, unit.shape, unit.dtype, unit.device, (*unit.configs, extra),
                       unit.fingerprint, unit.output)
    assert staleness.configs_to_measure(kp, grown) == [extra]
    assert not staleness.bench_done(kp, grown)


def test_a_new_triton_version_rebenches_everything_on_that_device(monkeypatch):
    records = [r for r in read_cache(REPO / "generated" / "gemm.tuning.pb").records if r.device.key == "h200"]
    if not records:
        pytest.skip("no H200 table checked in")
    manifest = load_manifest(REPO / "tuning.yaml")
    device = LocalDevice("cuda", "h200", records[0].device.name, records[0].device.compute_capability, 1)
    monkeypatch.setattr(plan_module, "versions", lambda: {"triton": "9.9.9", "torch": records[0].toolchain.torch})
    plan = plan_module.build_plan(manifest, device, manifest.kernels)
    staleness = plan_module.Staleness(plan)
    assert all(not staleness.bench_done(kp, u) for kp in plan.kernels for u in kp.bench_units)
