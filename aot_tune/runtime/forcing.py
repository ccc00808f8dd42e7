"""Tuning-time forcing: how the compile and bench stages run a launch function with one
candidate config. ``aot_tune.autotune`` kernels honour the forced config while
:func:`launch_with_config` is active; launch functions that take ``config=`` get it directly.
"""
from __future__ import annotations

import contextvars
from typing import Any, Callable, Mapping, Sequence

from aot_tune.errors import TuneError

class ForcedConfig:
    """The candidate config the tuner is measuring, seen by every ``aot_tune.autotune`` kernel of
    ``kernel`` (the manifest name; None: every kernel) launched while it is active."""

    __slots__ = ("config", "kernel", "hooks", "launches")

    def __init__(self, config: Mapping[str, Any], kernel: str | None, hooks: bool) -> None:
        self.config = dict(config)
        self.kernel = kernel
        self.hooks = hooks
        self.launches = 0


#: Active only inside :func:`launch_with_config`; a ContextVar so threads and tasks never share it.
FORCED: contextvars.ContextVar[ForcedConfig | None] = contextvars.ContextVar("aot_tune_forced", default=None)

_takes_config_memo: dict[Any, bool] = {}


def _takes_config(launch: Callable) -> bool:
    try:
        return _takes_config_memo[launch]
    except (KeyError, TypeError):
        pass
    import inspect

    try:
        parameters = inspect.signature(launch).parameters
    except (TypeError, ValueError):
        return False
    takes = "config" in parameters and parameters["config"].kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    try:
        _takes_config_memo[launch] = takes
    except TypeError:
        pass
    return takes


def launch_with_config(launch: Callable, inputs: Sequence[Any], config: Mapping[str, Any], *,
                       kernel: str | None = None, hooks: bool = True) -> Any:
    """Run a manifest's launch function with one candidate config: how compile and bench run one.

    The config reaches ``aot_tune.autotune`` kernels through a context they honour (with their
    hooks run around the launch unless ``hooks`` is False: the compile stage launches nothing),
    and the launch function as ``config=`` if it takes that parameter. A launch function that
    does neither would measure one config under every candidate's name, so that raises.
    """
    forced = ForcedConfig(config, kernel, hooks)
    token = FORCED.set(forced)
    try:
        if _takes_config(launch):
            return launch(*inputs, config=dict(config))
        output = launch(*inputs)
    finally:
        FORCED.reset(token)
    if not forced.launches:
        name = getattr(launch, "__qualname__", repr(launch))
        raise TuneError(f"{kernel or 'kernel'}: launch function {name} takes no config= and launched no "
                        f"aot_tune.autotune kernel with table '{kernel}'; fix: decorate the kernel with "
                        f"@aot_tune.autotune(..., table='{kernel}') or add a config parameter to {name} that it "
                        f"passes to the launch (aot_tune.untuned(kernel)[grid](..., **config) for a kernel you "
                        f"cannot edit)")
    return output
