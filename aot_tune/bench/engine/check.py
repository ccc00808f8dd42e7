"""Correctness of one config's output: compared with the kernel's reference on the device (its torch
reference, or without one the default config's output, aot_tune.bench.engine.workload).

Every config runs once on random inputs and is compared with the kernel's torch reference under a
dtype-aware relative tolerance (aot_tune.dtypes.TOLERANCE, or the manifest's); NaN, Inf or a
wrong shape never pass. Consecutive configs are checked on different input sets, so a config
that writes nothing cannot pass on the output its predecessor left in a reused buffer.
"""
from __future__ import annotations

import math
from typing import Any

#: Input sets the correctness checks rotate through (consecutive configs never share one).
CHECK_SETS = 2


class DeviceValues:
    """A small tensor to read later. On a GPU it is copied to pinned host memory right behind
    the work that computes it, and read once that copy is done: waiting for the copy's event
    does not wait for work queued after it, as ``.item()`` or ``.tolist()`` would (their copy
    queues behind all of it). On the CPU it is read as it is."""

    def __init__(self, values: Any) -> None:
        import torch

        self._copied = None
        if not values.is_cuda:
            self._host = values
            return
        self._host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
        self._host.copy_(values, non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record()

    def read(self) -> Any:
        if self._copied is not None:
            self._copied.synchronize()
        return self._host.tolist()


class Comparison:
    """An output against its reference, computed on the device in float64 and read later, so
    the check needs no synchronization of its own. NaN, Inf or a wrong shape never pass. On a
    GPU one Triton kernel reads each tensor once (aot_tune.bench.engine.norms); elsewhere, and
    for dtypes it does not read, torch's ops compute the same sums."""

    def __init__(self, output: Any, expected: Any) -> None:
        self._values = None
        self._shape_error = ""
        outputs, references = _several(output), _several(expected)
        if len(outputs) != len(references):
            self._shape_error = f"{len(outputs)} outputs != {len(references)} of the reference"
            return
        for out, ref in zip(outputs, references):
            if tuple(out.shape) != tuple(ref.shape):
                self._shape_error = f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
                return
        norms = [_norms(out, ref) for out, ref in zip(outputs, references)]
        self._values = DeviceValues(norms[0] if len(norms) == 1 else _combined(norms))

    def verdict(self, tolerance: float) -> tuple[bool, float, str]:
        """(passed, relative error, why not); waits for the comparison if it has not run yet."""
        if self._values is None:
            return False, math.inf, self._shape_error
        finite, diff, norm = self._values.read()
        if not finite:
            return False, math.inf, "output has NaN or Inf"
        error = diff / max(norm, 1e-30)
        if error > tolerance:
            return False, error, f"relative error {error:.3g} exceeds {tolerance:g}"
        return True, error, ""


def _several(output: Any) -> tuple:
    """A launch's outputs: one tensor, or a tuple (or list) of them (a kernel writing several)."""
    return tuple(output) if isinstance(output, (tuple, list)) else (output,)


def _combined(norms: list) -> Any:
    """Several outputs' [finite, diff, norm] as one: all finite, and the norms over all of them."""
    import torch

    stacked = torch.stack([n.to(norms[0].device) for n in norms])
    return torch.stack([stacked[:, 0].min(), stacked[:, 1].square().sum().sqrt(), stacked[:, 2].square().sum().sqrt()])


def _norms(output: Any, expected: Any) -> Any:
    """[all finite, ||output - expected||, ||expected||] in float64, on the tensors' device."""
    import torch

    if output.is_cuda:
        from aot_tune.bench.engine import norms

        if norms.supported(output, expected):
            return norms.norms(output, expected)
    out, ref = output.double(), expected.double()
    return torch.stack([torch.isfinite(out).all().double(), torch.linalg.vector_norm(out - ref),
                        torch.linalg.vector_norm(ref)])


def check_result(output: Any, expected: Any, tolerance: float) -> tuple[bool, float, str]:
    """Relative error in float64, read at once; NaN or a wrong shape never passes."""
    return Comparison(output, expected).verdict(tolerance)
