"""The bench engine a device worker runs: check one config against the reference, then time it.

* ``workload``: the inputs, reference outputs and input-set rotation (cold L2) of one
  (kernel, shape, dtype);
* ``check``: correctness, an output against its reference under a dtype-aware tolerance;
* ``timing``: how one checked config is timed (CUDA events, or CUDA-graph replays);
* ``pipeline``: the pipelined pass over a shape's configs that keeps the GPU busy, and the
  interpreter's wall-clock path.
"""
