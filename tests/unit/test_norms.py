"""The check's one-pass comparison kernel (aot_tune.bench.engine.norms), run here under the
Triton interpreter, against the float64 torch ops it replaces on a GPU."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from aot_tune.bench.engine import norms  # noqa: E402
from aot_tune.bench.engine.check import Comparison  # noqa: E402


def torch_norms(output, expected) -> list[float]:
    out, ref = output.double(), expected.double()
    return [float(torch.isfinite(out).all()), float(torch.linalg.vector_norm(out - ref)),
            float(torch.linalg.vector_norm(ref))]


@pytest.mark.parametrize("out_dtype, ref_dtype", [
    ("float16", "float16"), ("bfloat16", "float32"), ("float32", "float32"), ("float64", "float64"),
    ("int32", "int32"), ("int8", "float32"),
])
def test_the_kernel_sums_what_torch_sums(out_dtype, ref_dtype):
    torch.manual_seed(1)
    size = 3 * norms.BLOCK + 17  # a partial last block
    exact = torch.randn(size, dtype=torch.float64) * 20
    output = exact.to(getattr(torch, out_dtype))
    expected = (exact + torch.randn(size, dtype=torch.float64) * 0.05).to(getattr(torch, ref_dtype))
    got = norms.norms(output, expected).tolist()
    want = torch_norms(output, expected)
    assert got[0] == want[0] == 1.0
    assert got[1] == pytest.approx(want[1], rel=1e-12)
    assert got[2] == pytest.approx(want[2], rel=1e-12)


def test_a_non_contiguous_output_is_read_as_its_values():
    output = torch.randn(64, 96, dtype=torch.float32).t()
    expected = output.contiguous() + 1
    assert norms.norms(output, expected).tolist() == pytest.approx(torch_norms(output, expected), rel=1e-12)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_or_inf_in_the_output_is_not_finite(bad):
    output = torch.randn(5000, dtype=torch.float16)
    expected = output.float()
    output[4097] = bad
    assert norms.norms(output, expected)[0].item() == 0.0
    ok, error, message = Comparison(output, expected).verdict(1e-2)
    assert not ok and message == "output has NaN or Inf"


def test_what_the_kernel_does_not_read_is_left_to_torch():
    flags = torch.ones(10, dtype=torch.bool)
    assert not norms.supported(flags, flags)
    assert not norms.supported(torch.ones(0), torch.ones(0))
    assert norms.supported(torch.ones(3, dtype=torch.bfloat16), torch.ones(3))
    ok, _, _ = Comparison(flags, flags.clone()).verdict(1e-2)
    assert ok


PRECOMPILE = r'''
import json, sys
from pathlib import Path
from aot_tune.bench.engine import norms
from aot_tune import triton_compat

def cubins():
    return sorted(str(p.relative_to(sys.argv[1])) for p in Path(sys.argv[1]).rglob("partial_norms.cubin"))

if sys.argv[2] == "precompile":
    compiled = norms.precompile(90)
    print(json.dumps({"compiled": compiled, "torch": "torch" in sys.modules, "cubins": cubins()}))
else:  # the device worker's warm, as a cross-compile: meta tensors through the real launch path
    import torch
    with triton_compat.target_driver(90), triton_compat.compile_instead_of_launch(norms._compiled()) as found:
        for name in norms.WARM_DTYPES:
            x = torch.ones(norms.BLOCK, dtype=getattr(torch, name), device="meta")
            norms.norms(x, x)
    print(json.dumps({"compiled": len(found), "cubins": cubins()}))
'''


def test_a_compile_worker_precompiles_what_the_device_workers_warm_looks_up(tmp_path):
    """``precompile`` (no torch, no GPU) puts in the Triton cache the kernels ``warm`` launches:
    the same launches from torch tensors afterwards find every one of them and compile nothing."""
    import json
    import subprocess
    import sys

    from tunerun import subprocess_env

    env = {**subprocess_env(), "TRITON_CACHE_DIR": str(tmp_path)}

    def run(step: str) -> dict:
        proc = subprocess.run([sys.executable, "-c", PRECOMPILE, str(tmp_path), step], capture_output=True,
                              text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first = run("precompile")
    assert first["compiled"] == len(norms.WARM_DTYPES) and not first["torch"]
    assert len(first["cubins"]) == len(norms.WARM_DTYPES)
    warmed = run("warm")
    assert warmed["compiled"] == len(norms.WARM_DTYPES) and warmed["cubins"] == first["cubins"]
