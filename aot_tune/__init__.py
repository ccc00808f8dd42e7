"""aot_tune: ahead-of-time tuning of Triton kernels as incremental doit tasks.

The tuner (``doit tune``) writes ``generated/<kernel>.py`` tables; kernels read them at run time
through ``aot_tune.autotune`` (a drop-in for ``@triton.autotune``) or ``aot_tune.runtime.lookup``;
``aot_tune.untuned(kernel)`` launches one config of a library's ``@triton.autotune`` kernel, and
``aot_tune.use_tables(folder)`` gives a library's own autotuners the tables of a recorded workload.
Importing this package imports neither torch nor triton.
"""
__version__ = "0.1.0"


def _use_checkout_rules() -> None:
    """A checkout keeps the doit rules at top level (rules/), which an install maps to
    ``aot_tune.rules``; run from a checkout on PYTHONPATH alone (an offline GPU box, a second
    worktree), the checkout's own rules/ is that package."""
    import sys
    from importlib.util import module_from_spec, spec_from_file_location
    from pathlib import Path

    here = Path(__file__).resolve().parent
    rules = here.parent / "rules" / "__init__.py"
    if (here / "rules").is_dir() or not rules.is_file() or "aot_tune.rules" in sys.modules:
        return
    spec = spec_from_file_location("aot_tune.rules", rules, submodule_search_locations=[str(rules.parent)])
    module = module_from_spec(spec)
    sys.modules["aot_tune.rules"] = module
    spec.loader.exec_module(module)


_use_checkout_rules()

from aot_tune.runtime.decorator import autotune  # noqa: E402  (after __version__: codegen reads it from here)
from aot_tune.runtime.autotuners import use_tables  # noqa: E402
from aot_tune.runtime.untuned import untuned  # noqa: E402

__all__ = ["autotune", "untuned", "use_tables", "__version__"]
