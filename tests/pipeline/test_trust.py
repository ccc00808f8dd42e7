"""Tables you can trust: nothing merged, deleted or imported sideways makes a shipped table wrong,
stale or dangerous.

* every string from a record reaches a generated module escaped, and forged records are refused;
* a device's table is never dropped without ``doit drop-device``;
* fingerprints follow every import form in the project, and installed distributions by version;
* ``doit merge-caches`` checks every record before writing anything: a corrupt one stops it, a
  stale one (another key or space) is left out and named;
* output paths stay inside the project and off the kernels' own sources.
"""
from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path

import pytest
from tunerun import REPO, doit, executed, make_project, tune, vector_add_manifest

from aot_tune import cache as cache_io
from aot_tune import codegen, sources
from aot_tune.tables.check import check
from aot_tune.pipeline.staleness import record_problem
from aot_tune.errors import ManifestError, TuneError
from aot_tune.sources import SourceIndex
from aot_tune.manifest import load_manifest
from aot_tune.tables.exchange import drop_devices, merge_into_project
from aot_tune.fingerprint import MeasuredOn, bench_fingerprint, measured_dependencies
from aot_tune.tuning_schema import TuningCache, TuningRecord

PAYLOAD = "\nimport os; os.environ['AOT_TUNE_INJECTED'] = '1'\n#"
H100 = MeasuredOn("h100-sxm", "NVIDIA H100 80GB HBM3", "9.0", "cuda", "3.6.0", "2.11.0")


def good_record(block: int = 256, n: int = 4096, dtype: str = "float16") -> TuningRecord:
    record = TuningRecord(kernel="vector_add", key_names=["n"], shape=[n], dtype=dtype, fingerprint="f" * 20,
                          measured_at="2026-11-01T00:00:00+00:00")
    record.device.key, record.device.name, record.device.compute_capability, record.device.backend = \
        H100.key, H100.name, H100.compute_capability, H100.backend
    record.toolchain.triton, record.toolchain.torch = H100.triton, H100.torch
    params = {"BLOCK_SIZE": block, "num_warps": 4}
    measurement = record.measurements.add(status="ok", median_ms=1.0, runs=10)
    cache_io.config_to_proto("abc123", params, measurement.config)
    record.best.CopyFrom(measurement.config)
    return record


def _set_param(record, name=None, value=None):
    param = record.best.params[0]
    if name is not None:
        param.name = name
    if value is not None:
        param.string_value = value


# One forged value per field that reaches a generated module (comment header or table).
INJECTIONS = {
    "device name": lambda r: setattr(r.device, "name", "NVIDIA H100 PCIe" + PAYLOAD),
    "device key": lambda r: setattr(r.device, "key", "h100" + PAYLOAD),
    "compute capability": lambda r: setattr(r.device, "compute_capability", "9.0" + PAYLOAD),
    "backend": lambda r: setattr(r.device, "backend", "cuda" + PAYLOAD),
    "triton version": lambda r: setattr(r.toolchain, "triton", "3.6.0" + PAYLOAD),
    "torch version": lambda r: setattr(r.toolchain, "torch", "2.11.0" + PAYLOAD),
    "dtype": lambda r: setattr(r, "dtype", "float16" + PAYLOAD),
    "param name": lambda r: _set_param(r, name="BLOCK" + PAYLOAD),
    "param value": lambda r: _set_param(r, value="x" + PAYLOAD),
}


def cache_with(*records) -> TuningCache:
    cache = TuningCache(schema_version=1)
    cache.records.extend(records)
    return cache


@pytest.mark.parametrize("field", sorted(INJECTIONS))
def test_a_forged_record_is_refused_when_read_naming_file_and_record(tmp_path, field):
    record = good_record()
    INJECTIONS[field](record)
    path = tmp_path / "other.tuning.pb"
    path.write_bytes(cache_with(good_record(n=65536), record).SerializeToString())
    with pytest.raises(TuneError) as info:
        cache_io.read_cache(path)
    message = str(info.value)
    assert str(path) in message and "record 1 (" in message and "\n" not in message


@pytest.mark.parametrize("field", sorted(INJECTIONS))
def test_the_generated_module_escapes_every_record_string(field, monkeypatch):
    """Escaping does not rely on validation: a forged record rendered anyway stays inert data."""
    monkeypatch.delenv("AOT_TUNE_INJECTED", raising=False)
    record = good_record()
    INJECTIONS[field](record)
    text = codegen.render_module("vector_add", ("n",), cache_with(record), "tuning.yaml" + PAYLOAD)
    tree = ast.parse(text)
    assert {type(node).__name__ for node in tree.body} <= {"Expr", "Assign", "FunctionDef"}
    assert not any(isinstance(node, (ast.Import, ast.ImportFrom)) for node in tree.body)
    exec(compile(text, "<generated>", "exec"), {})  # noqa: S102 - the point: running it does nothing
    assert "AOT_TUNE_INJECTED" not in os.environ
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert all(line.isprintable() for line in comments)


def test_only_plain_data_is_written_as_code():
    assert codegen.python_literal({"b": (1, "x'\n"), "a": True}) == "{'a': True, 'b': (1, \"x'\\n\")}"
    for bad in (float("nan"), b"bytes", object()):
        with pytest.raises(TuneError):
            codegen.python_literal(bad)


# --------------------------------------------------------------------------- merge-caches

MANIFEST = vector_add_manifest("    space: {BLOCK_SIZE: [256, 1024], num_warps: [4]}\n"
                               "    shapes: [{n: 4096}, {n: 65536}]\n")


@pytest.fixture
def project(tmp_path):
    root = make_project(tmp_path / "project", MANIFEST)
    return load_manifest(root / "tuning.yaml")


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "generated").glob("*")) if p.is_file()}


def forged(kind: str) -> TuningRecord:
    record = good_record()
    if kind == "param without a value":
        record.best.params[0].ClearField("int_value")
    elif kind == "values that do not fit its key dims":
        record.shape[:] = [77, 3, 9]
    elif kind == "another key":
        record.key_names[:] = ["n", "m", "k"]
        record.shape[:] = [77, 3, 9]
    elif kind == "param not in the space":
        record.best.params.add(name="x_ptr", int_value=0)
    elif kind == "param of another type":
        record.best.params[0].string_value = "256"
    elif kind == "device key not its name":
        record.device.key = "h200"
    return record


@pytest.mark.parametrize("kind", ["param without a value", "values that do not fit its key dims",
                                  "device key not its name"])
def test_merge_caches_refuses_a_corrupt_record_and_changes_nothing(project, tmp_path, kind):
    first = merge_into_project(project, [_write(tmp_path / "ok.tuning.pb", good_record())])
    assert first.kernels == {"vector_add"}
    before = snapshot(project.root)
    bad = _write(tmp_path / "bad.tuning.pb", good_record(n=65536), forged(kind))
    with pytest.raises(TuneError) as info:
        merge_into_project(project, [bad])
    assert str(bad) in str(info.value) and "record 1" in str(info.value)
    assert "restore" in str(info.value)
    assert snapshot(project.root) == before


@pytest.mark.parametrize("kind, what", [("another key", "the key changed from [n, m, k] to [n]"),
                                        ("param not in the space", "param x_ptr removed from the space"),
                                        ("param of another type", "param BLOCK_SIZE changed type")])
def test_merge_caches_leaves_a_stale_record_out_and_names_it(project, tmp_path, kind, what):
    merge_into_project(project, [_write(tmp_path / "ok.tuning.pb", good_record())])
    before = snapshot(project.root)
    summary = merge_into_project(project, [_write(tmp_path / "old.tuning.pb", forged(kind))])
    assert snapshot(project.root) == before
    assert f"skipped stale records of vector_add on h100-sxm ({what}" in summary.render()


def test_merge_caches_replaces_a_devices_stale_records_with_its_current_ones(project, tmp_path):
    """A device retuned elsewhere after a key edit: its records replace the stale ones here, as a
    retune here would, and its table follows the manifest's key."""
    old_key = forged("another key")
    spec = project.kernel("vector_add")
    cache_io.write_cache(cache_io.sorted_cache([old_key]), project.root / spec.cache)
    summary = merge_into_project(project, [_write(tmp_path / "new.tuning.pb", good_record())])
    assert summary.superseded == 1
    records = cache_io.read_cache(project.root / spec.cache).records
    assert [tuple(r.key_names) for r in records] == [("n",)]
    assert list(codegen.module_tables(project.root / spec.generated)["h100-sxm"]) == [(4096, "float16")]


def test_merge_caches_command_refuses_an_injected_device_name(project, tmp_path):
    record = good_record()
    record.device.name += PAYLOAD
    other = tmp_path / "other"
    other.mkdir()
    _write(other / "vector_add.tuning.pb", record)
    proc = doit(project.root, "merge-caches", str(other))
    assert proc.returncode != 0
    assert "device name" in proc.stderr and "record 0" in proc.stderr
    assert not (project.root / "generated").exists()


def _write(path: Path, *records) -> Path:
    path.write_bytes(cache_with(*records).SerializeToString())
    return path


# --------------------------------------------------------------------------- dropped tables


def repo_project(tmp_path) -> Path:
    """A copy of this repository's kernels, manifest and checked-in tables."""
    root = make_project(tmp_path / "project", (REPO / "tuning.yaml").read_text())
    shutil.copytree(REPO / "generated", root / "generated", ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.parametrize("damage", ["deleted", "emptied", "truncated at a record boundary"])
def test_a_run_never_drops_a_table_its_cache_lost(tmp_path, damage):
    root = repo_project(tmp_path)
    cache = root / "generated" / "vector_add.tuning.pb"
    module = (root / "generated" / "vector_add.py").read_bytes()
    if damage == "deleted":
        cache.unlink()
    elif damage == "emptied":
        cache.write_bytes(b"")
    else:
        records = cache_io.read_cache(cache).records
        cache.write_bytes(cache_with(*records[:-1]).SerializeToString())
    proc = tune(root, "vector_add", check=False)
    assert proc.returncode != 0
    error = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(error) == 1 and "git checkout -- generated/vector_add.tuning.pb" in error[0]
    assert "doit drop-device --kernel vector_add" in error[0]
    assert (root / "generated" / "vector_add.py").read_bytes() == module
    report = check(load_manifest(root / "tuning.yaml"))
    assert not report.ok and "generated/vector_add.py holds tuned entries" in report.render()


def test_drop_device_is_the_explicit_way_to_drop_a_table(tmp_path):
    root = repo_project(tmp_path)
    manifest = load_manifest(root / "tuning.yaml")
    summary = drop_devices(manifest, ["h200"], manifest.select(["softmax"]))
    assert summary.dropped == {"softmax": 3}
    tables = codegen.module_tables(root / "generated" / "softmax.py")
    assert set(tables) == {"interpreter"}
    assert "h200" in codegen.module_tables(root / "generated" / "gemm.py")  # other kernels keep theirs
    report = check(manifest)
    assert not [line for line in report.render().splitlines() if line.startswith(("problem", "stale"))]


def test_a_corrupt_cache_is_never_answered_with_delete_it(tmp_path):
    path = tmp_path / "k.tuning.pb"
    path.write_bytes(b"\x0a\xff\xff garbage")
    with pytest.raises(TuneError) as info:
        cache_io.read_cache(path)
    assert "git checkout" in str(info.value) and "delete it to" not in str(info.value)


def test_check_flags_a_module_edited_by_hand(tmp_path):
    root = repo_project(tmp_path)
    module = root / "generated" / "softmax.py"
    module.write_text(module.read_text().replace("'num_warps': 4", "'num_warps': 2", 1) + "import os\n")
    report = check(load_manifest(root / "tuning.yaml"))
    assert not report.ok and "stale: generated/softmax.py does not match its cache" in report.render()


def test_a_run_never_overwrites_a_file_it_did_not_write(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text("VALUE = 1\n")
    with pytest.raises(TuneError, match="not written by aot_tune"):
        codegen.write_module(path, "# Generated by aot_tune\n")
    assert path.read_text() == "VALUE = 1\n"


# --------------------------------------------------------------------------- fingerprints

MAIN = """\
{imports}


def kernel(x):
    return {use}


def launch(x):
    return kernel(x)


def make_inputs(shape, dtype, device):
    return (shape,)


def reference(x):
    return x
"""
HELPERS = "SCALE = 2\nOTHER = 1\n\n\ndef unused():\n    return 0\n"
FORMS = {
    "import pkg.mod as m": ("import mylib.helpers as h", "x * h.SCALE"),
    "from pkg import mod": ("from mylib import helpers", "x * helpers.SCALE"),
    "import pkg.mod": ("import mylib.helpers", "x * mylib.helpers.SCALE"),
    "from pkg.mod import NAME": ("from mylib.helpers import SCALE", "x * SCALE"),
    "relative import": ("from . import helpers", "x * helpers.SCALE"),
}


def write_lib(root: Path, form: str, helpers: str = HELPERS) -> None:
    imports, use = FORMS[form]
    (root / "mylib").mkdir(parents=True, exist_ok=True)
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "main.py").write_text(MAIN.format(imports=imports, use=use))
    (root / "mylib" / "helpers.py").write_text(helpers)


def closure(root: Path) -> str:
    return SourceIndex(root).closure(["mylib.main:kernel", "mylib.main:launch"])


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_import_form_is_followed_to_the_name_it_uses(tmp_path, form):
    write_lib(tmp_path, form)
    base = closure(tmp_path)
    write_lib(tmp_path, form, HELPERS.replace("SCALE = 2", "SCALE = 3"))
    assert closure(tmp_path) != base, "a constant the kernel reads changed"
    write_lib(tmp_path, form, HELPERS.replace("OTHER = 1", "OTHER = 5").replace("return 0", "return 1"))
    assert closure(tmp_path) == base, "only what the kernel reads counts"


def test_a_module_used_as_a_whole_covers_all_of_it(tmp_path):
    (tmp_path / "mylib").mkdir()
    (tmp_path / "mylib" / "__init__.py").write_text("")
    (tmp_path / "mylib" / "main.py").write_text(
        MAIN.format(imports="import mylib.helpers as h", use="getattr(h, 'SCALE') * x"))
    (tmp_path / "mylib" / "helpers.py").write_text(HELPERS)
    base = closure(tmp_path)
    (tmp_path / "mylib" / "helpers.py").write_text(HELPERS.replace("OTHER = 1", "OTHER = 5"))
    assert closure(tmp_path) != base


@pytest.fixture
def installed_library(tmp_path, monkeypatch):
    """An installed distribution 'fakelib' (a site folder with its dist-info) on sys.path."""
    site = tmp_path / "site"

    def install(version: str) -> None:
        shutil.rmtree(site, ignore_errors=True)
        (site / "fakelib").mkdir(parents=True)
        (site / "fakelib" / "__init__.py").write_text("")
        (site / "fakelib" / "utils.py").write_text("SCALE = 2\n")
        info = site / f"fakelib-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakelib\nVersion: {version}\n")
        (info / "top_level.txt").write_text("fakelib\n")
        sources._installed.cache_clear()
        sources._distribution.cache_clear()

    monkeypatch.syspath_prepend(str(site))
    yield install
    sources._installed.cache_clear()
    sources._distribution.cache_clear()


def test_an_installed_library_is_covered_by_its_version(tmp_path, installed_library):
    project = tmp_path / "project"
    (project / "mylib").mkdir(parents=True)
    (project / "mylib" / "__init__.py").write_text("")
    (project / "mylib" / "main.py").write_text(MAIN.format(imports="import fakelib.utils as u", use="x * u.SCALE"))
    installed_library("1.0")
    digest_1, parts = SourceIndex(project).closure_parts(["mylib.main:kernel"])
    assert parts["distribution fakelib"] == "1.0"
    assert not any(name.startswith("fakelib") for name in parts), "its source is covered by the version"
    installed_library("1.1")
    digest_2, _ = SourceIndex(project).closure_parts(["mylib.main:kernel"])
    assert digest_2 != digest_1


def test_the_toolchain_and_stdlib_leave_fingerprints_as_they_were(tmp_path):
    """This repository's checked-in records stay current: triton, torch, math and aot_tune add nothing."""
    report = check(load_manifest(repo_project(tmp_path) / "tuning.yaml"))
    assert report.ok, report.render()


def test_check_names_the_dependency_that_changed(tmp_path):
    (tmp_path / "tuning.yaml").write_text("""\
version: 1
kernels:
  scaled:
    kernel: mylib.main:kernel
    launch: mylib.main:launch
    inputs: mylib.main:make_inputs
    reference: mylib.main:reference
    key: [n]
    space: {BLOCK: [64]}
    shapes: [{n: 64}]
""")
    write_lib(tmp_path, "import pkg.mod as m")
    manifest = load_manifest(tmp_path / "tuning.yaml")
    spec = manifest.kernel("scaled")
    code, parts = measured_dependencies(SourceIndex(tmp_path), spec)
    record = TuningRecord(fingerprint=bench_fingerprint(spec, code, (64,), "float16", H100), shape=[64])
    record.device.key, record.device.name = H100.key, H100.name
    record.device.compute_capability, record.device.backend = H100.compute_capability, H100.backend
    record.toolchain.triton, record.toolchain.torch = H100.triton, H100.torch
    record.bench.warmup_ms, record.bench.rep_ms, record.bench.l2_flush = 2.0, 20.0, True
    for name, part in parts.items():
        record.dependencies.add(name=name, digest=part)
    write_lib(tmp_path, "import pkg.mod as m", HELPERS.replace("SCALE = 2", "SCALE = 3"))
    code, parts = measured_dependencies(SourceIndex(tmp_path), spec)
    assert record_problem(spec, code, record, None, parts) == "code changed: mylib/helpers.py:SCALE changed"


def test_a_helper_edit_behind_import_as_makes_a_tuned_table_stale(tmp_path):
    """End to end: tune, edit a constant a kernel reads through `import pkg.mod as m`, and both
    `doit check` and `doit tune` see it."""
    root = make_project(tmp_path / "project", vector_add_manifest(
        "    space: {BLOCK_SIZE: [256], num_warps: [4]}\n    shapes: [{n: 1000}]\n    dtypes: [float32]\n"))
    (root / "kernels" / "vadd_helpers.py").write_text("SCALE = 1\n")
    source = (root / "kernels" / "vector_add.py").read_text()
    source = source.replace("import aot_tune\n", "import aot_tune\nimport kernels.vadd_helpers as helpers\n", 1)
    source = source.replace('n = shape["n"]', 'n = shape["n"] * helpers.SCALE', 1)
    (root / "kernels" / "vector_add.py").write_text(source)
    tune(root)
    assert doit(root, "check").returncode == 0
    (root / "kernels" / "vadd_helpers.py").write_text("SCALE = 1 * 1\n")
    proc = doit(root, "check")
    assert proc.returncode == 1
    assert "kernels/vadd_helpers.py:SCALE changed" in proc.stdout
    assert any(name.startswith("bench:") for name in executed(tune(root)))


# --------------------------------------------------------------------------- output paths


@pytest.mark.parametrize("entry, problem", [
    ('generated: "../outside/gen_{kernel}.py"', "outside the project"),
    ('cache: "../x/{kernel}.tuning.pb"', "outside the project"),
    ('generated: "generated/../../{kernel}.py"', "outside the project"),
    ('generated: "kernels/{kernel}.py"', "overwrite their source"),
    ('cache: "generated/{kernel}.py.tuning"', "must end in"),
])
def test_output_paths_stay_inside_the_project_and_off_its_sources(tmp_path, entry, problem):
    root = make_project(tmp_path, MANIFEST.replace("defaults:\n", f"defaults:\n  {entry}\n"))
    with pytest.raises(ManifestError) as info:
        load_manifest(root / "tuning.yaml")
    assert problem in str(info.value) and str(info.value).startswith(f"{root / 'tuning.yaml'}:")


def test_a_link_out_of_the_project_is_refused(tmp_path):
    root = make_project(tmp_path / "project", MANIFEST)
    (tmp_path / "elsewhere").mkdir()
    (root / "generated").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ManifestError, match="through a link"):
        load_manifest(root / "tuning.yaml")


def test_a_kernel_name_too_long_for_a_file_is_one_line(tmp_path):
    root = make_project(tmp_path, MANIFEST.replace("  vector_add:\n", f"  {'k' * 300}:\n", 1))
    with pytest.raises(ManifestError, match="too long") as info:
        load_manifest(root / "tuning.yaml")
    assert "\n" not in str(info.value)
