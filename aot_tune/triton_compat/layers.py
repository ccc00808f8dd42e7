"""Triton's kernel decorators as layers: what ``@triton.autotune`` and ``@triton.heuristics`` wrap,
so ``aot_tune.untuned`` can take a library's autotuner out of a kernel and keep its heuristics.

What this relies on (triton 3.9), and why:

* ``triton.runtime.Autotuner`` keeps the object it decorates in ``.fn`` and its candidates in
  ``.configs`` (``triton.Config`` objects; a config's own ``pre_hook`` runs before a launch of it);
* ``triton.runtime.Heuristics`` keeps ``.fn``, ``.arg_names`` and ``.values`` (meta-parameter ->
  function of the arguments), and ``Heuristics(fn, arg_names, values)`` is how
  ``triton.heuristics`` builds one: the same layer over another object is built the same way;
* a launch ``kernel[grid](...)`` calls ``kernel.run`` (``KernelInterface.__getitem__``), and a
  heuristics layer calls ``self.fn.run``: an instance attribute ``run`` on an autotuner takes
  every launch of it.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

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


@contextlib.contextmanager
def autotuners_refused(kernel: Any, error: Exception) -> Iterator[None]:
    """While active, a launch reaching an autotuner of ``kernel`` raises ``error`` instead: during
    tuning it would run the autotuner's own pick (or its benchmark) under a candidate's name."""
    from triton.runtime import Autotuner

    tuners, layer = [], kernel
    for _ in range(32):
        if isinstance(layer, Autotuner):
            tuners.append(layer)
        layer = getattr(layer, "fn", None)
        if layer is None:
            break

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise error

    for tuner in tuners:
        tuner.run = refuse
    try:
        yield
    finally:
        for tuner in tuners:
            del tuner.run
