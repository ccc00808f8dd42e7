"""Tests for aot_tune.cache (protobuf tuning records on disk) and aot_tune.fileio.write_atomic."""

from __future__ import annotations

import os
import random

import pytest

from aot_tune import cache as cache_io
from aot_tune import fileio
from aot_tune.errors import TuneError
from aot_tune.tuning_schema import Config, TuningCache, TuningRecord


def make_record(kernel: str = "gemm", device: str = "h100-sxm", dtype: str = "float16",
                shape: tuple[int, ...] = (256, 256, 256), measured_at: str = "2025-01-01T00:00:00+00:00",
                best: dict | None = None, fingerprint: str = "fp") -> TuningRecord:
    record = TuningRecord(kernel=kernel, dtype=dtype, fingerprint=fingerprint, measured_at=measured_at)
    record.key_names.extend(["M", "N", "K"][: len(shape)])
    record.shape.extend(shape)
    record.device.key = device
    record.device.name = "NVIDIA H100 80GB HBM3" if device == "h100-sxm" else device
    record.device.compute_capability = "9.0"
    record.device.backend = "cuda"
    record.toolchain.triton = "3.6.0"
    if best is not None:
        cache_io.config_to_proto("cfg-best", best, record.best)
    measurement = record.measurements.add(status="ok", median_ms=1.5, min_ms=1.25, mean_ms=1.6,
                                          stdev_ms=0.125, runs=4)
    cache_io.config_to_proto("cfg-best", best or {"BLOCK": 64}, measurement.config)
    measurement.times_ms.extend([1.25, 1.5, 1.5, 2.125])
    return record


def many_records() -> list[TuningRecord]:
    records = []
    for kernel in ("softmax", "gemm"):
        for device in ("interpreter", "h100-sxm"):
            for dtype in ("float32", "bfloat16", "float16"):
                for shape in ((4096, 64, 64), (256, 4096, 64), (256, 64, 64), (1024, 64, 64)):
                    records.append(make_record(kernel, device, dtype, shape, best={"BLOCK": shape[0] // 4}))
    return records


# --------------------------------------------------------------------------- format by extension


@pytest.mark.parametrize("name", ["c.txtpb", "c.textproto", "c.pbtxt"])
def test_text_suffixes_write_text_and_round_trip(tmp_path, name) -> None:
    path = tmp_path / name
    cache = cache_io.sorted_cache([make_record(best={"BLOCK": 64})])
    assert cache_io.is_text(path)
    assert cache_io.write_cache(cache, path) is True
    text = path.read_text()
    assert text.startswith("schema_version: 1\n")
    assert 'kernel: "gemm"' in text
    assert cache_io.read_cache(path) == cache


@pytest.mark.parametrize("name", ["c.pb", "c.bin", "cache", "c.txtpb.bak", "c.txt"])
def test_other_suffixes_write_binary_and_round_trip(tmp_path, name) -> None:
    path = tmp_path / name
    cache = cache_io.sorted_cache([make_record(best={"BLOCK": 64})])
    assert not cache_io.is_text(path)
    cache_io.write_cache(cache, path)
    assert path.read_bytes() == cache.SerializeToString(deterministic=True)
    assert b"schema_version" not in path.read_bytes()
    assert cache_io.read_cache(path) == cache


def test_text_output_is_deterministic_and_sorted_regardless_of_insertion_order(tmp_path) -> None:
    records = many_records()
    outputs = []
    for seed in range(3):
        shuffled = list(records)
        random.Random(seed).shuffle(shuffled)
        path = tmp_path / f"c{seed}.txtpb"
        cache_io.write_cache(cache_io.merge_records([], shuffled), path)
        outputs.append(path.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]

    order = [cache_io.record_identity(r) for r in cache_io.read_cache(tmp_path / "c0.txtpb").records]
    assert order == sorted(order)
    assert len(order) == len(records)
    # numeric shape order, not string order: 256 before 1024 before 4096
    first_shapes = [o[-2] for o in order[:4]]
    assert first_shapes == [(256, 64, 64), (256, 4096, 64), (1024, 64, 64), (4096, 64, 64)]
    assert [o[:3] for o in order[:1]] == [("gemm", "h100-sxm", "bfloat16")]


def test_sorted_cache_sets_the_schema_version() -> None:
    assert cache_io.sorted_cache([]).schema_version == cache_io.SCHEMA_VERSION == 1


@pytest.mark.parametrize("name", ["c.txtpb", "c.pb"])
def test_write_cache_leaves_an_unchanged_file_alone(tmp_path, name) -> None:
    path = tmp_path / name
    cache = cache_io.sorted_cache(many_records()[:5])
    assert cache_io.write_cache(cache, path) is True
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = path.stat().st_mtime_ns

    assert cache_io.write_cache(cache, path) is False
    assert path.stat().st_mtime_ns == before

    changed = cache_io.sorted_cache(many_records()[:6])
    assert cache_io.write_cache(changed, path) is True
    assert path.stat().st_mtime_ns != before
    assert cache_io.read_cache(path) == changed


# --------------------------------------------------------------------------- merging


def test_merge_newer_incoming_replaces() -> None:
    old = make_record(measured_at="2025-01-01T00:00:00+00:00", best={"BLOCK": 32})
    new = make_record(measured_at="2025-02-01T00:00:00+00:00", best={"BLOCK": 128})
    merged = cache_io.merge_records([old], [new])
    assert len(merged.records) == 1
    assert merged.records[0] == new


def test_merge_older_incoming_does_not_replace() -> None:
    old = make_record(measured_at="2025-01-01T00:00:00+00:00", best={"BLOCK": 32})
    new = make_record(measured_at="2025-02-01T00:00:00+00:00", best={"BLOCK": 128})
    merged = cache_io.merge_records([new], [old])
    assert len(merged.records) == 1
    assert merged.records[0] == new


def test_merge_keeps_different_identities_apart() -> None:
    a = make_record(device="h100-sxm", best={"BLOCK": 32})
    b = make_record(device="h200", best={"BLOCK": 64})
    c = make_record(device="h100-sxm", dtype="bfloat16", best={"BLOCK": 16})
    d = make_record(device="h100-sxm", shape=(512, 256, 256), best={"BLOCK": 8})
    e = make_record(device="h100-sxm", best={"BLOCK": 4})  # a's key, benchmarked with other rows
    cache_io.set_record_bench_dims(e, [("T", 16384)])
    merged = cache_io.merge_records([a], [b, c, d, e])
    assert len(merged.records) == 5
    key = ("M", "N", "K")
    assert {cache_io.record_identity(r) for r in merged.records} == {
        ("gemm", "h100-sxm", "float16", key, (256, 256, 256), ()),
        ("gemm", "h200", "float16", key, (256, 256, 256), ()),
        ("gemm", "h100-sxm", "bfloat16", key, (256, 256, 256), ()),
        ("gemm", "h100-sxm", "float16", key, (512, 256, 256), ()),
        ("gemm", "h100-sxm", "float16", key, (256, 256, 256), (("T", 16384),)),
    }
    assert cache_io.record_full_shape(e) == (256, 256, 256, 16384)
    assert cache_io.describe_record(e) == "gemm h100-sxm float16 256x256x256 (T=16384)"
    assert merged.schema_version == cache_io.SCHEMA_VERSION


def test_bench_dims_that_are_not_names_or_values_are_refused() -> None:
    bad_name = make_record(best={"BLOCK": 4})
    bad_name.bench_dims.add(name="M", int_value=4)  # a key dim's name
    assert "bench dims" in cache_io.record_defect(bad_name)
    bad_value = make_record(best={"BLOCK": 4})
    bad_value.bench_dims.add(name="T", float_value=1.5)
    assert "bench dims" in cache_io.record_defect(bad_value)
    good = make_record(best={"BLOCK": 4})
    cache_io.set_record_bench_dims(good, [("T", 4096), ("causal", True)])
    assert cache_io.record_defect(good) == ""


def test_records_of_another_key_never_stand_for_each_other() -> None:
    """After a key change (M, N, K) -> (N, M, K), equal values under other dims are other keys."""
    old = make_record(best={"BLOCK": 32})
    new = make_record(measured_at="2025-02-01T00:00:00+00:00", best={"BLOCK": 64})
    new.key_names[:] = ["N", "M", "K"]
    merged = cache_io.merge_records([old], [new])
    assert len(merged.records) == 2
    assert cache_io.record_identity(old) != cache_io.record_identity(new)


def test_without_samples_keeps_statistics_and_leaves_the_original() -> None:
    record = make_record(best={"BLOCK": 64})
    original = TuningRecord()
    original.CopyFrom(record)
    slim = cache_io.without_samples(record)

    assert record == original
    assert list(record.measurements[0].times_ms) == [1.25, 1.5, 1.5, 2.125]
    assert len(slim.measurements) == 1
    m = slim.measurements[0]
    assert list(m.times_ms) == []
    assert (m.median_ms, m.min_ms, m.stdev_ms, m.runs) == (1.5, 1.25, 0.125, 4)
    assert m.mean_ms == 1.6
    assert slim.best == record.best
    assert slim.fingerprint == record.fingerprint


# --------------------------------------------------------------------------- reading


def test_read_missing_file_gives_an_empty_cache(tmp_path) -> None:
    cache = cache_io.read_cache(tmp_path / "nope.pb")
    assert isinstance(cache, TuningCache)
    assert len(cache.records) == 0


@pytest.mark.parametrize("name,data", [
    ("bad.txtpb", b"this is { not a tuning cache"),
    ("bad.txtpb", b"\xff\xfe\x00garbage"),
    ("bad.pb", b"\xff\xff\xff\xff\xff\xff"),
])
def test_read_garbage_raises_a_tune_error_naming_file_and_fix(tmp_path, name, data) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(TuneError) as info:
        cache_io.read_cache(path)
    message = str(info.value)
    assert str(path) in message
    assert "fix:" in message


@pytest.mark.parametrize("name", ["new.txtpb", "new.pb"])
def test_newer_schema_version_raises(tmp_path, name) -> None:
    path = tmp_path / name
    newer = TuningCache(schema_version=cache_io.SCHEMA_VERSION + 1)
    newer.records.append(make_record())
    cache_io.write_cache(newer, path)
    with pytest.raises(TuneError) as info:
        cache_io.read_cache(path)
    assert str(path) in str(info.value)
    assert "fix:" in str(info.value)


def test_read_record_reads_one_binary_record(tmp_path) -> None:
    record = make_record(best={"BLOCK": 64})
    path = tmp_path / "r.pb"
    path.write_bytes(record.SerializeToString(deterministic=True))
    assert cache_io.read_record(path) == record


# --------------------------------------------------------------------------- configs


PARAMS = {"num_warps": 4, "BLOCK_M": 128, "scale": 0.5, "whole": 2.0, "EVEN_K": True, "MASKED": False,
          "zero": 0, "order": "row", "empty": ""}


def test_config_round_trip_keeps_values_and_types() -> None:
    message = Config()
    cache_io.config_to_proto("abc123", PARAMS, message)
    assert message.id == "abc123"
    assert [p.name for p in message.params] == sorted(PARAMS)
    back = cache_io.config_from_proto(message)
    assert back == PARAMS
    assert {k: type(v) for k, v in back.items()} == {k: type(v) for k, v in PARAMS.items()}


def test_config_kinds_map_to_the_matching_oneof() -> None:
    message = Config()
    cache_io.config_to_proto("x", PARAMS, message)
    kinds = {p.name: p.WhichOneof("value") for p in message.params}
    assert kinds == {"num_warps": "int_value", "BLOCK_M": "int_value", "zero": "int_value",
                     "scale": "float_value", "whole": "float_value", "EVEN_K": "bool_value",
                     "MASKED": "bool_value", "order": "string_value", "empty": "string_value"}


@pytest.mark.parametrize("name", ["c.txtpb", "c.pb"])
def test_config_survives_a_file_round_trip(tmp_path, name) -> None:
    record = make_record(best=PARAMS)
    path = tmp_path / name
    cache_io.write_cache(cache_io.sorted_cache([record]), path)
    back = cache_io.config_from_proto(cache_io.read_cache(path).records[0].best)
    assert back == PARAMS
    assert {k: type(v) for k, v in back.items()} == {k: type(v) for k, v in PARAMS.items()}


# --------------------------------------------------------------------------- write_atomic


def test_write_atomic_writes_bytes_and_str(tmp_path) -> None:
    path = tmp_path / "sub" / "out.bin"
    fileio.write_atomic(path, b"\x00\x01binary")
    assert path.read_bytes() == b"\x00\x01binary"
    fileio.write_atomic(path, "text é")
    assert path.read_text(encoding="utf-8") == "text é"
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.bin"]


def test_write_atomic_failure_keeps_old_file_and_removes_temp(tmp_path, monkeypatch) -> None:
    path = tmp_path / "out.txt"
    path.write_text("old content")

    def failing_replace(src, dst):
        assert os.path.exists(src)  # the temp file was written before the rename
        raise OSError("simulated failure")

    monkeypatch.setattr(fileio.os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated failure"):
        fileio.write_atomic(path, "new content")
    monkeypatch.undo()
    assert path.read_text() == "old content"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_write_atomic_honours_the_umask(tmp_path) -> None:
    old_umask = os.umask(0o022)
    try:
        fresh = tmp_path / "fresh.py"
        fileio.write_atomic(fresh, "x = 1\n")
        replaced = tmp_path / "replaced.py"
        replaced.write_text("x = 0\n")
        fileio.write_atomic(replaced, "x = 1\n")
    finally:
        os.umask(old_umask)
    assert fresh.stat().st_mode & 0o777 == 0o644
    assert replaced.stat().st_mode & 0o777 == 0o644
