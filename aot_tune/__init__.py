"""aot_tune: ahead-of-time tuning of Triton kernels as incremental doit tasks.

The tuner (``doit tune``) writes ``generated/<kernel>.py`` tables; kernels read them at run time
through ``aot_tune.autotune`` (a drop-in for ``@triton.autotune``) or ``aot_tune.runtime.lookup``.
Importing this package imports neither torch nor triton.
"""
__version__ = "0.1.0"

from aot_tune.runtime.decorator import autotune  # noqa: E402  (after __version__: codegen reads it from here)

__all__ = ["autotune", "__version__"]
