"""docs/adopting.md's "A kernel you cannot edit", end to end: a package with ``@triton.autotune``
kernels (over ``@triton.heuristics`` with ``prune_configs_by`` and ``reset_to_zero``, and under
``@triton.heuristics``) built and installed with pip into a folder of its own, never edited; a
project beside it that runs ``doit adopt`` (which writes the launch functions), fills in inputs
and shapes, and ``doit tune`` on the interpreter; then each table config, launched through
``aot_tune.untuned``, computes what the library's own call computes."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tunerun import doit_command, executed, pip_installed, subprocess_env

PACKAGE = "instlib"

#: The library's kernels, as such libraries write them; two configs each, to keep the run short.
OPS = '''\
import torch
import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BLOCK_SIZE": 32}, num_warps=1),
    triton.Config({"BLOCK_SIZE": 64}, num_warps=2),
]


def _prune(configs, named_args, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK_SIZE"] <= max(32, named_args["n_cols"])]


@triton.autotune(configs=CONFIGS, key=["n_cols"], prune_configs_by={"early_config_prune": _prune},
                 reset_to_zero=["Y_ptr"])
@triton.heuristics({"EVEN": lambda args: args["n_cols"] % args["BLOCK_SIZE"] == 0})
@triton.jit
def _scale_kernel(X_ptr, W_ptr, Y_ptr, stride, n_cols, BLOCK_SIZE: tl.constexpr, EVEN: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        if EVEN:
            y = tl.load(X_ptr + row * stride + cols) * tl.load(W_ptr + cols)
            tl.atomic_add(Y_ptr + row * stride + cols, y)
        else:
            mask = cols < n_cols
            y = tl.load(X_ptr + row * stride + cols, mask=mask, other=0.0) * tl.load(W_ptr + cols, mask=mask)
            tl.atomic_add(Y_ptr + row * stride + cols, y, mask=mask)


def scale(x, w):
    """y = x * w, row by row (accumulated into a zeroed y, hence reset_to_zero)."""
    y = torch.zeros_like(x)
    _scale_kernel[(x.shape[0],)](x, w, y, x.stride(0), x.shape[1])
    return y


@triton.heuristics({"HAS_BIAS": lambda args: args["B_ptr"] is not None})
@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def _add_kernel(X_ptr, B_ptr, Y_ptr, n, BLOCK_SIZE: tl.constexpr, HAS_BIAS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(X_ptr + offs, mask=mask)
    if HAS_BIAS:
        x += tl.load(B_ptr + offs, mask=mask)
    tl.store(Y_ptr + offs, x, mask=mask)


def add_bias(x, bias=None):
    y = torch.empty_like(x)
    n = x.numel()
    _add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, bias, y, n)
    return y
'''

#: What the user writes in their project: the inputs of each launch function adopt wrote.
INPUTS = '''\
import torch


def scale_inputs(shape, dtype, device):
    return (torch.randn(3, shape["n_cols"], dtype=dtype, device=device),
            torch.randn(shape["n_cols"], dtype=dtype, device=device))


def add_inputs(shape, dtype, device):
    return (torch.randn(shape["n"], dtype=dtype, device=device), torch.randn(shape["n"], dtype=dtype, device=device))
'''

#: The run-time side in the user's project: each tuned config read from the generated table
#: (strict: only an exact entry) and launched through aot_tune.untuned, against the library's call.
PROBE = f'''\
import json
import torch
import triton
import aot_tune
from aot_tune.runtime import TunedTable
from {PACKAGE} import ops


def cpu_benchmarker(kernel_call, quantiles):  # Triton's own needs a GPU driver
    kernel_call()
    return [1.0] * len(quantiles)


ops._scale_kernel.do_bench = ops._add_kernel.fn.do_bench = cpu_benchmarker
scale, add = TunedTable("_scale_kernel", strict=True), TunedTable("_add_kernel", strict=True)
used = []
for n in (64, 100):
    x, w = torch.randn(3, n, dtype=torch.float16), torch.randn(n, dtype=torch.float16)
    config = scale.lookup(torch.float16, n_cols=n)
    y = torch.zeros_like(x)
    aot_tune.untuned(ops._scale_kernel)[(x.shape[0],)](x, w, y, x.stride(0), n, **config)
    assert torch.equal(y, ops.scale(x, w)), n
    config_add = add.lookup(torch.float16, n=n)
    out = torch.empty_like(w)
    aot_tune.untuned(ops._add_kernel)[(triton.cdiv(n, config_add["BLOCK_SIZE"]),)](w, w, out, n, **config_add)
    assert torch.equal(out, ops.add_bias(w, w)), n
    used.append([config, config_add])
print(json.dumps([ops.__file__, used]))
'''


def run(cwd: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def digests(folder: Path) -> dict[str, str]:
    """Every file of the installed package (Python's bytecode caches aside) -> its sha256."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def test_an_installed_packages_kernels_are_adopted_tuned_and_launched_untouched(tmp_path):
    site = pip_installed(tmp_path, PACKAGE, {"ops.py": OPS}, version="2.1")
    installed = digests(site)
    assert f"{PACKAGE}/ops.py" in installed and any(name.endswith(".dist-info/RECORD") for name in installed)

    project = tmp_path / "project"
    project.mkdir()
    (project / "tuning_inputs.py").write_text(INPUTS)
    env = subprocess_env(site)  # the package is importable only from where pip put it
    for kernel in ("_scale_kernel", "_add_kernel"):
        run(project, *doit_command("adopt", "--write", f"{PACKAGE}.ops:{kernel}"), env=env)
    launch = (project / "tuning_launch.py").read_text()
    assert "aot_tune.untuned(_scale_kernel)[x.shape[0],](x, w, y, x.stride(0), x.shape[1], **config)" in launch
    assert "def launch_add_kernel(x, bias=None, *, config):" in launch
    manifest = (project / "tuning.yaml").read_text()
    assert "    launch: tuning_launch:launch_scale_kernel  # instlib.ops:scale through aot_tune.untuned\n" in manifest
    hint = "inputs: FILL_IN  # module:function(shape, dtype, device) -> "
    manifest = (manifest.replace("kernels:\n", "defaults:\n  targets: [sm90]\nkernels:\n", 1)
                .replace(f"{hint}(x, w)", "inputs: tuning_inputs:scale_inputs  #")
                .replace(f"{hint}(x, bias)", "inputs: tuning_inputs:add_inputs  #")
                .replace("{n_cols: FILL_IN}", "{n_cols: 64}\n      - {n_cols: 100}")
                .replace("{n: FILL_IN}", "{n: 64}\n      - {n: 100}"))
    assert "FILL_IN:" in manifest and "FILL_IN}" not in manifest  # only the comments still say it
    (project / "tuning.yaml").write_text(manifest)

    tune = ("tune", "-n", "2", "--bench-backend", "interpreter")
    run(project, *doit_command(*tune), env=env)
    assert executed(run(project, *doit_command(*tune), env=env)) == []  # the installed version is the fingerprint
    assert digests(site) == installed, "the installed package was modified"

    probe = run(project, sys.executable, "-c", PROBE, env={**env, "TRITON_INTERPRET": "1"})
    where, used = json.loads(probe.stdout.splitlines()[-1])
    assert Path(where).is_relative_to(site)
    for kernel, key in (("_scale_kernel", "n_cols"), ("_add_kernel", "n")):
        tables = (project / "generated" / f"{kernel}.py").read_text()
        assert "(64, 'float16'): {'BLOCK_SIZE'" in tables and "(100, 'float16'): {'BLOCK_SIZE'" in tables, tables
    assert all(set(config) >= {"BLOCK_SIZE", "num_warps"} for pair in used for config in pair), used
    assert digests(site) == installed


def test_a_launch_that_goes_through_the_librarys_autotuner_is_refused_not_measured(tmp_path):
    """A hand-written launch that takes config= but calls the library's wrapper would measure the
    autotuner's own pick under every candidate's name: its compiles fail with the fix instead."""
    source = tmp_path / "src"
    (source / PACKAGE).mkdir(parents=True)
    (source / PACKAGE / "__init__.py").write_text("")
    (source / PACKAGE / "ops.py").write_text(OPS)
    project = tmp_path / "project"
    project.mkdir()
    (project / "tuning_inputs.py").write_text(INPUTS + f"\n\ndef mistaken(x, w, config):\n"
                                                      f"    from {PACKAGE}.ops import scale\n    return scale(x, w)\n")
    (project / "tuning.yaml").write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{targets: [sm90]}}
        kernels:
          mistake:
            kernel: {PACKAGE}.ops:_scale_kernel
            launch: tuning_inputs:mistaken
            inputs: tuning_inputs:scale_inputs
            key: [n_cols]
            configs: {PACKAGE}.ops:CONFIGS
            shapes: [{{n_cols: 64}}]
        """))
    proc = subprocess.run(doit_command("tune", "-n", "2", "--bench-backend", "interpreter"), cwd=project,
                          env=subprocess_env(source), capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert ("mistake: the launch function tuning_inputs:mistaken launched instlib.ops:_scale_kernel through its "
            "@triton.autotune, which runs a config of its own choosing") in proc.stdout + proc.stderr
    assert not (project / "generated" / "mistake.py").exists()
