"""Time two configs of fla's l2norm kernels on the same shape in one process, interleaved, so
that the picks of two tuners are compared on the same GPU state rather than across processes.

    python tools/studies/fla_tables/compare_picks.py PAIRS_JSON   (the project folder on PYTHONPATH)

PAIRS_JSON: a list of {T, D, dtype, a, b} (a, b: configs). For each, ROUNDS rounds alternate a
and b, each a triton.testing.do_bench median; prints one JSON list of {ms_a, ms_b} (the median
over rounds).
"""
from __future__ import annotations

import json
import statistics
import sys

ROUNDS = 5


def main() -> None:
    import torch
    import triton
    from fla_tuning import launch_blocked, launch_row

    out = []
    for pair in json.loads(sys.argv[1]):
        x = torch.randn(pair["T"], pair["D"], dtype=getattr(torch, pair["dtype"]), device="cuda")
        launch = launch_blocked if pair["D"] <= 512 else launch_row
        times = {"a": [], "b": []}
        for _ in range(ROUNDS):
            for side in ("a", "b"):
                config = pair[side]
                times[side].append(triton.testing.do_bench(lambda: launch(x, config=config), warmup=10, rep=50))
        out.append({"ms_a": statistics.median(times["a"]), "ms_b": statistics.median(times["b"])})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
