"""``aot_tune.autotune``: a drop-in for ``@triton.autotune`` that reads the generated table.

It takes ``@triton.autotune``'s arguments plus the table to read, and returns an object launched
exactly like Triton's ``Autotuner``: ``kernel[grid](*args, **kwargs)``, ``grid`` a tuple or a
callable of the meta-parameters. A launch never benchmarks and compiles only the config it runs:

* during ``doit tune`` (inside :func:`aot_tune.runtime.forcing.launch_with_config`) it launches the forced
  candidate config, with ``reset_to_zero`` / ``restore_value`` / ``pre_hook`` / ``post_hook``
  around it, where Triton runs them around its benchmark runs;
* otherwise it launches the table's config for (key args, dtype of the first tensor argument
  or, where the table declares dtype combinations, the combination the tensor arguments make,
  device) through :class:`aot_tune.runtime.lookup.TunedTable`, with the chosen config's own ``pre_hook``
  only, as a Triton launch whose key is already tuned does. Untuned keys follow the runtime's
  policy; with nothing usable it falls back to ``default``, else the first of ``configs`` that
  survives ``prune_configs_by`` for the call (``early_config_prune``, then ``perf_model``'s best
  guess: a model, never a measurement).

This module imports neither torch nor triton: ``import aot_tune`` stays cheap for the tuner's own
processes, and by the time a kernel is decorated its author has imported triton anyway.
Decorated kernels use :mod:`aot_tune.runtime.warm_start`, so a process's first launch of a compiled config
skips Triton's hash of its own installation.
"""
from __future__ import annotations

import operator
import types
from typing import Any, Callable, Iterable, Mapping, Sequence

from aot_tune.runtime import warm_start
from aot_tune.runtime.devices import INTERPRETER
from aot_tune.errors import TuneError, shorten
from aot_tune.runtime.forcing import FORCED, ForcedConfig
from aot_tune.runtime.lookup import TunedTable, cuda_device_key, uniform_device_key

_LAUNCH_OPTIONS = ("num_warps", "num_ctas", "num_stages", "maxnreg", "ir_override")
#: The oldest Triton release the decorator launches with (tests/pipeline/test_runtime_install.py
#: runs a shipped table under it); older ones lack ``Config.all_kwargs``.
OLDEST_TRITON = (3, 0)


def config_kwargs(config: Any) -> dict:
    """A ``triton.Config`` (or a plain dict) as the keyword arguments a launch passes."""
    if isinstance(config, Mapping):
        return dict(config)
    return dict(config.all_kwargs())


def _no_key(args: tuple) -> tuple:
    return ()


def _innermost(fn: Any) -> Any:
    """The JIT (or interpreted) function under decorators that keep what they wrap in ``.fn``."""
    while hasattr(fn, "fn") and not isinstance(fn.fn, types.FunctionType) and fn.fn is not fn:
        fn = fn.fn
    return fn


def _is_interpreted(fn: Any) -> bool:
    return type(_innermost(fn)).__name__ == "InterpretedFunction"


class TunedKernel:
    """A ``@triton.jit`` function launched with its tuned config; see the module docstring."""

    def __init__(self, fn: Any, configs: Sequence[Any], key: Sequence[str], prune_configs_by: Mapping | None,
                 reset_to_zero: Iterable[str] | None, restore_value: Iterable[str] | None,
                 pre_hook: Callable | None, post_hook: Callable | None, table: str | None, module: str | None,
                 default: Any, strict: bool | None) -> None:
        self.fn = fn
        self.arg_names: list[str] = list(fn.arg_names)
        self.configs = list(configs)
        self.keys = list(key)
        self.reset_to_zero = list(reset_to_zero or ())
        self.restore_value = list(restore_value or ())
        where = getattr(_innermost(fn), "__name__", "kernel")
        for param, names in (("key", self.keys), ("reset_to_zero", self.reset_to_zero),
                             ("restore_value", self.restore_value)):
            unknown = [name for name in names if name not in self.arg_names]
            if unknown:
                raise TuneError(f"aot_tune.autotune on {where}: {param} names {', '.join(unknown)}, which "
                                f"{'is' if len(unknown) == 1 else 'are'} not an argument; fix: use argument names "
                                f"({', '.join(self.arg_names)})")
        prune = dict(prune_configs_by or {})
        self.early_config_prune: Callable | None = prune.get("early_config_prune")
        self.perf_model: Callable | None = prune.get("perf_model")
        self.user_pre_hook = pre_hook
        self.user_post_hook = post_hook
        self.name = table or where
        self.table = TunedTable(self.name, module=module, strict=strict)
        self.default = None if default is None else config_kwargs(default)
        self._config_hooks = self._hooks_by_config()
        self._key_slots = tuple((self.arg_names.index(name), name) for name in self.keys)
        # one key arg: the value itself, several: a tuple (as _lookup builds the memo key)
        self._key_getter = operator.itemgetter(*(index for index, _ in self._key_slots)) if self.keys else _no_key
        self._interpreted = _is_interpreted(fn)
        warm_start.install(fn)  # the first launch in a process loads the tuned kernel, see warm_start
        self._device: str | None = None  # set once the device is known not to change between launches
        self._chosen: dict[tuple, tuple[dict, Callable | None, Any]] = {}
        #: The config of the last launch (a ``triton.Config``), as on Triton's Autotuner; None before one.
        self.best_config: Any = None

    # ------------------------------------------------------------------ launching

    def __getitem__(self, grid: Any) -> Callable:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        """Launch with the forced candidate (tuning) or the table's config (run time)."""
        forced = FORCED.get()
        if forced is not None and (forced.kernel is None or forced.kernel == self.name):
            return self._run_forced(forced, args, grid, warmup, kwargs)
        try:  # the hot path: tensor first, key args positional, device known, config memoized
            config, pre_hook, self.best_config = self._chosen[(self._device, args[0].dtype, self._key_getter(args))]
        except (AttributeError, IndexError, KeyError, TypeError):
            config, pre_hook, self.best_config = self._lookup(args, kwargs)
        if pre_hook is not None:
            pre_hook({**dict(zip(self.arg_names, args)), **kwargs, **config})
        return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs, **config)

    def warmup(self, *args: Any, **kwargs: Any) -> Any:
        """Compile (without launching) the config a launch with these arguments would use."""
        return self.fn.warmup(*args, **kwargs, **self.config_for(*args, **kwargs))

    def config_for(self, *args: Any, **kwargs: Any) -> dict:
        """The config a launch with these arguments would use (a copy; for logs and tests)."""
        kwargs.pop("grid", None)
        forced = FORCED.get()
        if forced is not None and (forced.kernel is None or forced.kernel == self.name):
            return dict(forced.config)
        return dict(self._lookup(args, dict(kwargs))[0])

    # ------------------------------------------------------------------ choosing

    def _lookup(self, args: tuple, kwargs: dict) -> tuple[dict, Callable | None, Any]:
        """Any call: find the dtype, key values and device the slow way; choose once per memo key."""
        count = len(args)
        missing = [name for index, name in self._key_slots if index >= count and name not in kwargs]
        if missing:
            raise TypeError(f"{self._where()}: launch is missing key argument(s) {', '.join(missing)}")
        values = tuple(args[index] if index < count else kwargs[name] for index, name in self._key_slots)
        dtypes = tuple(a.dtype for a in (*args, *kwargs.values()) if getattr(a, "dtype", None) is not None)
        dtype = dtypes[0] if dtypes else None
        combined = dtype is not None and self.table.combos()
        if combined:  # keyed by the combination all tensors make: memoized by every tensor's dtype
            dtype = self.table.dtype_of(*dtypes)
        device = INTERPRETER if self._interpreted else cuda_device_key()
        memo = (device, dtypes if combined else dtype, values[0] if len(values) == 1 else values)
        chosen = self._chosen.get(memo)
        if chosen is None:
            if dtype is None:
                raise TuneError(f"{self.name}: a launch of {self._where()} passed no tensor, so there is no dtype "
                                f"to look its config up by; fix: pass at least one tensor argument")
            config = self.table.choose(device, dtype, dict(zip(self.keys, values)))
            if config is None:
                config = self.default if self.default is not None else self._first_candidate(args, kwargs)
            chosen = self._chosen[memo] = (dict(config), self._pre_hook_of(config), self._as_triton_config(config))
        if device == INTERPRETER or device == uniform_device_key():
            self._device = device  # from now on the hot path needs no device query
        return chosen

    def _first_candidate(self, args: tuple, kwargs: dict) -> dict:
        """The fallback without a declared default: the first config ``prune_configs_by`` keeps."""
        candidates = self.configs
        if not candidates:
            return {}
        nargs = dict(zip(self.arg_names, args))
        if self.early_config_prune is not None:
            candidates = self.early_config_prune(candidates, nargs, **kwargs) or candidates
        if self.perf_model is not None and len(candidates) > 1:
            candidates = sorted(candidates, key=lambda c: self.perf_model(**nargs, **kwargs, **config_kwargs(c)))
        return config_kwargs(candidates[0])

    def _as_triton_config(self, config: Mapping[str, Any]) -> Any:
        """The ``triton.Config`` of ``configs`` a config dict is, else a new one holding it."""
        constexprs = {k for k in config if k not in _LAUNCH_OPTIONS}
        for candidate in self.configs:
            given = config_kwargs(candidate)
            if (not isinstance(candidate, Mapping) and set(candidate.kwargs) == constexprs
                    and all(given.get(k) == v for k, v in config.items())):
                return candidate
        import triton  # the kernel's author has imported it: this costs nothing

        options = {k: v for k, v in config.items() if k in _LAUNCH_OPTIONS}
        return triton.Config({k: v for k, v in config.items() if k not in _LAUNCH_OPTIONS}, **options)

    @property
    def key(self) -> list[str]:
        """The key argument names (Triton's Autotuner keeps them as ``keys``; both are here)."""
        return self.keys

    def _hooks_by_config(self) -> dict[tuple, Callable]:
        hooks = {}
        for config in self.configs:
            hook = getattr(config, "pre_hook", None)
            if hook is not None:
                hooks[tuple(sorted(config_kwargs(config).items()))] = hook
        return hooks

    def _pre_hook_of(self, config: Mapping[str, Any]) -> Callable | None:
        """The ``pre_hook`` of the matching config in ``configs``; a config the table holds that is
        not among them gets the hook every config shares, if they all share one."""
        hook = self._config_hooks.get(tuple(sorted(config.items())))
        if hook is None and self.configs:
            shared = {getattr(c, "pre_hook", None) for c in self.configs}
            hook = shared.pop() if len(shared) == 1 else None
        return hook

    # ------------------------------------------------------------------ tuning

    def _run_forced(self, forced: ForcedConfig, args: tuple, grid: Any, warmup: bool, kwargs: dict) -> Any:
        forced.launches += 1
        config = forced.config
        pre_hook = self._pre_hook_of(config)
        if not forced.hooks:
            return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs, **config)
        nargs = {**dict(zip(self.arg_names, args)), **kwargs, **config}
        if pre_hook is not None:
            pre_hook(nargs)
        restore = self._before(nargs)
        try:
            output = self.fn.run(*args, grid=grid, warmup=warmup, **kwargs, **config)
        except Exception as exc:
            self._after(nargs, restore, exc)
            raise
        self._after(nargs, restore, None)
        return output

    def _before(self, nargs: dict) -> dict:
        if self.user_pre_hook is not None:
            self.user_pre_hook(nargs)
            return {}
        for name in self.reset_to_zero:
            if nargs.get(name) is not None:
                nargs[name].zero_()
        return {name: nargs[name].clone() for name in self.restore_value if nargs.get(name) is not None}

    def _after(self, nargs: dict, restore: dict, exception: BaseException | None) -> None:
        if self.user_post_hook is not None:
            self.user_post_hook(nargs, exception=exception)
            return
        for name, saved in restore.items():
            nargs[name].copy_(saved)

    def _where(self) -> str:
        return getattr(_innermost(self.fn), "__name__", "kernel")

    def __repr__(self) -> str:
        return f"aot_tune.autotune({self._where()}, table={self.name!r})"


def _check_triton(fn: Any) -> None:
    """Refuse, at decoration, a Triton older than the runtime launches with (not a failed launch later)."""
    from aot_tune.triton_compat import triton_release

    release = triton_release()
    if release is not None and release < OLDEST_TRITON:
        oldest = ".".join(map(str, OLDEST_TRITON))
        raise TuneError(f"aot_tune.autotune on {getattr(_innermost(fn), '__name__', 'kernel')}: triton "
                        f"{'.'.join(map(str, release))} is older than {oldest}, the oldest the runtime launches "
                        f"with; fix: install triton>={oldest}, or keep @triton.autotune")


def autotune(configs: Sequence[Any], key: Sequence[str], prune_configs_by: Mapping | None = None,
             reset_to_zero: Iterable[str] | None = None, restore_value: Iterable[str] | None = None,
             pre_hook: Callable | None = None, post_hook: Callable | None = None, *, table: str | None = None,
             module: str | None = None, default: Any = None, strict: bool | None = None,
             **triton_only: Any) -> Callable[[Any], TunedKernel]:
    """Decorate a ``@triton.jit`` function so every launch runs its tuned config (never tuning).

    ``table``: the kernel's name in tuning.yaml (default: the function's name); its table is read
    from ``generated.<table>`` unless ``module`` names another module. ``default``: the config for
    launches with nothing usable in the table (default: the first of ``configs`` that survives
    ``prune_configs_by``). ``strict``: raise instead of falling back (None: ``AOT_TUNE_STRICT=1``).
    ``key`` must name the kernel arguments that are the manifest's key dims. ``warmup``, ``rep``,
    ``use_cuda_graph``, ``do_bench`` and ``cache_results`` configure Triton's benchmarking, which
    never happens here: they are accepted and ignored, so a kernel file needs no other change.
    """
    unknown = set(triton_only) - {"warmup", "rep", "use_cuda_graph", "do_bench", "cache_results"}
    if unknown:
        raise TypeError(f"aot_tune.autotune() got unexpected keyword arguments: {', '.join(sorted(unknown))}")

    def decorate(fn: Any) -> TunedKernel:
        if not hasattr(fn, "arg_names") or not hasattr(fn, "run"):
            raise TuneError(f"aot_tune.autotune must decorate a @triton.jit function, got {shorten(repr(fn))}; "
                            f"fix: put @triton.jit below @aot_tune.autotune")
        _check_triton(fn)
        return TunedKernel(fn, configs, key, prune_configs_by, reset_to_zero, restore_value, pre_hook, post_hook,
                           table, module, default, strict)

    return decorate
