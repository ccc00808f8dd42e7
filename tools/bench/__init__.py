"""Benchmarks of aot_tune's own cost and speed (compile, bench, start-up, run time, scaling),
and the comparison with Triton's autotuner; their numbers feed BENCHMARKS.md."""
