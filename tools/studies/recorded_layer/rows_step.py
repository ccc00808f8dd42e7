"""fla-core's row kernels as a model's blocks run them: RMSNorm, LayerNorm and the SwiGLU gate,
forward and backward, over rows T x hidden D of an inference and a training batch, in bf16 and
fp16. It is the row-kernel workload ``aot_tune record`` records (the library's own autotuned
kernels, keyed on D and the row blocks), in the same form as ``delta_rule_step.py``.

    python rows_step.py [--tables generated] [--T 4096 16384] [--D 2048 4096 8192]

Prints one JSON line: the first pass's seconds and the autotuner benchmarks it ran, then the
median of ``--steps`` passes. It needs a GPU: fla's layer norm does not run under the interpreter.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from counted import benchmarks


def make_inputs(T: int, D: int, dtype: torch.dtype, device: str) -> dict:
    torch.manual_seed(0)
    grad = dict(dtype=dtype, device=device, requires_grad=True)
    return {"x": torch.randn(T, D, **grad), "weight": torch.ones(D, **grad), "bias": torch.zeros(D, **grad),
            "gate": torch.randn(T, D, **grad), "up": torch.randn(T, D, **grad)}


def block(inputs: dict) -> None:
    """What one block's row kernels run: both norms and the gate, each forward and backward."""
    from fla.modules.activations import swiglu
    from fla.modules.norm.layernorm import layer_norm, rms_norm

    x, weight, bias = inputs["x"], inputs["weight"], inputs["bias"]
    out = rms_norm(x, weight, bias).float().square().mean() + layer_norm(x, weight, bias).float().mean()
    out = out + swiglu(inputs["gate"], inputs["up"]).float().mean()
    out.backward()


def timed(all_inputs: list[dict], device: str) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for inputs in all_inputs:
        block(inputs)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--T", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--D", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("rows_step.py: needs a GPU (fla's layer norm kernels do not run under the interpreter)")
    device = "cuda"
    installed = None
    if args.tables:
        import aot_tune

        installed = aot_tune.use_tables(args.tables, verbose=True)
    all_inputs = [make_inputs(T, D, getattr(torch, dtype), device)
                  for T in args.T for D in args.D for dtype in args.dtypes]
    first = timed(all_inputs, device)
    first_benchmarks = len(benchmarks)
    steady = [timed(all_inputs, device) for _ in range(args.steps)]
    print(json.dumps({"device": torch.cuda.get_device_name(), "first_pass_s": first,
                      "first_pass_benchmarks": first_benchmarks,
                      "tables_keys": installed.keys if installed else None,
                      "steady_pass_ms": 1e3 * statistics.median(steady),
                      "benchmarks_after_first": len(benchmarks) - first_benchmarks}))


if __name__ == "__main__":
    main()
