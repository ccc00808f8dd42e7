"""Inside the recorded process: each distinct autotuned launch turned into a record, appended as
one JSON line to the file ``aot_tune record`` named (flushed per line, so a workload that
crashes keeps what it recorded up to then).

A launch is recorded once per kernel and argument signature; the launch itself runs the
library's cached config where it has one, else its first (``triton_compat.autotuner_hook``),
so recording never benchmarks. A kernel the tuner could not import again (defined in the
script itself, or in a closure) is reported once and left out.

Where such a launch compiles (a cold Triton cache), the compile's seconds are recorded too: on a
machine that never tuned a library, they are the first word on how slow each of its kernels
compiles (fla-core's slowest took 5-8x its others' on one GPU host), which the run's forecast
and its compile order go by until the run's own compiles say more.
"""
from __future__ import annotations

import json
import math
import os
import sys
import threading
from typing import Any, Callable

from aot_tune.triton_compat import kernel_source
from aot_tune.triton_compat.autotuner_hook import config_values, tl_dtype_name, watch, watch_compiles
from aot_tune.record.recording import INT_VALUES, SMALL_FLOATS, Argument, RecordedLaunch, TensorSpec

#: The environment variable naming the file the hook appends to.
RECORD_FILE_ENV = "AOT_TUNE_RECORD_FILE"
#: Launch keywords that are not arguments and never part of a recording.
_LAUNCH_ONLY = ("grid", "warmup")


class Unrecordable(Exception):
    """A launch the tuner could not replay (the reason is reported once per kernel)."""


class Recorder:
    """Turns launches into JSON lines; one per process, shared by every autotuner."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: set[tuple[str, str]] = set()
        self._refused: set[str] = set()
        self._kernels: dict[int, str] = {}  # id(tuner) -> its module:attr
        self._functions: dict[int, str] = {}  # id(the Python function beneath it) -> the same
        self._sourced: dict[str, bool] = {}  # kernel -> whether it has a source (written once a process)
        self._target: str | None = None
        self._lock = threading.Lock()

    def __call__(self, tuner: Any, args: tuple, kwargs: dict, key: tuple, config: Any,
                 chosen_by: str) -> Callable[[], None] | None:
        try:
            ref = self._kernel_ref(tuner)
            named, options = _named(tuner, args, kwargs)
            arguments = _arguments(named, stats=False)
            identity = json.dumps([[a.as_json(identity=True) for a in arguments], options], sort_keys=True)
            with self._lock:
                if (ref, identity) in self._seen:
                    return None
                self._seen.add((ref, identity))
            arguments = _arguments(named, stats=True)
            grids = _grids(tuner, named, kwargs.get("grid"))
            _check_key(key)
            sourced = self._source(tuner, ref)
            heuristics = _heuristics(tuner, named, options) if sourced else None
            before = _snapshot(named)
        except Unrecordable as reason:
            self._refuse(_name(tuner), str(reason))
            return None
        except Exception as exc:  # a fault of the recorder must never fail the workload
            self._refuse(_name(tuner), f"recording it failed ({type(exc).__name__}: {exc})")
            return None

        def done() -> None:
            try:
                written = tuple(name for name, copy in before.items() if not _same(named[name], copy))
                launch = RecordedLaunch(arguments, grids, key, config_values(config), chosen_by, written, options,
                                        heuristics)
                if self._target is None:
                    self._target = _target(named)
                    if self._target:
                        self._append({"target": self._target})
                self._append({"kernel": _kernel_json(tuner, ref), "launch": launch.as_json()})
            except Exception as exc:  # as above: the launch has run, only its record is lost
                self._refuse(_name(tuner), f"recording it failed ({type(exc).__name__}: {exc})")

        return done

    def _kernel_ref(self, tuner: Any) -> str:
        ref = self._kernels.get(id(tuner))
        if ref is None:
            ref = self._kernels[id(tuner)] = _importable_ref(tuner)
            self._functions[id(_python_function(tuner))] = ref
        return ref

    def _source(self, tuner: Any, ref: str) -> bool:
        """Write the kernel's Triton source once (or why it has none); whether it has one."""
        with self._lock:
            known = self._sourced.get(ref)
        if known is not None:
            return known
        try:
            if getattr(tuner, "user_defined_pre_hook", False) or getattr(tuner, "user_defined_post_hook", False):
                raise kernel_source.SourceUnsupported("its autotuner runs hooks of the library's own")
            if any(getattr(c, "pre_hook", None) is not None for c in tuner.configs):
                raise kernel_source.SourceUnsupported("a config of its autotuner runs a pre_hook")
            layers = kernel_source.heuristic_layers(tuner)
            line = {"kernel": ref, "source": kernel_source.capture(layers[-1].fn if layers else tuner.fn)}
        except kernel_source.SourceUnsupported as reason:
            line = {"kernel": ref, "refused": str(reason)}
        except Exception as exc:  # noqa: BLE001 - the launch is still recorded; only its source is not
            line = {"kernel": ref, "refused": f"capturing its source failed ({type(exc).__name__}: {exc})"[:300]}
        with self._lock:
            if ref in self._sourced:
                return self._sourced[ref]
            self._sourced[ref] = "source" in line
        self._append({"source": line})
        return "source" in line

    def compiled(self, jit_function: Any, seconds: float | None) -> None:
        """A compile that Triton's cache did not serve: of a recorded kernel, the seconds Triton
        timed become a line of their own."""
        ref = self._functions.get(id(_python_function(jit_function)))
        if ref is not None and seconds is not None and math.isfinite(seconds) and seconds >= 0:
            self._append({"compiled": {"kernel": ref, "seconds": round(seconds, 3)}})

    def _append(self, line: dict) -> None:
        data = (json.dumps(line, sort_keys=True, allow_nan=False) + "\n").encode()
        with self._lock:  # one write of the whole line: processes the workload starts append to the same file
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

    def _refuse(self, kernel: str, reason: str) -> None:
        with self._lock:
            if kernel in self._refused:
                return
            self._refused.add(kernel)
        self._append({"refused": {"kernel": kernel, "reason": reason}})


def _python_function(tuner: Any) -> Any:
    """The Python function beneath every layer (JIT or interpreted alike)."""
    layer = tuner
    for _ in range(32):
        if not hasattr(layer, "fn"):
            break
        layer = layer.fn
    return layer


def _name(tuner: Any) -> str:
    fn = _python_function(tuner)
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"


def _importable_ref(tuner: Any) -> str:
    """``module:attr`` of the object the library launches, where importing it gives this autotuner."""
    fn = _python_function(tuner)
    module, name = getattr(fn, "__module__", None), getattr(fn, "__name__", None)
    if not module or not name or module == "__main__":
        raise Unrecordable("it is defined in the script that was run, which the tuner cannot import; "
                           "move it into a module")
    layer = getattr(sys.modules.get(module), name, None)
    for _ in range(32):
        if layer is tuner:
            return f"{module}:{name}"
        layer = getattr(layer, "fn", None)
    raise Unrecordable(f"{module}.{name} is not this autotuner (it is made at run time, e.g. in a closure); "
                       f"only kernels defined at a module's top level can be tuned ahead of time")


def _named(tuner: Any, args: tuple, kwargs: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    """The launch's arguments by name, in the order passed, and its other keywords."""
    named = dict(zip(tuner.arg_names, args))
    options = {}
    for name, value in kwargs.items():
        if name in tuner.arg_names:
            named[name] = value
        elif name not in _LAUNCH_ONLY:
            if not _is_scalar(value):
                raise Unrecordable(f"its launch keyword {name}={type(value).__name__} is not a plain value")
            options[name] = value
    return named, options


def _is_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (bool, int, str))


def _arguments(named: dict[str, Any], stats: bool) -> tuple[Argument, ...]:
    arguments, tensors = [], {}
    for name, value in named.items():
        if hasattr(value, "data_ptr") and hasattr(value, "stride"):
            alias = next((other for other, t in tensors.items() if t.data_ptr() == value.data_ptr()
                          and t.shape == value.shape and t.stride() == value.stride() and t.dtype == value.dtype), None)
            if alias is not None:
                arguments.append(Argument(name, same_as=alias))
                continue
            tensors[name] = value
            arguments.append(Argument(name, tensor=_tensor_spec(value, stats)))
        elif tl_dtype_name(value) is not None:
            arguments.append(Argument(name, tl_dtype=tl_dtype_name(value)))
        elif _is_scalar(value):
            arguments.append(Argument(name, scalar=value))
        else:
            raise Unrecordable(f"its argument {name} is a {type(value).__name__}, which a recording cannot hold")
    return tuple(arguments)


def _tensor_spec(tensor: Any, stats: bool) -> TensorSpec:
    import torch

    dtype = str(tensor.dtype).removeprefix("torch.")
    shape, stride = tuple(tensor.shape), tuple(tensor.stride())
    if tensor.is_complex():
        raise Unrecordable("it takes a complex tensor")
    integral = not tensor.is_floating_point()
    if not integral and not stats:  # what identifies a launch reads no floating data
        return TensorSpec(shape, stride, dtype)
    if (integral and tensor.numel() <= INT_VALUES) or (not integral and tensor.numel() <= SMALL_FLOATS):
        values = tensor.detach().reshape(-1).cpu()
        values = values.to(torch.int64 if integral else torch.float64).tolist()
        if all(map(math.isfinite, values)):  # else an output buffer of garbage (torch.empty): rebuilt as random
            return TensorSpec(shape, stride, dtype, tuple(values))
    if not stats or tensor.numel() == 0:
        return TensorSpec(shape, stride, dtype)
    wide = tensor.detach().to(torch.float64 if integral else torch.float32)
    low, high, mean, std = torch.stack([wide.min(), wide.max(), wide.mean(), wide.std() if wide.numel() > 1
                                        else wide.new_zeros(())]).double().tolist()
    if not all(map(math.isfinite, (low, high, mean, std))):  # e.g. an output buffer of garbage
        low = high = mean = std = None
    return TensorSpec(shape, stride, dtype, None, low, high, mean, std)


def _grids(tuner: Any, named: dict[str, Any], grid: Any) -> tuple[tuple[int, ...] | None, ...]:
    """The launch grid under each of the autotuner's configs, as Triton computes it."""
    if grid is None:
        raise Unrecordable("it was launched without a grid")
    layers, layer = [], tuner.fn
    while hasattr(layer, "values") and hasattr(layer, "fn"):  # heuristics beneath the autotuner
        layers.append(layer)
        layer = layer.fn
    grids = []
    for config in tuner.configs:
        try:
            if callable(grid):
                meta = {**named, **config.all_kwargs()}
                meta.update(kernel_source.heuristic_values(layers, meta))  # in turn, as Triton runs them
                value = grid(meta)
            else:
                value = grid
            grids.append(tuple(int(g) for g in (value if isinstance(value, (tuple, list)) else (value,))))
        except Exception:  # this config's grid cannot be computed: a replay of it is refused
            grids.append(None)
    return tuple(grids)


def _heuristics(tuner: Any, named: dict[str, Any], options: dict[str, Any]) -> tuple[dict | None, ...]:
    """Per config, what the heuristics beneath the autotuner compute for this launch, as the
    replay of the kernel's source passes them (None where one fails or is not a plain value)."""
    layers = kernel_source.heuristic_layers(tuner)
    values: list[dict | None] = []
    for config in tuner.configs:
        try:
            computed = kernel_source.heuristic_values(layers, {**named, **options, **config_values(config)})
            values.append(computed if all(_is_scalar(v) for v in computed.values()) else None)
        except Exception:  # a heuristic that fails here fails the library's own launch of this config too
            values.append(None)
    return tuple(values)


def _check_key(key: tuple) -> None:
    for value in key:
        if not _is_scalar(value):
            raise Unrecordable(f"its autotuner key holds a {type(value).__name__}")


def _target(named: dict[str, Any]) -> str:
    """The GPU target the launch ran on (``sm90``), or "" on the CPU."""
    import torch

    for value in named.values():
        if getattr(value, "is_cuda", False):
            major, minor = torch.cuda.get_device_capability(value.device)
            return f"sm{major}{minor}"
    return ""


def _snapshot(named: dict[str, Any]) -> dict[str, Any]:
    return {name: value.detach().clone() for name, value in named.items()
            if hasattr(value, "data_ptr") and hasattr(value, "clone") and value.numel() > 0}


def _same(tensor: Any, copy: Any) -> bool:
    """Bit for bit (a NaN left in place is unchanged)."""
    import torch

    try:
        return torch.equal(tensor.detach().contiguous().view(torch.uint8), copy.contiguous().view(torch.uint8))
    except RuntimeError:
        return bool(torch.equal(tensor, copy))


def _kernel_json(tuner: Any, ref: str) -> dict:
    hooks = [name for name, user in (("pre_hook", getattr(tuner, "user_defined_pre_hook", False)),
                                      ("post_hook", getattr(tuner, "user_defined_post_hook", False)),
                                      ("prune_configs_by", getattr(tuner, "early_config_prune", None)
                                       or getattr(tuner, "perf_model", None))) if user]
    return {"kernel": ref, "key": list(tuner.keys), "configs": [config_values(c) for c in tuner.configs],
            "reset_to_zero": list(getattr(tuner, "reset_to_zero", None) or ()),
            "restore_value": list(getattr(tuner, "restore_value", None) or ()), "hooks": hooks}


def install_from_environment() -> bool:
    """Start recording into ``$AOT_TUNE_RECORD_FILE`` (the boot hook calls this once Triton's
    autotuner module is imported); False where the variable is not set."""
    path = os.environ.get(RECORD_FILE_ENV)
    if not path:
        return False
    recorder = Recorder(path)
    watch(recorder)
    watch_compiles(recorder.compiled)
    return True
