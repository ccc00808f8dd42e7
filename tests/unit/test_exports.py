"""Exports (aot_tune.exports, ``exports:`` in tuning.yaml): the formats, the path templates, the
guard against writing over someone's file, and the manifest's errors. Caches are built from
protobuf records as tests/unit/test_codegen.py builds them; no kernel runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from aot_tune import cache as cache_io, exports
from aot_tune.cache import config_to_proto
from aot_tune.commands import cli
from aot_tune.errors import ManifestError, TuneError
from aot_tune.exports.ownership import REGISTRY
from aot_tune.manifest import load_manifest
from aot_tune.manifest.exports import path_value
from aot_tune.select import selected_tables
from aot_tune.tables.check import CheckReport
from aot_tune.tuning_schema import TuningCache, TuningRecord

H100 = ("h100-sxm", "NVIDIA H100 80GB HBM3", "9.0", "cuda")
INTERPRETER = ("interpreter", "Triton interpreter (CPU)", "cpu", "interpreter")
VLLM_PATH = "configs/E={E},N={N},device_name={device_name}.json"

MANIFEST = """\
version: 1
{defaults}kernels:
  fused_moe:
    kernel: moe:fused_moe_kernel
    launch: moe:fused_moe
    inputs: moe:make_inputs
    key: [E, N, M]
    space:
      BLOCK_SIZE_M: [16, 64]
      BLOCK_SIZE_N: [32, 64]
      BLOCK_SIZE_K: [64, 128]
      GROUP_SIZE_M: [1, 8]
      num_warps: [4, 8]
      num_stages: [3, 4]
    shapes:
      - grid: {{E: [8], N: [14336], M: [1, 2, 16, 64, 256]}}
    dtypes: {dtypes}
{exports}"""


def manifest(root: Path, exports_block: str = "", defaults: str = "", dtypes: str = "[float16]"):
    (root / "tuning.yaml").write_text(MANIFEST.format(defaults=defaults, dtypes=dtypes, exports=exports_block))
    return load_manifest(root / "tuning.yaml")


def vllm(root: Path, path: str = VLLM_PATH, to: str = "json"):
    m = manifest(root, f'    exports:\n      - {{to: {to}, path: "{path}"}}\n')
    return m, m.kernel("fused_moe")


def config(m: int) -> dict:
    """A plausible pick per M, as vLLM's tuner finds them: bigger tiles for more tokens."""
    small = m <= 16
    return {"BLOCK_SIZE_M": 16 if small else 64, "BLOCK_SIZE_N": 32 if small else 64, "BLOCK_SIZE_K": 128 if small
            else 64, "GROUP_SIZE_M": 1 if small else 8, "num_warps": 4 if small else 8, "num_stages": 3 if m < 64 else 4}


def record(shape: tuple, params: dict, device=H100, dtype: str = "float16", key=("E", "N", "M"),
           median_ms: float = 0.05) -> TuningRecord:
    r = TuningRecord(kernel="fused_moe", dtype=dtype, fingerprint=f"f{shape}{dtype}{device[0]}",
                     measured_at="2026-01-02T03:04:05+00:00")
    r.key_names.extend(key)
    cache_io.set_record_shape(r, shape)
    r.device.key, r.device.name, r.device.compute_capability, r.device.backend = device
    r.toolchain.triton, r.toolchain.torch = "3.9.0", "2.13.0"
    config_id = "c" + "-".join(str(v) for v in params.values())
    config_to_proto(config_id, params, r.best)
    m = r.measurements.add(status="ok", median_ms=median_ms, runs=10)
    config_to_proto(config_id, params, m.config)
    return r


def moe_cache(ms=(1, 2, 16, 64, 256), extra=()) -> TuningCache:
    cache = TuningCache(schema_version=1)
    cache.records.extend(record((8, 14336, m), config(m)) for m in ms)
    cache.records.extend(extra)
    return cache


# --------------------------------------------------------------------------- vLLM's fused-MoE files


def test_a_vllm_fused_moe_config_file_name_and_content(tmp_path, monkeypatch):
    """What vLLM's fused_moe reads from configs/: the file name and layout, written by `aot_tune export`."""
    m, spec = vllm(tmp_path)
    cache_io.write_cache(moe_cache(), tmp_path / spec.cache)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["export", "--manifest", "tuning.yaml"]) == 0
    (written,) = (tmp_path / "configs").iterdir()
    assert written.name == "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"
    text = written.read_text()
    assert text.startswith('{\n    "1": {\n        "BLOCK_SIZE_K": 128,\n        "BLOCK_SIZE_M": 16,\n'
                           '        "BLOCK_SIZE_N": 32,\n        "GROUP_SIZE_M": 1,\n        "num_stages": 3,\n'
                           '        "num_warps": 4\n    },\n    "2": {')
    assert text.endswith("}\n") and not text.endswith("\n\n")
    loaded = json.loads(text)
    assert list(loaded) == ["1", "2", "16", "64", "256"]  # numeric order, not "16" < "2"
    assert {int(k): v for k, v in loaded.items()} == {mm: config(mm) for mm in (1, 2, 16, 64, 256)}
    assert all(type(v) is int for entry in loaded.values() for v in entry.values())
    assert list(loaded["64"]) == sorted(config(64))


def test_every_device_gets_its_own_file_and_the_interpreter_name_is_safe(tmp_path):
    _, spec = vllm(tmp_path)
    cache = moe_cache(extra=[record((8, 14336, 1), config(1), device=INTERPRETER)])
    exports.write(tmp_path, spec, cache)
    names = sorted(p.name for p in (tmp_path / "configs").iterdir())
    assert names == ["E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json",
                     "E=8,N=14336,device_name=Triton_interpreter__CPU_.json"]


def test_exports_and_the_generated_module_read_the_same_picks(tmp_path):
    _, spec = vllm(tmp_path)
    cache = moe_cache()
    (f,) = exports.render(tmp_path, spec, cache)
    table = selected_tables(cache, spec.name, spec.key)["h100-sxm"]
    assert json.loads(f.text) == {str(e.key[2]): e.config for e in table.entries}


# --------------------------------------------------------------------------- json layouts


def test_a_path_naming_every_key_dim_holds_the_config_itself(tmp_path):
    _, spec = vllm(tmp_path, "configs/{E}-{N}-{M}-{device}.json")
    files = exports.render(tmp_path, spec, moe_cache(ms=(1, 64)))
    assert [f.path for f in files] == ["configs/8-14336-1-h100-sxm.json", "configs/8-14336-64-h100-sxm.json"]
    assert json.loads(files[1].text) == config(64)


def test_several_unnamed_dims_join_their_values_in_key_order(tmp_path):
    _, spec = vllm(tmp_path, "configs/{kernel}-{device}.json")
    cache = moe_cache(ms=(16, 2), extra=[record((4, 4096, 2), config(2))])
    (f,) = exports.render(tmp_path, spec, cache)
    assert list(json.loads(f.text)) == ["4,4096,2", "8,14336,2", "8,14336,16"]


def test_bool_and_name_key_values_are_written_as_json_writes_them(tmp_path):
    from aot_tune.exports.json_format import key_text

    assert (key_text(True), key_text(False), key_text(16), key_text("gelu")) == ("true", "false", "16", "gelu")
    assert path_value(True) == "true"


def test_two_dtypes_in_one_json_file_are_refused_at_render(tmp_path):
    _, spec = vllm(tmp_path)  # the manifest has one dtype, the cache holds an older one's records too
    cache = moe_cache(ms=(1,), extra=[record((8, 14336, 1), config(64), dtype="float32")])
    with pytest.raises(TuneError, match=r"two configs for one key .*float16, float32.*fix: add \{dtype\}"):
        exports.render(tmp_path, spec, cache)


# --------------------------------------------------------------------------- templates


@pytest.mark.parametrize("name", ["NVIDIA H100 80GB HBM3", "../../etc/passwd", "..", ".", "", "a/b\\c", "x" * 300,
                                  "GPU: \"quoted\" *", "\u00e9clair"])
def test_a_filled_in_value_cannot_make_a_path_of_its_own(name):
    value = path_value(name)
    assert value and len(value) <= 64 and "/" not in value and not value.startswith(".")
    assert all(c.isascii() and (c.isalnum() or c in "_.-") for c in value)


def test_a_forged_device_name_stays_one_file_in_its_folder(tmp_path):
    _, spec = vllm(tmp_path)
    forged = ("x-escape", "x/../../escape", "9.0", "cuda")  # a name whose key is its slug passes the record check
    assert cache_io.record_defect(record((8, 14336, 1), config(1), device=forged)) == ""
    (f,) = exports.render(tmp_path, spec, TuningCache(records=[record((8, 14336, 1), config(1), device=forged)]))
    assert f.path == "configs/E=8,N=14336,device_name=x_.._.._escape.json"


# --------------------------------------------------------------------------- ownership


def test_a_foreign_file_is_never_written_over(tmp_path):
    _, spec = vllm(tmp_path)
    target = tmp_path / "configs" / "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"
    target.parent.mkdir()
    target.write_text('{"1": {"BLOCK_SIZE_M": 16}}\n')  # the library's own tuned file
    with pytest.raises(TuneError, match=r"E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3\.json was not written by "
                                        r"aot_tune .* nothing of fused_moe's exports was written; fix: move it away"):
        exports.write(tmp_path, spec, moe_cache())
    assert target.read_text() == '{"1": {"BLOCK_SIZE_M": 16}}\n'


def test_a_file_aot_tune_wrote_is_updated_and_recorded(tmp_path):
    _, spec = vllm(tmp_path)
    assert exports.write(tmp_path, spec, moe_cache(ms=(1,))) == [
        "configs/E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"]
    assert exports.write(tmp_path, spec, moe_cache(ms=(1,))) == []  # unchanged: not written again
    exports.write(tmp_path, spec, moe_cache(ms=(1, 64)))  # ours by the record, though it differs
    recorded = json.loads((tmp_path / REGISTRY).read_text())["files"]
    (f,) = exports.render(tmp_path, spec, moe_cache(ms=(1, 64)))
    assert (tmp_path / f.path).read_text() == f.text and list(recorded) == [f.path]


def test_a_fresh_clone_claims_its_checked_in_exports_before_the_cache_moves_on(tmp_path):
    _, spec = vllm(tmp_path)
    old, new = moe_cache(ms=(1,)), moe_cache(ms=(1, 64))
    exports.write(tmp_path, spec, old)
    (tmp_path / REGISTRY).unlink()  # a clone: the export is checked in, .aot_tune/ is not
    with pytest.raises(TuneError, match="was not written by aot_tune"):
        exports.write(tmp_path, spec, new)
    exports.claim(tmp_path, spec, old)  # what a run does before it replaces the cache
    exports.write(tmp_path, spec, new)
    assert exports.problems(tmp_path, spec, new) == []


def test_a_file_equal_to_the_export_is_ours_without_a_record(tmp_path):
    _, spec = vllm(tmp_path)
    (f,) = exports.render(tmp_path, spec, moe_cache())
    (tmp_path / f.path).parent.mkdir(parents=True)
    (tmp_path / f.path).write_text(f.text)
    assert exports.write(tmp_path, spec, moe_cache()) == []
    assert f.path in json.loads((tmp_path / REGISTRY).read_text())["files"]


def test_an_export_through_a_link_leading_out_is_refused(tmp_path):
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir(), outside.mkdir()
    _, spec = vllm(project)
    (project / "configs").symlink_to(outside)
    with pytest.raises(TuneError, match="leads outside the project folder"):
        exports.write(project, spec, moe_cache())
    assert not list(outside.iterdir())


# --------------------------------------------------------------------------- check


def test_check_names_a_missing_and_a_stale_export_and_the_fix(tmp_path):
    _, spec = vllm(tmp_path)
    (missing,) = exports.problems(tmp_path, spec, moe_cache())
    assert missing.endswith("is missing; fix: run `doit export fused_moe` and commit it")
    exports.write(tmp_path, spec, moe_cache(ms=(1,)))
    (stale,) = exports.problems(tmp_path, spec, moe_cache())
    assert "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json of kernel fused_moe does not match its cache" in stale
    report = CheckReport([], [], [], export_problems=[stale])
    assert not report.ok and report.render().splitlines()[-2:] == [
        f"problem: {stale}", "not in sync: fix each 'problem' line as it says"]


# --------------------------------------------------------------------------- a user exporter


EXPORTER = '''\
def moe_header(entries, info):
    lines = [f"# {info['kernel']} on {info['device']} ({info['device_name']}, sm {info['compute_capability']}, "
             f"triton {info['triton']})"]
    for e in entries:
        lines.append(f"{e['key']['M']} {e['dtype']} {e['config']['BLOCK_SIZE_M']} {e['time_s']:.6f}")
    return "\\n".join(lines) + "\\n"


def broken(entries, info):
    raise KeyError("BLOCK_M")


def not_text(entries, info):
    return entries
'''


def test_a_user_exporter_gets_entries_and_info_per_file(tmp_path):
    (tmp_path / "moe_exports.py").write_text(EXPORTER)
    _, spec = vllm(tmp_path, "tables/{kernel}.{device}.txt", to="moe_exports:moe_header")
    (f,) = exports.render(tmp_path, spec, moe_cache(ms=(1, 64)))
    assert f.path == "tables/fused_moe.h100-sxm.txt"
    assert f.text == ("# fused_moe on h100-sxm (NVIDIA_H100_80GB_HBM3, sm 9.0, triton 3.9.0)\n"
                      "1 float16 16 0.000050\n64 float16 64 0.000050\n")


@pytest.mark.parametrize("function, error", [
    ("broken", r"exporter moe_exports:broken of kernel fused_moe \(for tables/x\.h100-sxm\.txt\) raised KeyError: "
               r"'BLOCK_M'; fix: correct the exporter"),
    ("not_text", r"exporter moe_exports:not_text of kernel fused_moe .* returned a list, not the file's text; "
                 r"fix: return a str"),
    ("missing", r"exporter moe_exports:missing of kernel fused_moe .* has no attribute 'missing'"),
])
def test_a_failing_user_exporter_is_one_line_naming_it_and_the_kernel(tmp_path, function, error):
    (tmp_path / "moe_exports.py").write_text(EXPORTER)
    _, spec = vllm(tmp_path, "tables/x.{device}.txt", to=f"moe_exports:{function}")
    with pytest.raises(TuneError, match=error) as caught:
        exports.write(tmp_path, spec, moe_cache())
    assert "\n" not in str(caught.value) and not (tmp_path / "tables").exists()


# --------------------------------------------------------------------------- the manifest


def error(tmp_path: Path, exports_block: str, defaults: str = "", dtypes: str = "[float16]") -> str:
    with pytest.raises(ManifestError) as caught:
        manifest(tmp_path, exports_block, defaults, dtypes)
    return str(caught.value).replace(f"{tmp_path}/", "")


def one(to: str, path: str) -> str:
    return f'    exports:\n      - {{to: {to}, path: "{path}"}}\n'


@pytest.mark.parametrize("block, expected", [
    (one("json", "configs/{M}-{devic}.json"),
     "tuning.yaml:19: kernels.fused_moe.exports[0].path: unknown placeholder {devic} (placeholders: kernel, device, "
     "device_name, dtype, triton, and the key dims E, N, M); fix: did you mean 'device'?"),
    (one("json", "../configs/{device}.json"),
     "tuning.yaml:19: kernels.fused_moe.exports[0].path: '../configs/{device}.json' is outside the project folder; "
     "fix: keep it inside the project"),
    (one("json", "/tmp/{device}.json"), "kernels.fused_moe.exports[0].path: '/tmp/{device}.json' is absolute"),
    (one("json", "generated/{device}.py"),
     "kernels.fused_moe.exports[0].path: 'generated/{device}.py' may be the generated module of kernel 'fused_moe'"),
    (one("json", "generated/{kernel}.tuning.pb"), "'generated/{kernel}.tuning.pb' names neither {device}"),
    (one("json", "generated/{device_name}.tuning.pb"), "may be the cache file of kernel 'fused_moe'"),
    (one("json", ".aot_tune/{device}.json"), "is inside .aot_tune/, aot_tune's work folder"),
    (one("json", "moe/{device}.py"), "'moe/{device}.py' may be a module the manifest's kernels import"),
    (one("json", "{device}.py"), "'{device}.py' may be a module the manifest's kernels import"),
    (one("json", "configs/{M:04d}-{device}.json"), "placeholder {M:04d} is not a name"),
    (one("json", "configs/{device}}.json"), "has an unmatched '{' or '}'"),
    (one("yaml", "configs/{device}.json"),
     "tuning.yaml:19: kernels.fused_moe.exports[0].to: unknown format 'yaml' (formats: json, or module.path:function "
     "naming your own exporter); fix: write to: json, or to: mypackage.exports:my_format"),
    (one("JSON", "configs/{device}.json"), "fix: did you mean 'json'?"),
    (one("tools.exports.vllm", "configs/{device}.json"), "fix: separate the function with a colon: tools.exports:vllm"),
    (one("json", "configs/{kernel}.json"), "names neither {device} nor {device_name}: each GPU has its own table"),
    ('    exports:\n      - {to: json}\n', "kernels.fused_moe.exports[0].path: missing required key 'path'"),
    ('    exports:\n      - {to: json, path: "a/{device}.json", format: x}\n', "unknown key 'format'"),
    ('    exports: {to: json}\n', "kernels.fused_moe.exports: expected a list"),
    ('    exports:\n      - {to: json, path: "a/{device}.json"}\n      - {to: "m:f", path: "a/{device}.json"}\n',
     "tuning.yaml:20: kernels.fused_moe.exports[1].path: the path 'a/{device}.json' is also "
     "kernels.fused_moe.exports[0]'s"),
])
def test_manifest_errors_name_the_line_the_key_and_the_fix(tmp_path, block, expected):
    assert expected in error(tmp_path, block)


def test_json_without_dtype_is_refused_for_several_dtypes(tmp_path):
    message = error(tmp_path, one("json", VLLM_PATH), dtypes="[float16, bfloat16]")
    assert message == (f"tuning.yaml:19: kernels.fused_moe.exports[0].path: '{VLLM_PATH}' does not name {{dtype}}, "
                       f"and the kernel has 2 dtypes (float16, bfloat16) whose configs would share one file; fix: add "
                       f"{{dtype}} to the path, e.g. ...,dtype={{dtype}}.json")
    manifest(tmp_path, one("json", VLLM_PATH.replace(".json", ",dtype={dtype}.json")), dtypes="[float16, bfloat16]")
    manifest(tmp_path, one("m:f", VLLM_PATH), dtypes="[float16, bfloat16]")  # an exporter gets each entry's dtype


def test_a_kernels_list_replaces_the_defaults_and_an_empty_one_opts_out(tmp_path):
    defaults = 'defaults:\n  exports:\n    - {to: json, path: "configs/{kernel}-{device}.json"}\n'
    inherited = manifest(tmp_path, defaults=defaults).kernel("fused_moe").exports
    assert [(e.to, e.path, e.line) for e in inherited] == [("json", "configs/{kernel}-{device}.json", 4)]
    own = manifest(tmp_path, one("pkg.mod:fn", "x/{device}.txt"), defaults=defaults).kernel("fused_moe").exports
    assert [(e.to, e.path) for e in own] == [("pkg.mod:fn", "x/{device}.txt")]
    assert manifest(tmp_path, "    exports: []\n", defaults=defaults).kernel("fused_moe").exports == ()
    bad = 'defaults:\n  exports:\n    - {to: json, path: "configs/{K}-{device}.json"}\n'
    assert error(tmp_path, "", defaults=bad).startswith(
        "tuning.yaml:4: defaults.exports[0].path: unknown placeholder {K} (placeholders: kernel, device, device_name, "
        "dtype, triton, and the key dims E, N, M) (for kernel 'fused_moe'); fix:")


def test_two_kernels_sharing_an_export_path_are_refused(tmp_path):
    text = MANIFEST.format(defaults='defaults:\n  exports:\n    - {to: json, path: "configs/{device}.json"}\n',
                           dtypes="[float16]", exports="")
    second = text.split("kernels:\n", 1)[1].replace("fused_moe:", "other_moe:", 1)
    (tmp_path / "tuning.yaml").write_text(text + second)
    with pytest.raises(ManifestError, match=r"defaults.exports\[0\].path: 'configs/\{device\}.json' is also an export "
                                            r"of kernel 'fused_moe' \(for kernel 'other_moe'\); fix: put \{kernel\}"):
        load_manifest(tmp_path / "tuning.yaml")


# --------------------------------------------------------------------------- merge-caches and drop-device


def test_merge_caches_updates_the_exports_and_drop_device_removes_the_dropped_tables_files(tmp_path):
    from aot_tune.tables.exchange import drop_devices, merge_into_project

    (tmp_path / "moe.py").write_text("def fused_moe_kernel():\n    pass\n\n\ndef fused_moe():\n    pass\n\n\n"
                                     "def make_inputs(shape, dtype, device):\n    pass\n")  # read, never run
    m, spec = vllm(tmp_path)
    cache_io.write_cache(moe_cache(ms=(1,), extra=[record((8, 14336, 1), config(1), device=INTERPRETER)]),
                         tmp_path / spec.cache)
    exports.write(tmp_path, spec, cache_io.read_cache(tmp_path / spec.cache, spec))
    h100 = tmp_path / "configs" / "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"
    interpreter = tmp_path / "configs" / "E=8,N=14336,device_name=Triton_interpreter__CPU_.json"
    assert list(json.loads(h100.read_text())) == ["1"] and interpreter.is_file()

    incoming = tmp_path / "elsewhere.tuning.pb"  # another machine measured M=64 on its H100
    cache_io.write_cache(TuningCache(schema_version=1, records=[record((8, 14336, 64), config(64))]), incoming)
    merge_into_project(m, [incoming])
    assert list(json.loads(h100.read_text())) == ["1", "64"]

    summary = drop_devices(m, ["interpreter"], m.kernels)
    assert not interpreter.exists() and h100.is_file()
    assert summary.removed_exports == ["configs/E=8,N=14336,device_name=Triton_interpreter__CPU_.json"]
    assert "removed their exports configs/E=8,N=14336,device_name=Triton_interpreter__CPU_.json" in summary.render()
    assert exports.problems(tmp_path, spec, cache_io.read_cache(tmp_path / spec.cache, spec)) == []
