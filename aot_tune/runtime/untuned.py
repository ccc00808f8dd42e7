"""``aot_tune.untuned``: the kernel beneath a library's ``@triton.autotune``, launched with one config.

A kernel from a package you cannot edit is decorated with ``@triton.autotune``, which benchmarks
its own candidates and refuses a config passed by the caller. Tuning it ahead of time, and
launching its tuned config afterwards, needs the object the autotuner wraps:
``untuned(kernel)[grid](*args, **config)``, ``config`` holding the meta-parameters and launch
options (``num_warps``, ``num_stages``, ...). Every ``@triton.autotune`` and ``aot_tune.autotune``
layer is taken out; every ``@triton.heuristics`` layer is kept (rebuilt over what is beneath it
where it sat above an autotuner), so its values are computed as in the library's own launch; a
plain ``@triton.jit`` kernel (or heuristics alone) is returned as is.

A launch through it does what the library's launch does once its autotuner has chosen: the
chosen config's own ``pre_hook`` runs (the config is recognised by its values). What the
autotuner does only around its benchmark runs (``reset_to_zero``, ``restore_value``, its
``pre_hook``/``post_hook`` arguments, ``prune_configs_by``) does not run, as it does not on
the library's launch of a key it has tuned already.

Imports neither torch nor triton until called; Triton's own classes are read through
``aot_tune.triton_compat``.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Mapping, Sequence

from aot_tune.errors import TuneError
from aot_tune.runtime.decorator import TunedKernel

_MAX_LAYERS = 32
_memo: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def untuned(kernel: Any) -> Any:
    """The launchable object beneath ``kernel``'s autotuner(s), for ``untuned(kernel)[grid](*args, **config)``.

    Memoized per kernel, so calling it at every launch costs a dict lookup.
    """
    try:
        return _memo[kernel]
    except (KeyError, TypeError):
        pass
    result = _strip(kernel)
    if result is not kernel:  # (a value holding its key would keep it alive)
        try:
            _memo[kernel] = result
        except TypeError:  # not weakly referable: rebuilt on each call, which is only slower
            pass
    return result


def _strip(kernel: Any) -> Any:
    from aot_tune import triton_compat

    layers: list[tuple[str, Any]] = []
    inner = kernel
    while len(layers) < _MAX_LAYERS:
        kind = "tuned" if isinstance(inner, TunedKernel) else triton_compat.layer_kind(inner)
        if kind is None:
            break
        layers.append((kind, inner))
        inner = inner.fn
    if not callable(getattr(inner, "run", None)) or not hasattr(inner, "__getitem__"):
        raise TuneError(f"aot_tune.untuned: {kernel!r} is not a Triton kernel (found {type(inner).__name__} "
                        f"beneath its decorators); fix: pass the @triton.jit or @triton.autotune object the "
                        f"library launches as KERNEL[grid](...)")
    result, changed = inner, False
    for kind, layer in reversed(layers):  # innermost first: rebuild only what sits above a removed layer
        if kind == triton_compat.HEURISTICS:
            result = triton_compat.heuristics_over(layer, result) if changed else layer
            continue
        configs = layer.configs if kind == "tuned" else triton_compat.autotuner_configs(layer)
        hooked = [c for c in configs if not isinstance(c, Mapping) and getattr(c, "pre_hook", None) is not None]
        if hooked:
            result = ConfigPreHooks(result, configs)
        changed = True
    return result


class ConfigPreHooks:
    """Launches ``fn`` after the ``pre_hook`` of the autotuner's config the launch's keyword
    arguments are, as Triton's ``Autotuner`` runs its chosen config's hook before launching it.
    A config that is none of them gets the hook every config shares, if they all share one."""

    def __init__(self, fn: Any, configs: Sequence[Any]) -> None:
        self.fn = fn
        self.arg_names: list[str] = list(fn.arg_names)
        self._hooks = [(dict(c.kwargs), dict(c.all_kwargs()), c.pre_hook) for c in configs
                       if not isinstance(c, Mapping) and getattr(c, "pre_hook", None) is not None]
        shared = {getattr(c, "pre_hook", None) for c in configs}
        self._shared: Callable | None = shared.pop() if len(shared) == 1 else None

    def __getitem__(self, grid: Any) -> Callable:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        hook = self.hook_for(kwargs)
        if hook is not None:
            hook({**dict(zip(self.arg_names, args)), **kwargs})
        return self.fn.run(*args, **kwargs)

    def hook_for(self, kwargs: Mapping[str, Any]) -> Callable | None:
        """The pre_hook of the first config whose meta-parameters the launch passes, with every
        launch option both name equal."""
        for constexprs, options, hook in self._hooks:
            if all(k in kwargs for k in constexprs) and all(kwargs[k] == v for k, v in options.items() if k in kwargs):
                return hook
        return self._shared

    def __repr__(self) -> str:
        return f"ConfigPreHooks({self.fn!r})"
