"""Running `doit tune` in a scratch project the way a user does: a subprocess per run."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def make_project(root: Path, manifest: str) -> Path:
    """A project folder holding a copy of this repo's kernels and the given manifest."""
    shutil.copytree(REPO / "kernels", root / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "tuning.yaml").write_text(manifest)
    return root


def _manifest(defaults: str, kernel: str, module: str, kernel_attr: str, launch_attr: str, key: str,
              entry: str) -> str:
    """A manifest whose first kernel is ``module``'s in kernels/: its references and key, then
    ``entry`` (space, shapes and the rest, indented under the kernel; more kernels may follow)."""
    return f"""\
version: 1
defaults:
{defaults}kernels:
  {kernel}:
    kernel: kernels.{module}:{kernel_attr}
    launch: kernels.{module}:{launch_attr}
    inputs: kernels.{module}:make_inputs
    reference: kernels.{module}:reference
    key: {key}
""" + entry


def vector_add_manifest(entry: str, targets: str = "[sm90]") -> str:
    """kernels/vector_add.py with 1 ms of warm-up and of timing, then ``entry``."""
    return _manifest(f"  targets: {targets}\n  bench: {{warmup_ms: 1, rep_ms: 1}}\n", "vector_add", "vector_add",
                     "add_kernel", "add", "[n]", entry)


def gemm_manifest(entry: str, targets: str = "[sm90]") -> str:
    """kernels/gemm.py with the default bench settings, then ``entry``."""
    return _manifest(f"  targets: {targets}\n", "gemm", "gemm", "matmul_kernel", "matmul", "[M, N, K]", entry)


def pip_installed(folder: Path, package: str, modules: dict[str, str], version: str = "1.0") -> Path:
    """``package`` (its ``modules``: file name -> source) built and installed with pip into a
    folder of its own under ``folder``, as a user installs a library: never editable, never edited."""
    source = folder / f"{package}-src"
    (source / package).mkdir(parents=True)
    (source / package / "__init__.py").write_text("")
    for name, text in modules.items():
        (source / package / name).write_text(text)
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{package}"\nversion = "{version}"\n\n[tool.setuptools]\npackages = ["{package}"]\n')
    site = folder / f"{package}-site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(site), str(source)], capture_output=True, text=True,
                          timeout=300, env=subprocess_env())
    assert proc.returncode == 0, f"pip install {package} failed:\n{proc.stdout}\n{proc.stderr}"
    return site


def alias_bomb(levels: int = 8) -> str:
    """YAML anchors each aliasing the one before 9 times: small text, 9**levels nodes once expanded."""
    lines = ["x_anchors:", "  a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(levels):
        this, last = chr(98 + i), chr(97 + i)
        lines.append(f"  {this}: &{this} [" + ", ".join([f"*{last}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def subprocess_env(*first_on_path: Path) -> dict[str, str]:
    """This environment with the given folders and the repo first on PYTHONPATH, and without the
    interpreter switch the test session sets (subprocesses compile and launch for real)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [*map(str, first_on_path), str(REPO), os.environ.get("PYTHONPATH")]))
    return env


def doit_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "doit", *args]


def doit(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(doit_command(*args), cwd=project, env=subprocess_env(), capture_output=True, text=True,
                          timeout=600)


def tune(project: Path, *args: str, backend: str = "interpreter", check: bool = True) -> subprocess.CompletedProcess:
    proc = doit(project, "tune", "--bench-backend", backend, *args)
    if check and proc.returncode != 0:
        pytest.fail(f"doit tune failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def executed(proc: subprocess.CompletedProcess) -> list[str]:
    """Task names doit ran (it prints '.  name' for a run task and '-- name' for an up-to-date one)."""
    return [line[3:] for line in proc.stdout.splitlines() if line.startswith(".  ")]


def planted(fault: int, block: int = 64, n: int = 300, settings=None):
    """A bench request for one config of tests/fixtures/planted_kernels.py (``FAULT``: 0 correct, 1 wrong,
    2 NaN, 3 illegal address, 4 hang), id ``fault<F>-block<B>``."""
    from aot_tune.bench.runner import BenchRequest
    from aot_tune.manifest import BenchSettings

    return BenchRequest(
        kernel="planted", root=str(REPO / "tests" / "fixtures"), launch_ref="planted_kernels:launch",
        inputs_ref="planted_kernels:make_inputs", reference_ref="planted_kernels:reference",
        shape=(("n", n),), dtype="float32", config_id=f"fault{fault}-block{block}",
        config=(("BLOCK", block), ("FAULT", fault)),
        settings=settings or BenchSettings(warmup_ms=1.0, rep_ms=1.0, l2_flush=True, l2_flush_bytes=None),
    )
