"""The plan and its staleness checks, on this repository's manifest and checked-in H200 tables."""
from __future__ import annotations

import os
import time

import pytest
from tunerun import REPO, gemm_manifest

from aot_tune import triton_compat
from aot_tune.bench.runner import DeviceModel
from aot_tune.cache import read_cache
from aot_tune.manifest import load_manifest
from aot_tune.pipeline import plan as plan_module
from aot_tune.pipeline.staleness import Staleness


def h200_plan(monkeypatch):
    manifest = load_manifest(REPO / "tuning.yaml")
    records = [r for r in read_cache(REPO / "generated" / "gemm.tuning.pb").records if r.device.key == "h200"]
    if not records:
        pytest.skip("no H200 table checked in")
    device = DeviceModel("cuda", "h200", records[0].device.name, records[0].device.compute_capability, 1)
    versions = {"triton": records[0].toolchain.triton, "torch": records[0].toolchain.torch}
    monkeypatch.setattr(triton_compat, "versions", lambda: versions)
    return plan_module.build_plan(manifest, device, manifest.kernels)


def test_checked_in_gpu_tables_make_a_fresh_tree_a_fast_no_op(monkeypatch, tmp_path):
    """A fresh clone on the GPU host: no .aot_tune/ outputs, every answer in the caches. No config
    is stale, no launch needs its specialization captured (that would import torch), and deciding
    so for ~2700 launches and 23 bench units must stay far under a second. The only work a bench
    may have left is its baselines, if its record was measured before they were declared. Kernels
    with no H200 table yet (fp8_gemm until it is tuned there) are left out."""
    monkeypatch.setattr(plan_module, "WORK_DIR", str(tmp_path / "no-outputs"))
    plan = h200_plan(monkeypatch)
    staleness = Staleness(plan)
    plan.kernels = [kp for kp in plan.kernels if any(r.device.key == "h200" for r in staleness.cache(kp).records)]
    assert len(plan.kernels) >= 4
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
    staleness = Staleness(plan)
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
    device = DeviceModel("cuda", "h200", records[0].device.name, records[0].device.compute_capability, 1)
    monkeypatch.setattr(triton_compat, "versions", lambda: {"triton": "9.9.9", "torch": records[0].toolchain.torch})
    plan = plan_module.build_plan(manifest, device, manifest.kernels)
    staleness = Staleness(plan)
    assert all(not staleness.bench_done(kp, u) for kp in plan.kernels for u in kp.bench_units)


BUDGETED = gemm_manifest("""\
    space:
      BLOCK_M: [32, 64, 128]
      BLOCK_N: [32, 64, 128]
      BLOCK_K: [32, 64]
      num_warps: [4, 8]
    shapes:
      - grid: {M: [64, 256, 1024, 4096], N: [4096], K: [4096]}
    search: SEARCH
""")


def budgeted_plan(tmp_path, search: str):
    from tunerun import make_project

    from aot_tune.bench.runner import INTERPRETER_DEVICE

    project = make_project(tmp_path / search.replace(" ", "").replace(":", "-")[:40], BUDGETED.replace("SEARCH", search))
    manifest = load_manifest(project / "tuning.yaml")
    return plan_module.build_plan(manifest, INTERPRETER_DEVICE, manifest.kernels)


def test_exhaustive_fingerprints_ignore_the_search_block_and_budgeted_ones_depend_on_it(tmp_path):
    fingerprints = {}
    for search in ("{strategy: exhaustive}", "{strategy: random, budget: {configs: 5}}",
                   "{strategy: random, budget: {configs: 6}}", "{strategy: random, budget: {configs: 5}, seed: 1}",
                   "{strategy: surrogate, budget: {configs: 5}}"):
        fingerprints[search] = [u.fingerprint for u in budgeted_plan(tmp_path, search).kernels[0].bench_units]
    plain = budgeted_plan(tmp_path, "{strategy: exhaustive}\n    dtypes: [float16]").kernels[0].bench_units
    assert [u.fingerprint for u in plain] == fingerprints["{strategy: exhaustive}"]
    assert len({tuple(f) for f in fingerprints.values()}) == len(fingerprints)


def test_random_draws_alone_are_compiled_and_seeded_benches_wait_for_their_anchors(tmp_path):
    from aot_tune.workers.pools import Executors
    from aot_tune.rules import bench as bench_rule
    from aot_tune.pipeline.session import TuneSession

    random_plan = budgeted_plan(tmp_path, "{strategy: random, budget: {configs: 5}}")
    kp = random_plan.kernels[0]
    assert all(len(u.probes) == 5 and not u.sources for u in kp.bench_units)
    drawn = {c for u in kp.bench_units for c in u.probes}
    assert {launch[3] for launch in kp.unspecialized} == drawn  # only the draws are ever compiled
    surrogate_plan = budgeted_plan(tmp_path, "{strategy: surrogate, budget: {configs: 5}}")
    kp = surrogate_plan.kernels[0]
    assert [u.probes == u.configs for u in kp.bench_units] == [True] * 4
    anchors = ((256, 4096, 4096), (4096, 4096, 4096))  # the medoid (ties: the smaller), then the farthest
    assert {u.shape[0]: u.sources for u in kp.bench_units} == {64: anchors, 256: (), 1024: anchors, 4096: ()}
    session = TuneSession(surrogate_plan, Executors(surrogate_plan.device, tmp_path / "triton", 1))
    tasks = {t["name"]: t for t in bench_rule.tasks(session) if t.get("name")}
    for unit in kp.bench_units:
        deps = [d for d in tasks[unit.name.partition(":")[2]]["task_dep"] if d.startswith("bench:")]
        assert deps == [kp.bench_of((s, unit.dtype), unit.device).name for s in unit.sources]
    first = [name.rsplit(":", 1)[1] for name in tasks][:2]  # doit dispatches anchors first
    assert sorted(first) == ["256x4096x4096", "4096x4096x4096"]


def test_a_budgeted_search_is_done_when_it_searched_exactly_the_planned_candidates(tmp_path):
    from aot_tune.search.strategies import candidate_digest
    from aot_tune.tuning_schema import TuningRecord

    plan = budgeted_plan(tmp_path, "{strategy: surrogate, budget: {configs: 5}}")
    kp = plan.kernels[0]
    unit = kp.bench_units[1]
    staleness = Staleness(plan)
    assert not staleness.bench_done(kp, unit) and staleness.configs_to_measure(kp, unit) == list(unit.configs)
    record = TuningRecord(fingerprint=unit.fingerprint)
    record.search.candidates = candidate_digest(unit.configs)
    unit.output.parent.mkdir(parents=True, exist_ok=True)
    unit.output.write_bytes(record.SerializeToString())
    assert staleness.bench_done(kp, unit) and staleness.configs_to_measure(kp, unit) == []
    record.search.candidates = candidate_digest(unit.configs[1:])  # a config was added since
    unit.output.write_bytes(record.SerializeToString())
    os.utime(unit.output, ns=(1, 1))  # same size: the changed mtime tells the memo to re-read
    assert not staleness.bench_done(kp, unit)
