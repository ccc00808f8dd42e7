"""Resolve the manifest's ``module:attr`` references inside worker processes (and, for a project's
own exporter, in the tuning process), counting the seconds their first imports took."""
from __future__ import annotations

import importlib
import sys
import time
from typing import Any, NamedTuple, Sequence

from aot_tune.errors import TuneError, shorten

#: Seconds this process spent importing the modules ``resolve`` was the first to ask for.
IMPORTED = {"seconds": 0.0}


def resolve(root: str, ref: str) -> Any:
    """Import ``module.path:attr`` with the manifest's folder first on ``sys.path``. An object
    that reads files beside the manifest (the recorded entries' launcher, aot_tune.record.replay)
    has ``bind_manifest_root``, and is given the folder."""
    if root not in sys.path:
        sys.path.insert(0, root)
    module_name, _, attr = ref.partition(":")
    start = time.perf_counter()
    first = module_name not in sys.modules
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TuneError(f"cannot import '{shorten(module_name)}' (from the manifest's '{shorten(ref)}'): "
                        f"{shorten(str(exc))}; "
                        f"fix: check the module path, relative to {root}") from exc
    finally:
        if first:
            IMPORTED["seconds"] += time.perf_counter() - start
    try:
        value = getattr(module, attr)
    except AttributeError as exc:
        raise TuneError(f"module '{shorten(module_name)}' has no attribute '{shorten(attr)}' (from the "
                        f"manifest's '{shorten(ref)}'); "
                        f"fix: name a function defined in {module.__file__}") from exc
    bind = getattr(value, "bind_manifest_root", None)
    return bind(root) if callable(bind) else value


def import_ahead(imports: Sequence[tuple[str, str]]) -> None:
    """Import a manifest's ``module:attr`` references (``(folder, ref)`` pairs) while a worker
    starts, before its first task: a library's import (fla's is 3-7 s a process) then overlaps
    other work instead of holding up that task. A failure is not reported here: the task that
    needs the import raises it again, as its result."""
    for root, ref in imports:
        try:
            resolve(root, ref)
        except Exception:  # noqa: BLE001 - reported by the task that needs it
            pass


class Loaded(NamedTuple):
    """A kernel as the compile and specialize steps use it."""

    kernel: Any
    launch: Any
    make_inputs: Any
    #: Provided by its launcher, rebuilt from its recorded source: its input builder takes the
    #: dtype's name and builds stand-ins on "meta", and nothing of the compile imports torch.
    provided: bool


def load_kernel_module_attrs(root: str, kernel_ref: str, launch_ref: str, inputs_ref: str) -> Loaded:
    """The kernel, its launch function and its input builder. The launcher first: one bound to the
    manifest's folder may provide the kernel without importing its module (a recorded kernel
    rebuilt from its recorded source: aot_tune.record.replay), and the kernel is imported only
    where it does not."""
    launch, make_inputs = resolve(root, launch_ref), resolve(root, inputs_ref)
    provided = getattr(launch, "provided_kernel", None)
    kernel = provided(kernel_ref) if callable(provided) else None
    if kernel is not None:
        return Loaded(kernel, launch, make_inputs, True)
    return Loaded(resolve(root, kernel_ref), launch, make_inputs, False)


def autotuned_launch(kernel: str, kernel_ref: str, launch_ref: str) -> TuneError:
    """What a launch reaching the kernel's own ``@triton.autotune`` while tuning raises: it would
    run the autotuner's pick (or benchmark) under the candidate's name."""
    return TuneError(f"{kernel}: the launch function {launch_ref} launched {kernel_ref} through its "
                     f"@triton.autotune, which runs a config of its own choosing instead of the candidate; "
                     f"fix: launch aot_tune.untuned(kernel)[grid](..., **config) there "
                     f"(docs/adopting.md#a-kernel-you-cannot-edit-an-installed-package)")


#: A manifest's dtype combinations as requests carry them: ((name, ((argument, dtype), ...)), ...).
Combos = tuple[tuple[str, tuple[tuple[str, str], ...]], ...]


def input_dtype(dtype: str, combos: Combos) -> Any:
    """What an input builder gets as ``dtype``: the torch dtype, or for a combination a dict of
    launch argument -> torch dtype (e.g. ``{"a": torch.float8_e4m3fn, ..., "out": torch.bfloat16}``)."""
    import torch

    args = dict(combos).get(dtype)
    return {arg: getattr(torch, name) for arg, name in args} if args else getattr(torch, dtype)
