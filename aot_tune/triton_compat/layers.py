"""Triton's kernel decorators as layers: what ``@triton.autotune`` and ``@triton.heuristics`` wrap,
so ``aot_tune.untuned`` can take a library's autotuner out of a kernel and keep its heuristics.

What this relies on (triton 3.9), and why:

* ``triton.runtime.Autotuner`` keeps the object it decorates in ``.fn`` and its candidates in
  ``.configs`` (``triton.Config`` objects; a config's own ``pre_hook`` runs before a launch of it);
* ``triton.runtime.Heuristics`` keeps ``.fn``, ``.arg_names`` and ``.values`` (meta-parameter ->
  function of the arguments), and ``Heuristics(fn, arg_names, values)`` is how
  ``triton.heuristics`` builds one: the same layer over another object is built the same way.
"""
from __future__ import annotations

from typing import Any

AUTOTUNER = "autotuner"
HEURISTICS = "heuristics"


def layer_kind(kernel: Any) -> str | None:
    """``AUTOTUNER`` or ``HEURISTICS`` for Triton's decorator objects, else None."""
    from triton.runtime import Autotuner, Heuristics

    if isinstance(kernel, Autotuner):
        return AUTOTUNER
    if isinstance(kernel, Heuristics):
        return HEURISTICS
    return None


def autotuner_configs(tuner: Any) -> list:
    """The candidates of a ``triton.runtime.Autotuner``."""
    return list(tuner.configs)


def heuristics_over(layer: Any, fn: Any) -> Any:
    """A ``@triton.heuristics`` layer computing what ``layer`` computes, over ``fn`` instead."""
    from triton.runtime import Heuristics

    return Heuristics(fn, layer.arg_names, layer.values)
