"""Started by ``aot_tune record`` in the recorded command's Python processes (this folder is put
first on PYTHONPATH): once Triton's autotuner module is imported, every autotuned launch is
recorded (aot_tune.record.capture). Importing nothing until then keeps processes that never use
Triton as they were. Any other ``sitecustomize`` on the path still runs after this one.
"""
import importlib
import importlib.machinery
import os
import sys

_WATCHED = "triton.runtime.autotuner"


class _AutotunerImported:
    """A meta path entry that lets Triton's autotuner module load as usual, then starts recording."""

    def find_spec(self, name, path=None, target=None):
        if name != _WATCHED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            from aot_tune.record.capture import install_from_environment

            install_from_environment()

        spec.loader.exec_module = exec_module
        return spec


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path, saved_module = list(sys.path), sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved_path
        if saved_module is not None:
            sys.modules["sitecustomize"] = saved_module


if _WATCHED in sys.modules:  # imported already (cannot happen at start-up, but be exact)
    from aot_tune.record.capture import install_from_environment

    install_from_environment()
else:
    sys.meta_path.insert(0, _AutotunerImported())
_chain_next_sitecustomize()
