"""Tests for ``aot_tune record``'s parts without running a workload: the recording files, launch
ids, the dtype code of the ``arg_dtypes`` key dim, folding recorded kernels into tuning.yaml,
reading the hook's raw lines, ``aot_tune.use_tables`` on a duck-typed autotuner, the check of
several outputs, and the replay launcher's binding to the manifest folder. CPU only, no
subprocess, no doit (tests/pipeline/test_recorded_workload.py runs the whole thing)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from aot_tune import codegen, use_tables
from aot_tune.bench.engine.check import Comparison
from aot_tune.build.loading import resolve
from aot_tune.cache import config_to_proto, set_record_shape
from aot_tune.errors import TuneError
from aot_tune.manifest import load_manifest
from aot_tune.record import replay
from aot_tune.record.entries import fold, read_raw
from aot_tune.record.recording import (Argument, RecordedKernel, RecordedLaunch, TensorSpec, read_recording,
                                       recording_path, write_recording)
from aot_tune.runtime.autotuners import dtype_code, dtype_strings
from aot_tune.tuning_schema import TuningCache, TuningRecord

REF = "mylib.ops:_gather_kernel"
CONFIGS = ({"BLOCK": 16, "num_warps": 1, "num_stages": 1}, {"BLOCK": 32, "num_warps": 2, "num_stages": 1})


def launch(n: int = 64, index: tuple = (3, 1, 2, 0), data: tuple[float, float] = (0.0, 0.5), *,
           small: tuple = (0.5, 2.0), key_value=None) -> RecordedLaunch:
    """A gather-like launch: a float tensor (by its statistics), an int32 index tensor and a small
    float tensor (by value), the size ``n`` (the key) and a None."""
    mean, std = data
    arguments = (Argument("X", tensor=TensorSpec((n, 4), (4, 1), "float32", None, -1.0, 1.0, mean, std)),
                 Argument("IDX", tensor=TensorSpec((len(index),), (1,), "int32", index)),
                 Argument("W", tensor=TensorSpec((len(small),), (1,), "float32", small)),
                 Argument("Y", same_as="X"),
                 Argument("n", scalar=n if key_value is None else key_value),
                 Argument("BIAS", scalar=None))
    return RecordedLaunch(arguments, ((n // 16,), None), (n, "torch.float32", "torch.int32", "torch.float32"),
                          dict(CONFIGS[0]), "first", ("X",), {"EXTRA": 1})


def kernel(*launches: RecordedLaunch, ref: str = REF, configs: tuple = CONFIGS) -> RecordedKernel:
    return RecordedKernel(ref, ("n",), configs, ("Y",), ("X",), ("pre_hook",),
                          {item.launch_id(ref): item for item in launches})


# --------------------------------------------------------------------------- recordings


def test_a_recorded_kernel_round_trips_through_json() -> None:
    original = kernel(launch(64), launch(128))
    again = RecordedKernel.from_json(json.loads(json.dumps(original.as_json())))
    assert again == original
    one = next(iter(original.launches.values()))
    assert RecordedLaunch.from_json(json.loads(json.dumps(one.as_json()))) == one
    assert one.dtypes() == ["float32", "int32", "float32", "float32"]  # the alias counts, as the key's does
    assert one.primary_dtype() == "float32"


def test_a_recording_file_is_written_deterministically_and_read_back(tmp_path: Path) -> None:
    path = recording_path(tmp_path, "gather")
    assert path == tmp_path / "recordings" / "gather.json"
    first, second = launch(64), launch(128)
    assert write_recording(path, kernel(first, second))
    text = path.read_bytes()
    assert not write_recording(path, kernel(second, first))  # the same launches, another order: no write
    assert path.read_bytes() == text
    assert read_recording(path) == kernel(first, second)
    lines = text.decode().splitlines()
    assert sum(line.startswith(' "L') for line in lines) == 2  # a launch a line


def test_compile_seconds_are_kept_from_the_first_recording_that_saw_a_compile(tmp_path: Path) -> None:
    manifest = tmp_path / "tuning.yaml"
    path = recording_path(tmp_path, "_gather_kernel")
    fold(manifest, [kernel(launch(64))], target="sm90")  # recorded with a warm Triton cache: no compile seen
    assert read_recording(path).compile_s == {} and "compile_s" not in path.read_text()
    timed = replace(kernel(launch(64)), compile_s={"sm90": 2.5})
    before = manifest.read_bytes()
    folded = fold(manifest, [timed], target="sm90")  # no new launch, but its first compile seconds
    assert folded.timed == ["_gather_kernel"] and not folded.added
    assert folded.lines() == ["kernels._gather_kernel: its compile seconds on this GPU recorded"]
    assert read_recording(path).compile_s == {"sm90": 2.5} and manifest.read_bytes() == before
    text = path.read_bytes()
    again = fold(manifest, [replace(kernel(launch(64), launch(128)), compile_s={"sm90": 9.0, "sm100": 4.0})],
                 target="sm90")  # a new launch: the kept seconds stay, another target's join them
    assert again.added == {"_gather_kernel": 1} and not again.timed
    assert read_recording(path).compile_s == {"sm90": 2.5, "sm100": 4.0}
    fold(manifest, [replace(kernel(launch(64), launch(128)), compile_s={"sm90": 7.0})], target="sm90")
    assert path.read_bytes() != text and read_recording(path).compile_s == {"sm90": 2.5, "sm100": 4.0}
    recorded = {"recorded": launch(128).launch_id(REF)}
    assert replay.compile_seconds(str(tmp_path), recorded) == {"sm90": 2.5, "sm100": 4.0}
    assert replay.compile_seconds(str(tmp_path), {"recorded": "Lno_such_launch"}) == {}


@pytest.mark.parametrize("value", ['-1.0', '"fast"', 'NaN'])
def test_a_recording_with_a_bad_compile_time_is_one_clear_error(tmp_path: Path, value: str) -> None:
    path = recording_path(tmp_path, "gather")
    write_recording(path, replace(kernel(launch(64)), compile_s={"sm90": 1.0}))
    path.write_text(path.read_text().replace('"sm90": 1.0', f'"sm90": {value}'))
    with pytest.raises(TuneError, match="not a recording aot_tune can read"):
        read_recording(path)
    assert replay.compile_seconds(str(tmp_path), {"recorded": launch(64).launch_id(REF)}) == {}  # the forecast goes on


#: Run in a fresh process: Triton decides at import whether it interprets, and these tests' does.
TIMED_COMPILE = """
import json, sys, torch
from triton import knobs
from aot_tune import triton_compat
from aot_tune.record.capture import Recorder
from aot_tune.triton_compat.autotuner_hook import watch_compiles
import timedlib

recorder, earlier = Recorder(sys.argv[1]), []
knobs.compilation.listener = lambda **event: earlier.append(event["cache_hit"])
watch_compiles(recorder.compiled)
x, idx, y = torch.randn(64), torch.arange(64, dtype=torch.int32), torch.empty(64)
done = recorder(timedlib._gather_kernel, (x, idx, y, 64, 2.0), {"grid": (2,)}, (64, "torch.float32"),
                timedlib.CONFIGS[0], "first")
meta = [torch.empty_like(t, device="meta") for t in (x, idx, y)]
with triton_compat.target_driver(90):
    timedlib._gather_kernel.fn.warmup(*meta, 64, 2.0, BLOCK=32, grid=(2,))
    timedlib._gather_kernel.fn.warmup(*meta, 64, 2.0, BLOCK=32, grid=(2,))  # compiled already: no compile
    timedlib._scale_inplace_kernel.fn.warmup(meta[0], 64, 2.0, BLOCK=32, grid=(2,))  # never launched here
done()
print(json.dumps(earlier))
"""


def test_a_recorded_kernels_compile_is_timed_by_the_recorder(tmp_path: Path) -> None:
    """A real compile (cross-compiled for sm90) of a kernel the recorder saw launched becomes a
    line of the raw file; a compile of a kernel it did not see adds nothing; a listener installed
    before is still called."""
    (tmp_path / "timedlib.py").write_text((Path(__file__).parents[1] / "fixtures" / "reclib" / "ops.py").read_text())
    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps({"target": "sm90"}) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path / "triton-cache"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(Path(__file__).parents[2])]))
    proc = subprocess.run([sys.executable, "-c", TIMED_COMPILE, str(raw)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == [False, False]  # two compiles, the earlier listener told
    lines = [json.loads(line) for line in raw.read_text().splitlines()]
    (compiled,) = [line["compiled"] for line in lines if "compiled" in line]
    assert compiled["kernel"] == "timedlib:_gather_kernel" and 0 < compiled["seconds"] < 120
    (found,) = read_raw(raw).kernels
    assert found.compile_s == {"sm90": compiled["seconds"]}


@pytest.mark.parametrize("text", ["{not json", '{"format": 99, "kernel": "m:k"}', '{"format": 1}', "[]"])
def test_a_corrupt_recording_is_one_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "recordings" / "gather.json"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(TuneError) as err:
        read_recording(path)
    message = str(err.value)
    assert str(path) in message and "not a recording aot_tune can read" in message
    assert "fix:" in message and "\n" not in message


def test_launch_ids_are_stable_and_ignore_floating_data() -> None:
    base = launch(64)
    assert base.launch_id(REF) == launch(64).launch_id(REF) == "Lb9748d0d206c9e8"  # tuning.yaml names it
    assert launch(64, data=(5.0, 9.0)).launch_id(REF) == base.launch_id(REF)  # random data's statistics
    assert launch(64, small=(7.0, 8.0)).launch_id(REF) == base.launch_id(REF)  # small floats kept by value
    assert launch(64, index=(0, 1, 2, 3)).launch_id(REF) != base.launch_id(REF)  # indices decide the work
    assert launch(128).launch_id(REF) != base.launch_id(REF)
    assert base.launch_id("other.module:_gather_kernel") != base.launch_id(REF)


# --------------------------------------------------------------------------- dtype codes


@pytest.mark.parametrize("dtypes, code", [
    (["float16", "float16", "float16"], "f16-3"),
    (["bfloat16", "bfloat16", "float32"], "bf16-2.f32"),
    (["float32", "int32", "float32"], "f32.i32.f32"),
    (["float8_e4m3fn", "float8_e4m3fn", "bool", "uint16"], "float8_e4m3fn-2.b1.uint16"),  # unknown: torch's name
    ([], "none"),
])
def test_dtype_codes_round_trip(dtypes: list[str], code: str) -> None:
    assert dtype_code(dtypes) == code
    assert dtype_strings(code) == [f"torch.{d}" for d in dtypes]


# --------------------------------------------------------------------------- folding into tuning.yaml


def test_a_first_recording_makes_a_manifest_that_loads(tmp_path: Path) -> None:
    manifest = tmp_path / "tuning.yaml"
    folded = fold(manifest, [kernel(launch(64), launch(128))], target="sm90")
    assert folded.created == ["_gather_kernel"] and folded.added == {"_gather_kernel": 2} and not folded.skipped
    assert folded.lines() == ["kernels._gather_kernel: 2 new shapes (new entry)"]
    (spec,) = load_manifest(manifest, write_caches=False).kernels
    assert spec.kernel == REF and spec.launch == "aot_tune.record.replay:launch"
    assert spec.inputs == "aot_tune.record.replay:make_inputs" and spec.reference == "aot_tune.record.replay:reference"
    assert spec.key == ("n", "arg_dtypes") and spec.dtypes == ("float32",) and spec.targets == ("sm90",)
    text = manifest.read_text()
    assert f'{{n: 64, arg_dtypes: "f32.i32.f32-2", recorded: "{launch(64).launch_id(REF)}"}}' in text
    assert "      - {BLOCK: 32, num_warps: 2, num_stages: 1}\n" in text
    assert read_recording(recording_path(tmp_path, "_gather_kernel")) == kernel(launch(64), launch(128))
    before = manifest.read_bytes(), recording_path(tmp_path, "_gather_kernel").read_bytes()
    again = fold(manifest, [kernel(launch(64), launch(128))], target="sm90")
    assert not again.added and not again.created
    assert (manifest.read_bytes(), recording_path(tmp_path, "_gather_kernel").read_bytes()) == before


def test_new_launches_are_appended_and_a_hand_edit_stays(tmp_path: Path) -> None:
    manifest = tmp_path / "tuning.yaml"
    fold(manifest, [kernel(launch(64))])
    edited = manifest.read_text().replace("    dtypes: [float32]\n", "    dtypes: [float32]\n    bench: {rep_ms: 5}\n")
    manifest.write_text(edited)
    folded = fold(manifest, [kernel(launch(64), launch(256))])
    assert folded.added == {"_gather_kernel": 1} and not folded.created
    text = manifest.read_text()
    assert text.startswith(edited) and text.count("recorded: ") == 2
    assert f'{{n: 256, arg_dtypes: "f32.i32.f32-2", recorded: "{launch(256).launch_id(REF)}"}}' in text
    (spec,) = load_manifest(manifest, write_caches=False).kernels
    assert spec.bench.rep_ms == 5
    assert set(read_recording(recording_path(tmp_path, "_gather_kernel")).launches) == \
        {launch(64).launch_id(REF), launch(256).launch_id(REF)}


HAND_WRITTEN = """\
version: 1
kernels:
  gather:
    kernel: mylib.ops:_gather_kernel
    launch: tuning_launch:launch
    inputs: tuning_launch:make_inputs
    key: [n]
    configs:
      - {BLOCK: 16, num_warps: 1, num_stages: 1}
    shapes:
      - {n: 64}
"""


def test_a_kernel_declared_by_hand_is_left_to_its_entry(tmp_path: Path) -> None:
    manifest = tmp_path / "tuning.yaml"
    manifest.write_text(HAND_WRITTEN)
    folded = fold(manifest, [kernel(launch(64))])
    assert folded.skipped == [f"{REF}: tuning.yaml declares it by hand (kernels.gather)"]
    assert manifest.read_text() == HAND_WRITTEN and not (tmp_path / "recordings").exists()


@pytest.mark.parametrize("value", [0, 1.5, "x" * 65, -3])
def test_a_launch_whose_key_a_manifest_cannot_hold_is_left_out_with_the_reason(tmp_path: Path, value) -> None:
    manifest = tmp_path / "tuning.yaml"
    folded = fold(manifest, [kernel(launch(64), launch(32, key_value=value))])
    assert folded.added == {"_gather_kernel": 1}
    (why,) = folded.skipped
    assert why.startswith(f"{REF}: a launch with n={value!r}") and "keeps the library's autotuning" in why
    assert manifest.read_text().count("recorded: ") == 1


def test_a_kernel_of_bool_tensors_alone_is_left_out_and_the_others_fold(tmp_path: Path) -> None:
    """tuning.yaml names no bool dtype: such an entry would not load, and no kernel would fold."""
    mask_ref = "mylib.ops:_mask_kernel"
    mask = RecordedLaunch((Argument("M", tensor=TensorSpec((8,), (1,), "bool", (1, 0, 1, 0, 1, 0, 1, 0))),
                           Argument("n", scalar=8)), ((1,), (1,)), (8, "torch.bool"), dict(CONFIGS[0]), "first", ("M",))
    masks = RecordedKernel(mask_ref, ("n",), CONFIGS, launches={mask.launch_id(mask_ref): mask})
    folded = fold(tmp_path / "tuning.yaml", [masks, kernel(launch(64))])
    assert folded.added == {"_gather_kernel": 1}
    (why,) = folded.skipped
    assert why.startswith(f"{mask_ref}: 1 launch(es) with no floating tensor") and "bool" in why
    assert [spec.name for spec in load_manifest(tmp_path / "tuning.yaml", write_caches=False).kernels] == \
        ["_gather_kernel"]


def test_a_changed_decorator_is_left_out_until_its_recording_is_removed(tmp_path: Path) -> None:
    manifest = tmp_path / "tuning.yaml"
    fold(manifest, [kernel(launch(64))])
    before = manifest.read_text()
    changed = kernel(launch(128), configs=CONFIGS + ({"BLOCK": 64, "num_warps": 4, "num_stages": 1},))
    folded = fold(manifest, [changed])
    (why,) = folded.skipped
    assert "decorator's key or configs changed" in why and "recordings/_gather_kernel.json" in why
    assert not folded.added and manifest.read_text() == before


def test_an_unloadable_manifest_is_left_as_it_was(tmp_path: Path) -> None:
    manifest = tmp_path / "tuning.yaml"
    broken = HAND_WRITTEN.replace("version: 1", "version: 2").replace("mylib.ops:_gather_kernel", "mylib.ops:other")
    manifest.write_text(broken)
    with pytest.raises(TuneError, match="version"):
        fold(manifest, [kernel(launch(64))])
    assert manifest.read_text() == broken and not (tmp_path / "recordings").exists()


def test_entries_that_would_not_load_leave_the_manifest_as_it_was(tmp_path: Path) -> None:
    """The new text is parsed before it replaces the old: here the recorded entry's generated module
    would be the one a hand-written entry already writes."""
    manifest = tmp_path / "tuning.yaml"
    clash = HAND_WRITTEN.replace("mylib.ops:_gather_kernel", "mylib.ops:other").replace(
        "    key: [n]\n", "    key: [n]\n    generated: generated/_gather_kernel.py\n")
    manifest.write_text(clash)
    load_manifest(manifest, write_caches=False)
    with pytest.raises(TuneError, match="would not load") as err:
        fold(manifest, [kernel(launch(64))])
    assert "left as it was" in str(err.value)
    assert manifest.read_text() == clash and not (tmp_path / "recordings").exists()


def test_the_raw_lines_are_read_with_a_truncated_last_line_and_refusals(tmp_path: Path) -> None:
    raw = tmp_path / "raw.jsonl"
    data = kernel().as_json()
    data.pop("launches")
    data.pop("format")
    lines = [{"target": "sm90"}, {"kernel": data, "launch": launch(64).as_json()},
             {"refused": {"kernel": "__main__.local_kernel", "reason": "it is defined in the script"}},
             {"kernel": data, "launch": launch(64).as_json()}, {"kernel": data, "launch": launch(128).as_json()}]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    raw.write_text(text + text.splitlines()[1][:40])  # a process killed mid-write
    found = read_raw(raw)
    assert found.target == "sm90"
    assert found.refused == ["__main__.local_kernel: it is defined in the script"]
    (only,) = found.kernels
    assert only.ref == REF and set(only.launches) == {launch(64).launch_id(REF), launch(128).launch_id(REF)}
    assert read_raw(tmp_path / "missing.jsonl").kernels == []


# --------------------------------------------------------------------------- use_tables

FAKE_LIBRARY = '''\
"""A library whose kernel sits beneath a duck-typed autotuner (cache, configs, keys)."""


class Config:
    def __init__(self, kwargs, num_warps, num_stages):
        self.kwargs, self.num_warps, self.num_stages = kwargs, num_warps, num_stages

    def all_kwargs(self):
        return {**self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages}


class Autotuner:
    def __init__(self, configs, keys):
        self.configs, self.keys, self.cache = configs, keys, {}


class Heuristics:  # a layer above the autotuner, as @triton.heuristics over @triton.autotune
    def __init__(self, fn):
        self.fn = fn


CONFIGS = [Config({"BLOCK": 16}, 1, 1), Config({"BLOCK": 32}, 2, 1)]
gather = Heuristics(Autotuner(CONFIGS, ["n"]))
'''


def tables_module(entries: dict[tuple, dict], device: str = "h100-sxm") -> str:
    """A generated module for a recorded entry (key n, arg_dtypes) of fakelib's kernel."""
    cache = TuningCache(schema_version=1)
    for number, ((n, code), best) in enumerate(entries.items()):
        record = TuningRecord(kernel="gather", dtype="float32", fingerprint=f"f{number}",
                              measured_at="2026-11-27T00:00:00+00:00")
        record.key_names.extend(("n", "arg_dtypes"))
        set_record_shape(record, (n, code))
        record.device.key, record.device.name = device, "NVIDIA H100 80GB HBM3"
        record.device.compute_capability, record.device.backend = "9.0", "cuda"
        config_to_proto(f"c{number}", best, record.best)
        cache.records.append(record)
    return codegen.render_module("gather", ("n", "arg_dtypes"), cache, "tuning.yaml",
                                 autotuner={"kernel": "fakelib:gather", "dtypes_dim": "arg_dtypes"})


@pytest.fixture
def fakelib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "fakelib.py").write_text(FAKE_LIBRARY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fakelib", raising=False)
    import fakelib

    yield fakelib
    sys.modules.pop("fakelib", None)


def test_use_tables_installs_the_tuned_config_under_the_librarys_key(tmp_path: Path, fakelib, capsys) -> None:
    folder = tmp_path / "generated"
    folder.mkdir()
    (folder / "gather.py").write_text(tables_module({
        (4096, "f32.i32.f32-2"): {"BLOCK": 32, "num_warps": 2, "num_stages": 1},
        (64, "f32.i32.f32-2"): {"BLOCK": 64, "num_warps": 4, "num_stages": 1},  # not a decorator config
    }))
    (folder / "helpers.py").write_text("raise SystemExit('a module aot_tune did not write was run')\n")
    installed = use_tables(folder, device="h100-sxm", verbose=True)
    tuner = fakelib.gather.fn
    assert tuner.cache == {(4096, "torch.float32", "torch.int32", "torch.float32", "torch.float32"): fakelib.CONFIGS[1]}
    assert installed.kernels == {"fakelib:gather": 1} and installed.keys == 1
    (why,) = installed.skipped
    assert "gather.py" in why and "not among the decorator's configs" in why and "'BLOCK': 64" in why
    printed = capsys.readouterr().err
    assert "aot_tune: 1 tuned key installed in 1 autotuner (h100-sxm)" in printed
    assert "aot_tune: not installed: gather.py" in printed
    assert use_tables(folder, device="a100-sxm").keys == 0  # no table for this device: nothing


def test_use_tables_takes_a_package_name(tmp_path: Path, fakelib, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "mytables"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "gather.py").write_text(tables_module({(8, "f32"): {"BLOCK": 16, "num_warps": 1, "num_stages": 1}}))
    monkeypatch.delitem(sys.modules, "mytables", raising=False)
    installed = use_tables("mytables", device="h100-sxm")
    assert installed.keys == 1 and fakelib.gather.fn.cache == {(8, "torch.float32"): fakelib.CONFIGS[0]}


def test_use_tables_on_a_missing_folder_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TuneError, match="neither a folder nor an importable package") as err:
        use_tables(tmp_path / "nowhere", device="h100-sxm")
    assert "fix:" in str(err.value)
    for name in ("no_such_tables_package_here", "no_such_package_here.tables", ".relative"):
        with pytest.raises(TuneError, match="neither a folder"):
            use_tables(name, device="h100-sxm")


# --------------------------------------------------------------------------- several outputs


def test_the_check_compares_tuples_of_outputs() -> None:
    a, b = torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.ones(4)
    assert Comparison((a, b), (a.clone(), b.clone())).verdict(1e-6) == (True, 0.0, "")
    assert Comparison([a, b], (a.clone(), b.clone())).verdict(1e-6)[0]
    passed, error, why = Comparison((a, b * 2), (a, b)).verdict(1e-3)
    assert not passed and error > 0.1 and "exceeds" in why
    passed, error, why = Comparison((a, b.reshape(2, 2)), (a, b)).verdict(1e-3)
    assert not passed and "shape" in why
    passed, error, why = Comparison((a,), (a, b)).verdict(1e-3)
    assert not passed and math.isinf(error) and why == "1 outputs != 2 of the reference"
    passed, _, why = Comparison((a, b), a).verdict(1e-3)
    assert not passed and why == "2 outputs != 1 of the reference"


# --------------------------------------------------------------------------- the replay launcher


def test_the_replay_functions_are_bound_to_the_manifest_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(TuneError, match="called through a manifest"):
        replay.make_inputs({"recorded": "L0"}, torch.float32, "cpu")
    bound = resolve(str(tmp_path), "aot_tune.record.replay:make_inputs")
    assert bound.func.__func__ is replay.Replay.make_inputs and bound.func.__self__.root == str(tmp_path)
    assert resolve(str(tmp_path), "aot_tune.record.replay:launch").func.__self__ is bound.func.__self__
    assert bound.provided_kernel("lib.ops:kernel") is None  # nothing recorded: the kernel is imported
    with pytest.raises(TuneError, match="no recorded launch L0"):
        bound({"recorded": "L0"}, torch.float32, "cpu")


def test_replayed_inputs_hold_the_kept_values_and_the_recorded_range(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    fold(tmp_path / "tuning.yaml", [kernel(launch(256, data=(0.25, 0.5)))])
    make_inputs = resolve(str(tmp_path), "aot_tune.record.replay:make_inputs")
    call, x, index, small = make_inputs({"recorded": launch(256).launch_id(REF)}, torch.float32, "cpu")
    assert isinstance(call, replay.RecordedCall) and call.kernel.ref == REF
    assert x.shape == (256, 4) and x.stride() == (4, 1) and x.dtype == torch.float32
    assert -1.0 <= float(x.min()) and float(x.max()) <= 1.0 and abs(float(x.mean()) - 0.25) < 0.1
    assert index.dtype == torch.int32 and index.tolist() == [3, 1, 2, 0]
    assert small.tolist() == [0.5, 2.0]
    named = call.arguments((x, index, small))
    assert named["Y"] is x and named["n"] == 256 and named["BIAS"] is None


def test_the_commands_last_line_says_what_a_recording_changed() -> None:
    from aot_tune.record.entries import Folded
    from aot_tune.record.run import Recorded, main_lines

    def last(folded: Folded) -> str:
        return main_lines(Recorded(0, 2, 1, folded, [], 1.5), "tuning.yaml")[-1]

    assert last(Folded(added={"gather": 2})) == "  tuning.yaml and recordings/ updated; next: doit tune"
    assert last(Folded(timed=["gather"])) == "  recordings/ updated; tuning.yaml already holds every launch"
    assert last(Folded()) == "  nothing new: tuning.yaml already holds every launch"


def test_a_recorded_grid_sees_the_heuristics_as_triton_computes_them_in_turn() -> None:
    """A heuristic may read one computed before it in the same layer (Triton runs them in turn):
    the grid recorded for each config sees both, and a grid that cannot be computed is None."""
    import triton
    from types import SimpleNamespace

    from aot_tune.record import capture

    layer = SimpleNamespace(values={"HALF": lambda m: m["BLOCK"] // 2, "PROGRAMS": lambda m: m["n"] // m["HALF"]},
                            fn=SimpleNamespace())  # a @triton.heuristics layer over the Triton function
    tuner = SimpleNamespace(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], fn=layer)
    assert capture._grids(tuner, {"n": 256}, lambda meta: (meta["PROGRAMS"], 1)) == ((16, 1), (8, 1))
    assert capture._grids(tuner, {"n": 256}, lambda meta: (meta["MISSING"],)) == (None, None)
