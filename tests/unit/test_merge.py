"""Merging caches from other machines: the documented conflict policy, and a table per device."""
from __future__ import annotations

import importlib.util

import pytest
from tunerun import make_project

from aot_tune import cache as cache_io
from aot_tune.tables.check import check
from aot_tune.errors import TuneError
from aot_tune.sources import SourceIndex
from aot_tune.manifest import load_manifest
from aot_tune.tables.exchange import cache_files, merge_into_project
from aot_tune.fingerprint import MeasuredOn, bench_fingerprint, measured_code
from aot_tune.tuning_schema import TuningRecord

MANIFEST = """\
version: 1
kernels:
  vector_add:
    kernel: kernels.vector_add:add_kernel
    launch: kernels.vector_add:add
    inputs: kernels.vector_add:make_inputs
    reference: kernels.vector_add:reference
    key: [n]
    space: {BLOCK_SIZE: [256, 1024], num_warps: [4]}
    shapes: [{n: 4096}]
"""
H100 = MeasuredOn("h100-sxm", "NVIDIA H100 80GB HBM3", "9.0", "cuda", "3.6.0", "2.11.0")


@pytest.fixture
def manifest(tmp_path):
    return load_manifest(make_project(tmp_path, MANIFEST) / "tuning.yaml")


def record(manifest, best_block: int, measured_at: str, current: bool = True, on: MeasuredOn = H100) -> TuningRecord:
    spec = manifest.kernel("vector_add")
    code = measured_code(SourceIndex(manifest.root), spec)
    fingerprint = bench_fingerprint(spec, code, (4096,), "float16", on) if current else "0" * 20
    rec = TuningRecord(kernel="vector_add", key_names=["n"], shape=[4096], dtype="float16",
                       fingerprint=fingerprint, measured_at=measured_at)
    rec.device.key, rec.device.name, rec.device.compute_capability, rec.device.backend = \
        on.key, on.name, on.compute_capability, on.backend
    rec.toolchain.triton, rec.toolchain.torch = on.triton, on.torch
    for config in spec.space.configs():
        block = config.as_dict()["BLOCK_SIZE"]
        m = rec.measurements.add(status="ok", median_ms=1.0 if block == best_block else 2.0, runs=10)
        cache_io.config_to_proto(config.id, config.as_dict(), m.config)
        if block == best_block:
            rec.best.CopyFrom(m.config)
    return rec


def write(path, *records):
    cache_io.write_cache(cache_io.sorted_cache(records), path)
    return path


def best_block(manifest, device="h100-sxm") -> int:
    (rec,) = [r for r in cache_io.read_cache(manifest.root / "generated/vector_add.tuning.pb").records
              if r.device.key == device]
    return cache_io.config_from_proto(rec.best)["BLOCK_SIZE"]


def test_other_gpus_tables_are_added_and_generated(manifest, tmp_path):
    h200 = MeasuredOn("h200", "NVIDIA H200", "9.0", "cuda", "3.6.0", "2.11.0")
    theirs = write(tmp_path / "other.tuning.pb", record(manifest, 256, "2026-11-20T00:00:00+00:00"),
                   record(manifest, 1024, "2026-11-20T00:00:00+00:00", on=h200))
    summary = merge_into_project(manifest, cache_files([str(theirs)]))
    assert (summary.added, summary.replaced) == (2, 0)
    spec = importlib.util.spec_from_file_location("merged_va", manifest.root / "generated/vector_add.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert set(module.TABLES) == {"h100-sxm", "h200"}
    assert module.TABLES["h100-sxm"][(4096, "float16")]["BLOCK_SIZE"] == 256
    assert check(manifest).ok  # fingerprints recompute for both devices


def test_same_fingerprint_newer_wins(manifest, tmp_path):
    ours = manifest.root / "generated/vector_add.tuning.pb"
    write(ours, record(manifest, 256, "2026-11-20T00:00:00+00:00"))
    older = write(tmp_path / "older.tuning.pb", record(manifest, 1024, "2026-11-19T00:00:00+00:00"))
    assert merge_into_project(manifest, cache_files([str(older)])).kept == 1
    assert best_block(manifest) == 256
    newer = write(tmp_path / "newer.tuning.pb", record(manifest, 1024, "2026-11-21T00:00:00+00:00"))
    assert merge_into_project(manifest, cache_files([str(newer)])).replaced == 1
    assert best_block(manifest) == 1024


def test_different_fingerprints_the_current_one_wins_even_if_older(manifest, tmp_path):
    ours = manifest.root / "generated/vector_add.tuning.pb"
    write(ours, record(manifest, 256, "2026-11-19T00:00:00+00:00"))
    stale_but_newer = write(tmp_path / "stale.tuning.pb",
                            record(manifest, 1024, "2026-11-21T00:00:00+00:00", current=False))
    assert merge_into_project(manifest, cache_files([str(stale_but_newer)])).kept == 1
    assert best_block(manifest) == 256


def test_nothing_to_merge_is_a_clear_error(manifest, tmp_path):
    with pytest.raises(TuneError, match="no such cache file"):
        cache_files([str(tmp_path / "missing.pb")])
