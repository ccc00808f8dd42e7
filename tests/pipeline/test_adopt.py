"""Migrating a third-party ``@triton.autotune`` kernel, as its maintainer would: the starting entry
from ``doit adopt`` (its function), at most 3 changed lines of the kernel file, about 12 lines of
YAML and an inputs builder, one ``doit tune`` on the interpreter, and the decorated kernel
launching the generated table's config (``best_config``)."""
from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import tunerun
import yaml
from tunerun import subprocess_env

from aot_tune.adopt import PLACEHOLDER, starting_entry, write_entry
from aot_tune.manifest.writing import flow_mapping
from aot_tune.errors import ManifestError, TuneError
from aot_tune.manifest import load_manifest

#: A row-wise kernel written the way kernel libraries write them: its own CONFIGS list, a key,
#: and a launch wrapper that allocates the output.
KERNEL_FILE = '''\
import torch
import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BLOCK_SIZE": 32}, num_warps=1),
    triton.Config({"BLOCK_SIZE": 64}, num_warps=2),
    triton.Config({"BLOCK_SIZE": 128}, num_warps=4),
]


@triton.autotune(configs=CONFIGS, key=["n_cols"])
@triton.jit
def _rms_scale_kernel(X_ptr, W_ptr, Y_ptr, stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X_ptr + row * stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc) / n_cols + 1e-6)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(X_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(W_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y_ptr + row * stride + cols, (x * rstd * w).to(Y_ptr.dtype.element_ty), mask=mask)


def rms_scale(x, w):
    y = torch.empty_like(x)
    _rms_scale_kernel[(x.shape[0],)](x, w, y, x.stride(0), x.shape[1])
    return y
'''

#: The whole inputs builder a maintainer writes (beside the kernel, not in it).
INPUTS_BUILDER = '''\
import torch


def make_inputs(shape, dtype, device):
    return (torch.randn(4, shape["n_cols"], dtype=dtype, device=device),
            torch.rand(shape["n_cols"], dtype=dtype, device=device) + 0.5)
'''


def migrate(text: str) -> str:
    """The change a maintainer makes to the kernel file: import aot_tune, swap the decorator."""
    text = text.replace("import triton\n", "import aot_tune\nimport triton\n", 1)
    return text.replace("@triton.autotune(", "@aot_tune.autotune(", 1)


def third_party_project(root: Path, package: str) -> Path:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "rms.py").write_text(KERNEL_FILE)
    (root / "tuning_inputs.py").write_text(INPUTS_BUILDER)
    return root


def fill(entry: str, package: str) -> str:
    """What the maintainer types into the placeholders: the launch wrapper, the builder, two sizes."""
    filled = (entry.replace(f"launch: {PLACEHOLDER}", f"launch: {package}.rms:rms_scale")
              .replace(f"inputs: {PLACEHOLDER}", "inputs: tuning_inputs:make_inputs")
              .replace(f"      - {{n_cols: {PLACEHOLDER}}}\n", "      - {n_cols: 64}\n      - {n_cols: 200}\n"))
    return "".join(line for line in filled.splitlines(keepends=True)
                   if line.strip() and not line.strip().startswith("#"))


def test_the_starting_entry_names_the_decorators_list_and_parses_once_filled(tmp_path, monkeypatch):
    monkeypatch.chdir(third_party_project(tmp_path, "adopt_lib_a"))
    name, entry = starting_entry("adopt_lib_a.rms:_rms_scale_kernel")
    assert name == "_rms_scale_kernel"
    assert "    configs: adopt_lib_a.rms:CONFIGS\n" in entry and "    key: [n_cols]\n" in entry
    assert "    default_config: {BLOCK_SIZE: 32, num_warps: 1, num_stages: 3}\n" in entry
    write_entry("tuning.yaml", name, entry)
    with pytest.raises(ManifestError, match=f"kernels._rms_scale_kernel.launch: still the {PLACEHOLDER} "
                                            f"placeholder of doit adopt"):
        load_manifest("tuning.yaml")  # an unfilled placeholder is one line
    Path("tuning.yaml").write_text(fill(Path("tuning.yaml").read_text(), "adopt_lib_a"))
    spec = load_manifest("tuning.yaml").kernels[0]
    assert spec.reference is None and spec.shapes == ((64,), (200,)) and spec.space.size() == 3
    with pytest.raises(TuneError, match="exists already"):
        write_entry("tuning.yaml", name, entry)


def test_a_list_written_inside_the_decorator_is_inlined(tmp_path, monkeypatch):
    root = third_party_project(tmp_path, "adopt_lib_b")
    kernel = root / "adopt_lib_b" / "rms.py"
    kernel.write_text(kernel.read_text().replace("configs=CONFIGS", "configs=[triton.Config({'BLOCK_SIZE': 16}, "
                                                 "num_warps=1, num_ctas=2), *CONFIGS[:1]]"))
    monkeypatch.chdir(root)
    _, entry = starting_entry("adopt_lib_b.rms:_rms_scale_kernel")
    assert ("    configs:\n      - {BLOCK_SIZE: 16, num_warps: 1, num_stages: 3, num_ctas: 2}\n"
            "      - {BLOCK_SIZE: 32, num_warps: 1, num_stages: 3, num_ctas: 1}\n") in entry
    assert flow_mapping({"EPS": 1e-05, "SCALE": 2.5, "MODE": "fast"}) == '{EPS: 1.0e-05, SCALE: 2.5, MODE: "fast"}'
    assert yaml.safe_load(flow_mapping({"EPS": 1e-05, "BIG": 1e20})) == {"EPS": 1e-05, "BIG": 1e20}
    with pytest.raises(TuneError, match="is not a @triton.autotune kernel"):
        starting_entry("adopt_lib_b.rms:rms_scale")


@pytest.mark.parametrize("backend", [
    "interpreter",
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                    reason="needs a CUDA GPU")]),
])
def test_a_third_party_kernel_migrates_in_3_lines_and_12_of_yaml_and_uses_its_table(tmp_path, backend):
    package = "rowlib"
    root = third_party_project(tmp_path / "project", package)
    kernel_file = root / package / "rms.py"
    sys.path.insert(0, str(root))
    try:
        name, entry = starting_entry(f"{package}.rms:_rms_scale_kernel", root)
    finally:
        sys.path.remove(str(root))
        for module in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
            del sys.modules[module]
    before = kernel_file.read_text()
    kernel_file.write_text(migrate(before))
    changed = [line for line in difflib.unified_diff(before.splitlines(), migrate(before).splitlines(), lineterm="")
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert len([line for line in changed if line.startswith("+")]) <= 3, changed
    manifest = "version: 1\nkernels:\n" + fill(entry, package)
    (root / "tuning.yaml").write_text(manifest)
    assert len(manifest.splitlines()) <= 12, manifest
    assert len(INPUTS_BUILDER.strip().splitlines()) <= 6

    # the first run tunes: no reference, so each config's output is checked against the default's
    tunerun.tune(root, "-n", "2", backend=backend)
    assert tunerun.executed(tunerun.tune(root, "-n", "2", backend=backend)) == []  # the second run is a no-op

    device = "cpu" if backend == "interpreter" else "cuda"
    probe = textwrap.dedent(f"""\
        import json, warnings
        import torch
        from aot_tune.runtime import current_device_key
        from {package}.rms import _rms_scale_kernel, rms_scale
        from generated.{name} import TABLES
        torch.manual_seed(0)
        x, w = torch.randn(4, 200, device="{device}"), torch.rand(200, device="{device}") + 0.5
        assert _rms_scale_kernel.best_config is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a fallback would warn: the tuned key must be found
            y = rms_scale(x.half(), w.half())
        expected = x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-6) * w
        torch.testing.assert_close(y.float(), expected, rtol=1e-2, atol=1e-2)
        tuned = TABLES[current_device_key()][(200, "float16")]
        print(json.dumps([_rms_scale_kernel.best_config.all_kwargs(), tuned]))
        """)
    env = {**subprocess_env(root), **({"TRITON_INTERPRET": "1"} if backend == "interpreter" else {})}
    proc = subprocess.run([sys.executable, "-c", probe], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    used, tuned = json.loads(proc.stdout.splitlines()[-1])
    assert {k: v for k, v in used.items() if k in tuned} == tuned
    assert os.path.exists(root / ".aot_tune" / "configs" / f"{package}.rms.CONFIGS.json")


def test_without_a_reference_each_config_is_checked_against_the_check_configs_output():
    """The check config's output is the expected one, computed once per input set; a config that
    computes something else is a wrong result (tests/fixtures/planted_kernels.py, interpreter)."""
    from dataclasses import replace

    from aot_tune.bench.engine.pipeline import measure_wall
    from aot_tune.bench.engine.workload import Workload
    from tunerun import planted

    correct = (("BLOCK", 64), ("FAULT", 0))
    requests = [replace(planted(fault, block), reference_ref=None, check_config=correct)
                for fault, block in ((0, 32), (1, 64), (0, 128))]
    workload = Workload(requests[0], "cpu")
    assert [measure_wall(r, workload).status for r in requests] == ["ok", "wrong_result", "ok"]
    assert len(workload._expected) == 2  # one output per input set, not one per config
