"""Every Triton autotuner's launches in a process, seen and never benchmarked: the hook under
``aot_tune record``, and the key under which ``aot_tune.use_tables`` installs a config.

What this relies on (triton 3.6 to 3.9), and why:

* ``Autotuner.run(*args, **kwargs)`` takes every launch of an autotuned kernel (``kernel[grid]``
  calls ``run`` with ``grid`` among the keyword arguments), and libraries' own autotuners
  (fla's ``CachedAutotuner``) fill ``self.cache`` from their files, then call ``super().run``;
* ``run`` looks its key up in ``self.cache`` (a dict of key -> ``triton.Config``) and benchmarks
  only on a miss; the key is the values of ``self.keys`` among the named arguments, then
  ``str(arg.dtype)`` of every named argument that has a dtype, in the order the arguments
  were passed (:func:`autotuner_key`);
* ``prune_configs(kwargs)`` reads ``self.nargs`` and returns the configs a miss would benchmark.

So wrapping ``Autotuner.run`` once sees every launch, and a config put in ``self.cache`` before
``run`` is the config that launch uses, without a benchmark. And:

* ``triton.knobs.compilation.listener`` is called at the end of every ``triton.compile`` with
  ``src`` (an ``ASTSource`` whose ``fn`` is the ``JITFunction``), ``cache_hit`` and ``times``
  (``CompileTimes``: microseconds of ``ir_initialization``, each of ``lowering_stages`` and
  ``store_results``), which :func:`watch_compiles` reads.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

#: What the hook calls on each launch, before it runs: ``(tuner, args, kwargs, key, config,
#: chosen_by)``; what it returns (or None) is called once the launch has run.
OnLaunch = Callable[[Any, tuple, dict, tuple, Any, str], "Callable[[], None] | None"]

_lock = threading.Lock()
_watching: list[OnLaunch] = []


def autotuner_key(tuner: Any, args: tuple, kwargs: dict) -> tuple:
    """The key ``tuner`` caches a launch's config under: its key arguments' values, then the
    dtype of every tensor argument, in the order the launch passed them."""
    named = {name: value for name, value in {**dict(zip(tuner.arg_names, args)), **kwargs}.items()
             if name in tuner.arg_names}
    key = [named[name] for name in tuner.keys if name in named]
    key.extend(str(value.dtype) for value in named.values() if hasattr(value, "dtype"))
    return tuple(key)


def is_autotuner(obj: Any) -> bool:
    from triton.runtime.autotuner import Autotuner

    return isinstance(obj, Autotuner)


def watch(on_launch: OnLaunch) -> None:
    """Call ``on_launch`` on every autotuned launch in this process from now on; a key the
    autotuner has not tuned gets its first config (after the autotuner's own pruning) instead
    of a benchmark. Idempotent per callback."""
    from triton.runtime.autotuner import Autotuner

    with _lock:
        if on_launch in _watching:
            return
        _watching.append(on_launch)
        if getattr(Autotuner.run, "_aot_tune_watched", False):
            return
        original = Autotuner.run

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if len(self.configs) <= 1 or getattr(_inside, "active", False):
                return original(self, *args, **kwargs)
            key = autotuner_key(self, args, kwargs)
            chosen_by = "library" if key in self.cache else "first"
            if chosen_by == "first":
                self.cache[key] = _first_config(self, args, kwargs)
            after = [done for done in (watcher(self, args, kwargs, key, self.cache[key], chosen_by)
                                       for watcher in list(_watching)) if done is not None]
            _inside.active = True
            try:
                result = original(self, *args, **kwargs)
            finally:
                _inside.active = False
            for done in after:
                done()
            return result

        run._aot_tune_watched = True  # type: ignore[attr-defined]
        Autotuner.run = run


_inside = threading.local()


#: What ``watch_compiles`` calls after each compile that was not served from Triton's cache:
#: ``(jit_function, seconds)``, the seconds Triton timed (None where it timed nothing).
OnCompile = Callable[[Any, "float | None"], None]


def watch_compiles(on_compile: OnCompile) -> None:
    """Call ``on_compile`` after every compile in this process from now on (a listener that was
    installed before keeps being called). A fault of ``on_compile`` never fails the compile."""
    from triton import knobs

    previous = knobs.compilation.listener

    def listener(*, src: Any = None, cache_hit: bool = False, times: Any = None, **kwargs: Any) -> None:
        if previous is not None:
            previous(src=src, cache_hit=cache_hit, times=times, **kwargs)
        if cache_hit or getattr(src, "fn", None) is None:
            return
        try:
            on_compile(src.fn, _seconds(times))
        except Exception:  # noqa: BLE001 - a watcher's fault must not fail the user's compile
            pass

    knobs.compilation.listener = listener


def _seconds(times: Any) -> float | None:
    try:
        micros = times.ir_initialization + sum(d for _, d in times.lowering_stages) + times.store_results
    except (AttributeError, TypeError, ValueError):
        return None
    return micros / 1e6


def _first_config(tuner: Any, args: tuple, kwargs: dict) -> Any:
    """The first config the autotuner would benchmark: its pruning's first, else its first."""
    tuner.nargs = dict(zip(tuner.arg_names, args))
    try:
        pruned = tuner.prune_configs({k: v for k, v in kwargs.items() if k not in ("grid", "warmup")})
    except Exception:  # a perf model that needs what a recording does not run: no pruning
        pruned = None
    return (pruned or tuner.configs)[0]


def config_values(config: Any) -> dict[str, Any]:
    """A ``triton.Config`` as the manifest's inline config: its constexprs, then every launch
    option it sets (``num_ctas`` and ``maxnreg`` only where they differ from Triton's defaults)."""
    values = dict(config.kwargs)
    values["num_warps"] = config.num_warps
    values["num_stages"] = config.num_stages
    if getattr(config, "num_ctas", 1) not in (None, 1):
        values["num_ctas"] = config.num_ctas
    if getattr(config, "maxnreg", None) is not None:
        values["maxnreg"] = config.maxnreg
    return values


def tl_dtype_name(value: Any) -> str | None:
    """The name of a ``triton.language`` dtype passed as an argument (``tl.float32``), else None."""
    cls = type(value)
    if cls.__module__.startswith("triton.language") and cls.__name__ == "dtype":
        return str(value.name) if hasattr(value, "name") else None
    return None


def tl_dtype(name: str) -> Any:
    import triton.language as tl

    return tl.dtype(name)
