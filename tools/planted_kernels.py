"""A copy kernel with planted faults, to show that the bench engine isolates and rejects them.

``FAULT`` is a config parameter like any other, so each fault is one config of a normal
manifest entry or bench request:

* 0: correct (y = 2x)
* 1: wrong result (y = 2x + 1)
* 2: NaN in the output
* 3: a store far outside any allocation (an illegal memory access on a GPU; a segfault of the
  process under the interpreter)
* 4: a hang (a loop that never ends in practice)

Used by tools/bench_overhead.py and tests/test_bench.py; not shipped with the package.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

OK, WRONG, NAN, ILLEGAL_ADDRESS, HANG = range(5)


@triton.jit
def planted_kernel(x_ptr, y_ptr, n, spin, BLOCK: tl.constexpr, FAULT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(x_ptr + offs, mask=mask) * 2
    if FAULT == 1:
        y = y + 1
    if FAULT == 2:
        y = y * float("nan")
    if FAULT == 3:
        far = tl.full([BLOCK], 1 << 20, tl.int64)
        offs = offs + far * far  # 2**40 elements past y: no allocation is there
    if FAULT == 4:
        i = 0
        while i < spin:  # spin is 2**62 for this fault: never ends
            i += 1
        y = y + (i - spin)
    tl.store(y_ptr + offs, y, mask=mask)


def make_inputs(shape: dict[str, int], dtype: torch.dtype, device) -> tuple[torch.Tensor]:
    return (torch.randn(shape["n"], dtype=dtype, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def launch(x: torch.Tensor, config: dict) -> torch.Tensor:
    y = torch.empty_like(x)
    spin = 2**62 if config["FAULT"] == HANG else 1
    planted_kernel[(triton.cdiv(x.numel(), config["BLOCK"]),)](x, y, x.numel(), spin, **config)
    return y
