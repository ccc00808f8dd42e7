"""Our side alone of ``tools.bench.compare_triton_autotune``: a cold ``doit tune`` of the same
seeded sample of the paper's GEMM space and shapes, for its end-to-end line against the floor
(the comparison with Triton's autotuner takes minutes more per seed).

    python -m tools.bench.full_space --seed 11
    python -m tools.bench.full_space --seed 23 --configs 60 --shapes 8
"""
from __future__ import annotations

import argparse

from tools.bench import cold_tune
from tools.bench.compare_triton_autotune import manifest_text, sample_configs, sample_shapes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cold_tune.add_arguments(parser)
    parser.add_argument("--seed", type=int, default=0, help="seed of both samples, as the compare tool's [0]")
    parser.add_argument("--configs", type=int, default=60, help="configs sampled from the paper's 576 [60]")
    parser.add_argument("--shapes", type=int, default=8, help="shapes of the paper's 64, 4096^3 included [8]")
    args = parser.parse_args()
    text = manifest_text(sample_configs(args.configs, args.seed, None),
                         sample_shapes(args.shapes, args.seed, (256, 512, 1024, 4096)), args.target)
    if args.print_manifest:
        print(text, end="")
        return 0
    return cold_tune.run(text, f"full-space-{args.seed}", args)


if __name__ == "__main__":
    raise SystemExit(main())
