"""Triton kernels tuned ahead of time by aot_tune (one module per kernel)."""
