"""A kernel library from PyPI that aot_tune did not write, installed as a user installs it and
never edited: flash-linear-attention (``fla-core``), whose l2norm kernel is keyed on the feature
dim ``D`` and a bucket ``NB`` of the rows, and which reads its own per-kernel config files.

A project outside this checkout (tools/studies/fla_tables/project's ``fla_tuning.py``: launches
through ``aot_tune.untuned``, and an exporter writing fla's format) tunes it once, with the rows
``T`` as a bench dim and a budgeted search, under the interpreter; then fla itself, in a process
without aot_tune, reads the exported file and launches the tuned config (on the CPU it could not
autotune: Triton's benchmarker needs a GPU, so running at all proves it read the file).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tunerun import REPO, executed, subprocess_env

FLA = "fla-core==0.6.0"
MANIFEST = """\
version: 1
defaults:
  dtypes: [float16]
  targets: [sm90]
  bench: {warmup_ms: 1, rep_ms: 1}
  exports:
    - {to: "fla_tuning:fla_config_file", path: "fla_configs/{device_name}/{kernel}.json"}
kernels:
  l2norm_fwd_kernel:
    kernel: fla.modules.norm.l2norm:l2norm_fwd_kernel
    launch: fla_tuning:launch_blocked
    inputs: fla_tuning:make_inputs
    reference: fla_tuning:reference
    key: [D, NB]
    space: {BT: [16, 32, 64], num_warps: [1, 2, 4], num_stages: [3]}
    search: {strategy: surrogate, budget: {configs: 2}}
    constraints: ["NB == cdiv(T, 65536)"]
    shapes:
      - grid: {D: [16, 32], NB: [1], T: [8, 64]}
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """fla-core and einops from PyPI, installed into a folder as pip installs them (no edits)."""
    target = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                           FLA, "einops"], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        if any(s in proc.stderr for s in ("NewConnectionError", "Could not find a version", "No matching distribution")):
            pytest.skip(f"PyPI is not reachable here, {FLA} cannot be installed: {proc.stderr.strip()[-200:]}")
        pytest.fail(f"pip install {FLA} failed:\n{proc.stderr}")
    return target


def _digest(folder: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.py"))}


@pytest.fixture(scope="module")
def tuned(site: Path, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The project tuned once (``aot_tune tune`` on the interpreter), and that run; fla's files
    are checked to be as pip installed them before and after."""
    project = tmp_path_factory.mktemp("fla") / "project"
    project.mkdir()
    shutil.copy(REPO / "tools" / "studies" / "fla_tables" / "project" / "fla_tuning.py", project)
    (project / "tuning.yaml").write_text(MANIFEST)
    installed = _digest(site / "fla")
    proc = subprocess.run([sys.executable, "-m", "aot_tune", "tune", "--bench-backend", "interpreter"],
                          cwd=project, env=subprocess_env(site, project), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _digest(site / "fla") == installed  # fla was not edited
    return project, proc


@pytest.fixture(scope="module")
def again(site: Path, tuned) -> subprocess.CompletedProcess:
    """A second ``aot_tune tune`` of the tuned project."""
    project, _ = tuned
    return subprocess.run([sys.executable, "-m", "aot_tune", "tune", "--bench-backend", "interpreter"],
                          cwd=project, env=subprocess_env(site, project), capture_output=True, text=True, timeout=600)


def test_fla_reads_the_tables_aot_tune_exported(site: Path, tuned, again, tmp_path: Path) -> None:
    project, _ = tuned
    (exported,) = (project / "fla_configs").glob("*/l2norm_fwd_kernel.json")
    entries = json.loads(exported.read_text())["autotune_entries"]
    keys = sorted(tuple(e["autotune_key"]) for e in entries.values())
    assert keys == [(16, 1, "torch.float16", "torch.float16", "torch.float32"),
                    (32, 1, "torch.float16", "torch.float16", "torch.float32")]  # per key; T is a bench dim
    tables_path = project / "generated" / "l2norm_fwd_kernel.py"
    namespace: dict = {}
    exec(compile(tables_path.read_text(), str(tables_path), "exec"), namespace)
    table = namespace["TABLES"]["interpreter"]

    probe = (
        "import json, sys, torch\n"
        "from fla.modules.norm.l2norm import l2norm_fwd, l2norm_fwd_kernel\n"
        "out = {}\n"
        "for D in (16, 32):\n"
        "    x = torch.randn(8, D, dtype=torch.float16)\n"
        "    y, _ = l2norm_fwd(x)\n"
        "    ref = x.float() * torch.rsqrt(x.float().pow(2).sum(-1, keepdim=True) + 1e-6)\n"
        "    c = l2norm_fwd_kernel.best_config\n"
        "    out[D] = {'config': {**c.kwargs, 'num_warps': c.num_warps, 'num_stages': c.num_stages},\n"
        "              'error': float((y.float() - ref).norm() / ref.norm())}\n"
        "print(json.dumps({'runs': out, 'aot_tune': 'aot_tune' in sys.modules}))\n")
    fla_env = {k: v for k, v in os.environ.items() if not k.startswith(("FLA_", "PYTHONPATH"))}
    fla_env.update(PYTHONPATH=str(site), TRITON_INTERPRET="1", FLA_CACHE_MODE="strict",
                   FLA_CONFIG_DIR=str(exported.parent))
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=fla_env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["aot_tune"] is False
    for D, measured in result["runs"].items():
        assert measured["config"] == table[(int(D), 1, "float16")]
        assert measured["error"] < 1e-2

    assert again.returncode == 0 and executed(again) == [] and "nothing to do" in again.stdout
    check = subprocess.run([sys.executable, "-m", "aot_tune", "check"], cwd=project, env=subprocess_env(site, project),
                           capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_budgeted_search_compiles_only_what_it_reaches_of_an_installed_library(tuned, again) -> None:
    """The installed, unedited kernel under the manifest's surrogate search of 2 configs a shape
    over a space of 9: the compile stage builds nothing, the searches compile the configs they
    reach and only those, and a second run has nothing to do."""
    from aot_tune.cache import read_record

    project, proc = tuned
    assert not [n for n in executed(proc) if n.startswith("compile:")]
    records = [read_record(p) for p in (project / ".aot_tune" / "bench").rglob("*.pb")]
    reached = {m.config.id for r in records for m in r.measurements}
    compiled = {p.stem for p in (project / ".aot_tune" / "compile" / "l2norm_fwd_kernel").rglob("*.json")}
    assert records and all(r.search.configs_measured == 2 for r in records)
    assert compiled == reached and len(compiled) < 9
    assert again.returncode == 0 and executed(again) == [] and "nothing to do" in again.stdout


#: A user's workload over fla's l2norm forward: two token counts and feature dims, float32 (the
#: interpreter computes bf16 wrong), counting the autotuner benchmarks that ran.
FLA_WORKLOAD = """\
import json, os, torch
import triton.runtime.autotuner as autotuner
benchmarks = []
original = autotuner.Autotuner._bench
autotuner.Autotuner._bench = lambda self, *a, **k: (benchmarks.append(1), original(self, *a, **k))[1]
if os.environ.get("WORKLOAD_TABLES"):
    import aot_tune
    aot_tune.use_tables(os.environ["WORKLOAD_TABLES"], verbose=True)
from fla.modules.l2norm import l2norm_fwd
torch.manual_seed(0)
errors = []
for T, D in ((64, 32), (100, 64)):
    x = torch.randn(T, D, dtype=torch.float32)
    y, _ = l2norm_fwd(x)
    ref = x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)
    errors.append(float((y - ref).norm() / ref.norm()))
print(json.dumps({"benchmarks": len(benchmarks), "errors": errors}))
"""


def test_fla_l2norm_is_recorded_tuned_and_run_with_zero_autotuning(site: Path, tmp_path: Path) -> None:
    """fla's l2norm forward, installed and unedited, recorded from a workload with no hand-written
    entry (its own ``fla_cache_autotune``), tuned, and run again through ``aot_tune.use_tables``:
    no autotuner benchmark (on the CPU one could not even run: Triton's benchmarker needs a GPU)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "workload.py").write_text(FLA_WORKLOAD)
    installed = _digest(site / "fla")
    env = {**subprocess_env(site), "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-m", "aot_tune", "record", "--", sys.executable, "workload.py"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kernels.l2norm_fwd_kernel: 2 new shapes (new entry)" in proc.stdout, proc.stdout
    manifest = (project / "tuning.yaml").read_text()
    assert "kernel: fla.modules.norm.l2norm:l2norm_fwd_kernel" in manifest and "key: [D, NB, arg_dtypes]" in manifest
    # one target, and a search of 3 configs a shape that compiles only what it reaches, as a user
    # with a big space may set: the recorded entry is an ordinary one
    (project / "tuning.yaml").write_text(manifest.replace(
        "version: 1\n", "version: 1\ndefaults:\n  targets: [sm90]\n"
                        "  search: {strategy: surrogate, budget: {configs: 3}}\n"))

    env.pop("TRITON_INTERPRET")
    tuned = subprocess.run([sys.executable, "-m", "aot_tune", "tune", "--bench-backend", "interpreter"],
                           cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    run = subprocess.run([sys.executable, "workload.py"], cwd=project, capture_output=True, text=True, timeout=300,
                         env={**env, "TRITON_INTERPRET": "1", "WORKLOAD_TABLES": "generated"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "2 tuned keys installed in 1 autotuner (interpreter)" in run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["benchmarks"] == 0 and max(result["errors"]) < 1e-5, result
    assert _digest(site / "fla") == installed
