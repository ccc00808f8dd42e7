"""A run whose slowest compiles are stragglers that cannot win: its benches finish without them,
and the run does not wait for them (aot_tune.pipeline.stragglers)."""
from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

from tunerun import executed, make_project, tune

#: A kernel whose compile grows with A * B (the loop is unrolled) and whose launch, as the bench
#: times it, takes A * B * 0.2 ms: the configs with both at 64 compile for minutes, and a fit of
#: the others predicts them about 25 times slower than the best.
SPIN = '''\
import time

import torch
import triton
import triton.language as tl


@triton.jit
def spin_kernel(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr, A: tl.constexpr, B: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    acc = x
    for _ in tl.static_range(A * B):
        acc = acc * 1.0001 + x
    tl.store(y_ptr + offs, x, mask=mask)
    tl.store(z_ptr + offs, acc, mask=mask)


def make_inputs(shape, dtype, device):
    x = torch.randn(shape["n"], dtype=dtype, device=device)
    return x, torch.empty_like(x), torch.empty_like(x)


def launch(x, y, z, config):
    if x.device.type != "meta":
        time.sleep(config["A"] * config["B"] * 2e-4)
    spin_kernel[(triton.cdiv(x.numel(), config["BLOCK"]),)](x, y, z, x.numel(), **config)
    return y


def reference(x, y, z):
    return x.clone()
'''

MANIFEST = """\
version: 1
defaults:
  targets: [sm90]
  bench: {warmup_ms: 1, rep_ms: 1}
kernels:
  spin:
    kernel: kernels.spin:spin_kernel
    launch: kernels.spin:launch
    inputs: kernels.spin:make_inputs
    reference: kernels.spin:reference
    key: [n]
    space:
      BLOCK: [64, 128]
      A: [1, 64]
      B: [1, 64]
      num_warps: [4]
    compile_cost: "200 - A - B"   # the stragglers last: their peers set the pace
    shapes:
      - {n: 256}
    dtypes: [float32]
"""


def test_a_run_does_not_wait_for_the_straggler_compiles_its_benches_gave_up(tmp_path):
    """The two configs with A = B = 64 compile far longer than the others and are predicted to
    lose: the bench gives them up and finishes, and their compiles are given up at once (within
    a second or so), not at the 20 s deadline, so the run ends long before either compile would.
    They stay recorded: the next run has nothing to do."""
    project = make_project(tmp_path / "project", MANIFEST)
    (project / "kernels" / "spin.py").write_text(SPIN)
    began = time.monotonic()
    proc = tune(project)
    wall = time.monotonic() - began
    assert "bench: 8 config measurements, 6 ok, failed: invalid 2 (2 of the invalid ones not waited for" in proc.stderr
    assert "compile: 8 compiled, 6 valid, 2 invalid (timeout 2)" in proc.stderr, proc.stderr
    records = [r for r in map(_compile_record, (project / ".aot_tune").rglob("*.json")) if r]
    assert len(records) == 8
    given_up = [r for r in records if r["status"] == "timeout"]
    assert sorted((r["config"]["A"], r["config"]["B"]) for r in given_up) == [(64, 64), (64, 64)]
    for record in given_up:
        message = record["message"]
        assert message.startswith("given up after ") and "judged it a straggler that cannot win" in message, message
        assert record["seconds"] < 15
    assert wall < 120
    again = tune(project)  # the given-up compiles stay recorded: nothing is compiled or measured again
    assert executed(again) == [], again.stdout


def _compile_record(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return None
    return data if isinstance(data, dict) and {"fingerprint", "config", "status"} <= data.keys() else None
