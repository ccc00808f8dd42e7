"""The checked-in generated/ modules, as the repository's kernels use them at run time: every
tuned key of the interpreter tables launches its table config and matches the reference, and
each module imports in a few milliseconds without torch or triton."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from aot_tune.bench.engine.check import check_result
from aot_tune.dtypes import TOLERANCE
from aot_tune.runtime.decorator import TunedKernel
from aot_tune.runtime.devices import INTERPRETER
from aot_tune.build.loading import resolve
from aot_tune.manifest import load_manifest
from aot_tune.runtime import TuningWarning

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = load_manifest(ROOT / "tuning.yaml")


def module_name(spec) -> str:
    return spec.generated.removesuffix(".py").replace("/", ".")


def tuned_entries():
    for spec in MANIFEST.kernels:
        module = importlib.import_module(module_name(spec))
        for key, config in module.TABLES.get(INTERPRETER, {}).items():
            yield pytest.param(spec, key, config, id=f"{spec.name}-{'x'.join(map(str, key[:-1]))}-{key[-1]}")


class LaunchRecorder:
    """Records the meta-parameters of every launch of one kernel, decorated or plain."""

    def __init__(self, kernel, monkeypatch) -> None:
        self.launches: list[dict] = []
        self.inner = kernel.fn if isinstance(kernel, TunedKernel) else kernel
        original = self.inner.run

        def run(*args, grid, warmup, **kwargs):
            self.launches.append(dict(kwargs))
            return original(*args, grid=grid, warmup=warmup, **kwargs)

        monkeypatch.setattr(self.inner, "run", run, raising=False)


def test_the_manifest_has_interpreter_tables_for_every_kernel_the_interpreter_computes() -> None:
    """fp8_gemm's only dtype is fp8, which the interpreter compiles but cannot compute: its tables
    come from GPUs; every other kernel has at least two interpreter entries, none of them bf16."""
    entries = list(tuned_entries())
    computed = [spec for spec in MANIFEST.kernels if spec.dtypes_for(INTERPRETER)]
    assert [spec.name for spec in MANIFEST.kernels if spec not in computed] == ["fp8_gemm"]
    assert len(entries) >= 2 * len(computed)
    assert not [e for e in entries if e.values[1][-1] == "bfloat16"]


@pytest.mark.parametrize("spec,key,config", list(tuned_entries()))
def test_every_tuned_key_launches_its_table_config_correctly(spec, key, config, monkeypatch) -> None:
    *sizes, dtype = key
    launch = resolve(str(ROOT), spec.launch)
    recorder = LaunchRecorder(resolve(str(ROOT), spec.kernel), monkeypatch)
    torch.manual_seed(0)
    inputs = resolve(str(ROOT), spec.inputs)(spec.shape_dict(sizes), getattr(torch, dtype), "cpu")
    expected = resolve(str(ROOT), spec.reference)(*inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TuningWarning)  # a tuned key is an exact hit: no fallback
        output = launch(*inputs)
    ok, error, message = check_result(output, expected, TOLERANCE[dtype])
    assert ok, message
    assert len(recorder.launches) == 1
    assert {k: recorder.launches[0].get(k) for k in config} == config


_IMPORT_PROBE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
start = time.perf_counter()
import {module}
elapsed = time.perf_counter() - start
print(json.dumps({{"ms": elapsed * 1e3, "heavy": sorted(m for m in ("torch", "triton") if m in sys.modules)}}))
"""


@pytest.mark.parametrize("spec", MANIFEST.kernels, ids=lambda s: s.name)
def test_a_generated_module_imports_fast_without_torch_or_triton(spec) -> None:
    """A fresh interpreter per import; the best of three, since this machine is shared."""
    results = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE.format(module=module_name(spec)), str(ROOT)],
                             capture_output=True, text=True, timeout=60, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert all(r["heavy"] == [] for r in results)
    assert min(r["ms"] for r in results) < 5.0
