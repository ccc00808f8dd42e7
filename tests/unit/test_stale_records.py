"""Stale or corrupt: the record check (aot_tune.cache) tells a record the manifest outgrew (another
key, a param the space lost or holds with another type) from a malformed or forged one, and the
guard (aot_tune.pipeline.guard) keeps a stale device's table from being dropped unasked."""
from __future__ import annotations

import pytest
from tunerun import make_project

from aot_tune import cache as cache_io
from aot_tune.cache import Mismatch
from aot_tune.codegen import render_module
from aot_tune.errors import TuneError
from aot_tune.manifest import load_manifest
from aot_tune.pipeline.staleness import manifest_changes
from aot_tune.pipeline.guard import entries_missing_from_cache, stale_tables_message
from aot_tune.tuning_schema import TuningCache, TuningRecord

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


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    root = make_project(tmp_path_factory.mktemp("project"), MANIFEST)
    return load_manifest(root / "tuning.yaml").kernel("vector_add")


def record(device: str = "interpreter", key: tuple[str, ...] = ("n",), shape: tuple = (4096,),
           params: dict | None = None) -> TuningRecord:
    rec = TuningRecord(kernel="vector_add", key_names=list(key), shape=list(shape), dtype="float32",
                       fingerprint="f" * 20, measured_at="2026-11-01T00:00:00+00:00")
    if device == "interpreter":
        rec.device.key, rec.device.name, rec.device.compute_capability = "interpreter", "Triton interpreter (CPU)", "cpu"
        rec.device.backend = "interpreter"
    else:
        rec.device.key, rec.device.name, rec.device.compute_capability, rec.device.backend = \
            "h200", "NVIDIA H200", "9.0", "cuda"
    m = rec.measurements.add(status="ok", median_ms=1.0, runs=10)
    cache_io.config_to_proto("abc123", params or {"BLOCK_SIZE": 256, "num_warps": 4}, m.config)
    rec.best.CopyFrom(m.config)
    return rec


def cache_of(*records) -> TuningCache:
    cache = TuningCache(schema_version=1)
    cache.records.extend(records)
    return cache


STALE = {
    "another key": (dict(key=("n", "m"), shape=(4096, 1)), False, Mismatch("key", "the key changed from [n, m] to [n]")),
    "a param the space lost": (dict(params={"BLOCK": 256, "num_warps": 4}), False,
                               Mismatch("space", "param BLOCK removed from the space")),
    "a param of another type": (dict(params={"BLOCK_SIZE": "256", "num_warps": 4}), False,
                                Mismatch("space", "param BLOCK_SIZE changed type (the space holds int, the records "
                                                  "string)")),
    "not every param of the space": (dict(params={"BLOCK_SIZE": 256}), True,
                                     Mismatch("space", "param num_warps added to the space")),
}


@pytest.mark.parametrize("case", sorted(STALE))
def test_a_record_the_manifest_outgrew_is_stale_not_corrupt(spec, tmp_path, case):
    fields, complete, expected = STALE[case]
    stale = record(**fields)
    assert cache_io.record_defect(stale, spec) == ""
    assert cache_io.record_mismatch(stale, spec, complete=complete) == expected
    assert cache_io.record_answers(stale, spec) == complete  # what a cache may hold need not set every param
    path = tmp_path / "vector_add.tuning.pb"
    current = record(shape=(65536,))
    cache_io.write_cache(cache_of(current, stale), path)
    checked = cache_io.read_checked(path, spec)  # read, not refused
    assert len(checked.cache.records) == 2
    assert [why is None for why in checked.stale] == [True, complete]
    assert cache_io.read_cache(path, spec) == checked.cache


def test_a_missing_param_is_stale_only_for_what_merges_let_in(spec):
    partial = record(params={"BLOCK_SIZE": 256})  # a configs: list may leave a launch option out
    assert cache_io.record_mismatch(partial, spec) is None
    assert cache_io.record_mismatch(partial, spec, complete=True).part == "space"


CORRUPT = {
    "values that do not fit its own key dims": lambda r: r.shape.append(7),
    "a param without a value": lambda r: r.best.params[0].ClearField("int_value"),
    "a device name with a line break": lambda r: setattr(r.device, "name", "NVIDIA H200\nimport os"),
    "a forged param name, under another key as well": lambda r: (r.key_names.append("m"), r.shape.append(1),
                                                                 setattr(r.best.params[0], "name", "x; import os")),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_a_malformed_record_is_corrupt_and_refused_with_restore_from_git(spec, tmp_path, case):
    bad = record(device="h200")
    CORRUPT[case](bad)
    assert cache_io.record_defect(bad, spec)
    assert cache_io.record_mismatch(bad, spec) is None  # corrupt, not stale: never read as a record
    path = tmp_path / "vector_add.tuning.pb"
    cache_io.write_cache(cache_of(record(), bad), path)
    with pytest.raises(TuneError) as info:
        cache_io.read_checked(path, spec)
    assert "record 1 (" in str(info.value) and "fix: restore the file from git" in str(info.value)


def test_tables_are_made_of_current_records_only(spec):
    checked = cache_io.check_cache(cache_of(record(), record(device="h200", params={"BLOCK": 256, "num_warps": 4})),
                                   "c", spec)
    assert [r.device.key for r in checked.current().records] == ["interpreter"]
    assert checked.current() is not checked.cache
    fresh = cache_io.check_cache(cache_of(record()), "c", spec)
    assert fresh.current() is fresh.cache  # nothing stale: nothing copied


def test_what_changed_is_one_change_per_edit_with_its_devices(spec):
    old_key = [(r, cache_io.record_mismatch(r, spec)) for r in (record(key=("n", "m"), shape=(1, 2)),
                                                                record("h200", key=("n", "m"), shape=(1, 2)))]
    (change,) = manifest_changes(spec, old_key, "tuning.yaml")
    assert change.where == f"tuning.yaml:{spec.key_line}" and change.devices == ("h200", "interpreter")
    assert change.line({"interpreter"}) == (
        f"vector_add: the key changed from [n, m] to [n] (tuning.yaml:{spec.key_line}): the tables of h200, "
        f"interpreter are stale; doit tune retunes this machine's device (interpreter); retune the others there, "
        f"or drop them with doit drop-device --kernel vector_add h200")
    assert change.line().endswith("fix: retune vector_add on h200, interpreter (doit tune vector_add there), or "
                                  "drop them with doit drop-device --kernel vector_add h200 interpreter")


# --------------------------------------------------------------------------- the guard


def shipped_under_old_key(tmp_path, spec):
    """A module written while the key was [n, m], with an interpreter and an H200 table."""
    old = [record(key=("n", "m"), shape=(4096, 1)), record("h200", key=("n", "m"), shape=(4096, 1))]
    path = tmp_path / "vector_add.py"
    path.write_text(render_module("vector_add", ("n", "m"), cache_of(*old), "tuning.yaml"))
    return path, old


def test_a_device_retuned_after_a_key_edit_loses_nothing_another_ones_stale_table_is_guarded(spec, tmp_path):
    module, (_, h200_old) = shipped_under_old_key(tmp_path, spec)
    cache = cache_of(record(), h200_old)  # the interpreter retuned under the manifest's key [n]
    assert entries_missing_from_cache(module, cache, spec) == {}
    message = stale_tables_message(spec, module, cache_io.check_cache(cache, "c", spec), "tuning.yaml")
    assert message == (f"generated/vector_add.py holds tables the manifest made stale (h200: 1 entry): the key "
                       f"changed from [n, m] to [n] (tuning.yaml:{spec.key_line}); writing it would drop them; fix: "
                       f"retune vector_add on h200 (doit tune vector_add there, with this cache), or drop them on "
                       f"purpose with `doit drop-device --kernel vector_add h200`")


def test_a_cache_that_lost_a_stale_device_still_reads_as_lost(spec, tmp_path):
    module, _ = shipped_under_old_key(tmp_path, spec)
    cache = cache_of(record())  # the H200's records are gone: deleted, not retuned
    assert entries_missing_from_cache(module, cache, spec) == {"h200": 1}
    assert stale_tables_message(spec, module, cache_io.check_cache(cache, "c", spec), "tuning.yaml") == ""


def test_a_table_retuned_under_the_manifests_key_is_not_at_risk(spec, tmp_path):
    module = tmp_path / "vector_add.py"
    current = [record(), record("h200")]
    module.write_text(render_module("vector_add", ("n",), cache_of(*current), "tuning.yaml"))
    leftover = record("h200", key=("n", "m"), shape=(4096, 1))  # a stale record beside the current one
    checked = cache_io.check_cache(cache_of(*current, leftover), "c", spec)
    assert stale_tables_message(spec, module, checked, "tuning.yaml") == ""
    assert entries_missing_from_cache(module, checked.cache, spec) == {}
