"""`doit check` and the devices a project ships: a device declared under `devices:` with no table,
and this machine's GPU with no table, fail the check; the interpreter is required only when
declared, and a machine without a GPU checks no local device. The GPU is the one
aot_tune.bench.local.detect finds: a fake `nvidia-smi` first on PATH, as in tests/unit/test_devices.py."""
from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
from tunerun import doit_command, make_project, subprocess_env, tune, vector_add_manifest

from aot_tune.manifest import load_manifest
from aot_tune.tables.check import check

MANIFEST = vector_add_manifest("""\
    space:
      BLOCK_SIZE: [128]
      num_warps: [4]
    shapes:
      - {n: 1000}
      - {n: 4096}
    interpreter_shapes:
      - {n: 1000}
""")

H100 = r"0, NVIDIA H100 80GB HBM3, 9.0\n"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """vector_add tuned under the interpreter: an in-sync table for the interpreter only."""
    root = make_project(tmp_path_factory.mktemp("coverage"), MANIFEST)
    tune(root)
    return root


def check_with(project: Path, tmp_path: Path, smi: str | None, manifest: str | None = None):
    """`doit check` with a fake nvidia-smi listing ``smi`` (None: one that fails, as on a machine
    without a GPU driver) first on PATH, after writing ``manifest`` (restored afterwards)."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    script = fake / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '{smi}'\n" if smi is not None else "#!/bin/sh\necho failed\nexit 9\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = subprocess_env()
    env["PATH"] = f"{fake}:{env['PATH']}"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    path = project / "tuning.yaml"
    original = path.read_text()
    if manifest is not None:
        path.write_text(manifest)
    try:
        return subprocess.run(doit_command("check"), cwd=project, env=env, capture_output=True, text=True,
                              timeout=300)
    finally:
        path.write_text(original)


def declare(devices: str, kernel: str = "") -> str:
    text = MANIFEST.replace("defaults:\n", f"defaults:\n  devices: {devices}\n", 1)
    return text.replace("    interpreter_shapes:", f"    devices: {kernel}\n    interpreter_shapes:", 1) \
        if kernel else text


def test_without_a_gpu_or_declared_devices_the_success_line_says_what_was_checked(project, tmp_path):
    proc = check_with(project, tmp_path, None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == ("1 table in sync with the sources, the manifest and the toolchain; "
                                            "devices covered: interpreter")


def test_a_declared_device_without_a_table_fails_naming_its_shapes_and_dtypes(project, tmp_path):
    proc = check_with(project, tmp_path, None, declare("[h100-sxm, h200]"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for device in ("h100-sxm", "h200"):
        assert (f"missing: vector_add has no table for {device} (declared in devices:); "
                f"needs float16 for 2 shapes: 1000, 4096") in proc.stdout
    assert "out of date: vector_add; fix: run `doit tune vector_add`" in proc.stdout
    assert "in sync" not in proc.stdout


def test_the_interpreter_is_required_only_where_declared(project, tmp_path):
    # a kernel's list replaces the defaults': declaring the interpreter, whose table exists, passes
    proc = check_with(project, tmp_path, None, declare("[h200]", kernel="[interpreter]"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].endswith("devices covered: interpreter (declared: interpreter)")


def test_on_a_gpu_machine_its_gpu_needs_a_table(project, tmp_path):
    proc = check_with(project, tmp_path, H100)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("missing: vector_add has no table for h100-sxm (this machine's GPU); needs float16 for 2 shapes: "
            "1000, 4096") in proc.stdout


def test_a_declared_local_gpu_is_flagged_once(project):
    report = check(load_manifest(project / "tuning.yaml"), local_device="h200")
    assert [(c.device, c.required_by) for c in report.coverage] == [("interpreter", ""), ("h200", "this machine's GPU")]
    text = declare("[h200]")
    (project / "declared.yaml").write_text(text)
    report = check(load_manifest(project / "declared.yaml"), local_device="h200")
    assert [(c.device, c.required_by) for c in report.coverage] == [("interpreter", ""), ("h200", "declared in devices:")]
    assert report.render().count("has no table for h200") == 1 and not report.ok
