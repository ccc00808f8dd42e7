"""Run fla's own l2norm forward as an application would, with no aot_tune import, and time it.

    python tools/studies/fla_tables/launch_fla.py SHAPES_JSON

SHAPES_JSON is a list of [T, D, dtype]. For each shape, in order, in this fresh process: the
seconds of the first call (whatever fla does on it: read its config file, or autotune), the
config fla then runs, and the call's time by triton.testing.do_bench (with its L2 flush). fla
reads its config files when the environment says so (FLA_CACHE_MODE, FLA_CONFIG_DIR): the caller
sets it. Prints one JSON object.
"""
from __future__ import annotations

import json
import sys
import time


def main() -> None:
    shapes = json.loads(sys.argv[1])
    started = time.perf_counter()
    import torch
    import triton
    from fla.modules.norm.l2norm import l2norm_fwd, l2norm_fwd_kernel, l2norm_fwd_kernel_row

    imported = time.perf_counter() - started
    rows = []
    for T, D, dtype in shapes:
        x = torch.randn(T, D, dtype=getattr(torch, dtype), device="cuda")
        kernel = l2norm_fwd_kernel if D <= 512 else l2norm_fwd_kernel_row
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y, _ = l2norm_fwd(x)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        reference = (x.float() * torch.rsqrt(x.float().pow(2).sum(-1, keepdim=True) + 1e-6)).to(x.dtype)
        error = float((y.float() - reference.float()).norm() / reference.float().norm())
        used = kernel.best_config  # the config the autotuner ran last: this call's
        ms = triton.testing.do_bench(lambda: l2norm_fwd(x), warmup=25, rep=100)
        rows.append({"T": T, "D": D, "dtype": dtype, "kernel": kernel.fn.__name__, "first_s": round(first_s, 4),
                     "config": {**used.kwargs, "num_warps": used.num_warps, "num_stages": used.num_stages},
                     "ms": ms, "error": error})
    print(json.dumps({"import_s": round(imported, 3), "aot_tune_imported": "aot_tune" in sys.modules,
                      "rows": rows}))


if __name__ == "__main__":
    main()
