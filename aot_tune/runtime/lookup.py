"""Runtime: pick a tuned config for a launch from a generated table. Never benchmarks.

Imported by kernel libraries, so it imports neither torch nor triton at module load (torch is
asked for the device name only on the first GPU lookup, when the caller has imported it anyway).

Policy for a call whose key was not tuned exactly: the nearest tuned key of the same dtype (or
dtype combination) with the same bool and string key values, where the distance is the sum
over the integer key dims of |log2(a) - log2(b)| (shapes scale geometrically); if the
device has no table, a table measured on a GPU of the same compute capability; else the kernel's
declared default config. Each fallback warns once (per missing key, per dtype, per device). In
strict mode (``strict=True`` or ``AOT_TUNE_STRICT=1``) anything but an exact entry of this
device's own table raises :class:`UntunedError` instead.

Both ways of reading a table, :class:`TunedTable` in a launch function and the
``aot_tune.autotune`` decorator, go through :meth:`TunedTable.choose`, so they share one
lookup and fallback path. During ``doit tune`` the tuner runs launch functions through
:func:`aot_tune.runtime.forcing.launch_with_config`, which forces one candidate config on the
decorated kernels.
"""
from __future__ import annotations

import importlib
import math
import os
import threading
import warnings
from typing import Any, Mapping

from aot_tune.runtime.devices import INTERPRETER, device_key
from aot_tune.errors import TuneError

#: Set to 1 to make every table strict (CI: fail on any launch that is not tuned exactly).
STRICT_ENV = "AOT_TUNE_STRICT"


#: Folders whose frames a warning skips to reach the caller: aot_tune's own and Triton's (a kernel
#: under ``@triton.heuristics`` is launched through Triton's frames).
_SKIPPED_FOLDERS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)


def caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside aot_tune and Triton, from ``warnings.warn``'s
    caller: the user's launch line however many decorators and launch frames are in between."""
    import sys

    skipped = _SKIPPED_FOLDERS
    triton = sys.modules.get("triton")
    if triton is not None and getattr(triton, "__file__", None):
        skipped = (*skipped, os.path.dirname(os.path.abspath(triton.__file__)) + os.sep)
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(skipped):
        frame, level = frame.f_back, level + 1
    return level


class TuningWarning(UserWarning):
    """A launch ran with a config that was not tuned for exactly its key and device."""


class UntunedError(TuneError):
    """Strict mode: a launch whose key or device has no exact entry in the generated table."""


def dtype_name(dtype: Any) -> str:
    """'torch.float16' or 'float16' -> 'float16' (tables are keyed by the bare name)."""
    return str(dtype).removeprefix("torch.")


def is_size(value: Any) -> bool:
    """An integer key value (a size), as opposed to a bool or string one (``causal``, ``activation``)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def key_distance(a: tuple, b: tuple) -> float:
    """How far apart two keys are: the sum over key dims of |log2(a) - log2(b)| (shapes scale
    geometrically); infinite where a bool or string value differs (``causal`` never falls back
    to non-causal)."""
    total = 0.0
    for x, y in zip(a, b):
        if is_size(x) and is_size(y):
            total += abs(math.log2(max(x, 1)) - math.log2(max(y, 1)))
        elif x != y or type(x) is not type(y):
            return math.inf
    return total


def select_config(tables: Mapping[str, Mapping[tuple, dict]], key_names: tuple[str, ...], device: str,
                  dtype: Any, key: Mapping[str, int]) -> dict | None:
    """Exact key, else nearest key of the same dtype in the device's table; None if none."""
    table = tables.get(device)
    if not table:
        return None
    dtype = dtype_name(dtype)
    values = tuple(key_value(key[name]) for name in key_names)
    exact = table.get((*values, dtype))
    if exact is not None:
        return exact
    candidates = [k for k in table if k[-1] == dtype and key_distance(k[:-1], values) < math.inf]
    if not candidates:
        return None
    nearest = min(candidates, key=lambda k: (key_distance(k[:-1], values), tuple(map(str, k[:-1]))))
    return table[nearest]


def key_value(value: Any) -> int | bool | str:
    """A launch's key value as tables hold it: a bool or a string as it is, a size as an int
    (numpy and torch integers included)."""
    if isinstance(value, (bool, str)):
        return value
    if type(value).__name__ == "bool_":  # numpy.bool_
        return bool(value)
    return int(value)


def combo_of(combos: Mapping[str, tuple[tuple[str, str], ...]], dtypes: tuple[str, ...]) -> str | None:
    """The dtype combination a launch's tensors make: the one whose dtypes, in argument order,
    begin the launch's tensor dtypes (the longest when several do); None if none."""
    best, size = None, 0
    for name, args in combos.items():
        want = tuple(dtype for _, dtype in args)
        if len(want) > size and dtypes[:len(want)] == want:
            best, size = name, len(want)
    return best


# --------------------------------------------------------------------------- device keys

_device_keys: dict[int, str] = {}
_uniform_key: str | None = None


def cuda_device_key() -> str:
    """Table key of the current CUDA GPU's model.

    When every visible GPU is the same model (the common case, one or eight of a kind) the key is
    computed once per process and a launch pays one global read; otherwise per device index.
    """
    global _uniform_key
    if _uniform_key is not None:
        return _uniform_key
    import torch

    if not _device_keys:
        for index in range(torch.cuda.device_count()):
            _device_keys[index] = device_key(torch.cuda.get_device_name(index))
        if len(set(_device_keys.values())) == 1:
            _uniform_key = next(iter(_device_keys.values()))
            return _uniform_key
    index = torch.cuda.current_device()
    if index not in _device_keys:
        _device_keys[index] = device_key(torch.cuda.get_device_name(index))
    return _device_keys[index]


def uniform_device_key() -> str | None:
    """The device key when every visible GPU is the same model and it is known; else None."""
    return _uniform_key


def current_device_key() -> str:
    """Table key of the device launches go to: the interpreter, or the current CUDA GPU's model."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return INTERPRETER
    return cuda_device_key()


def _cuda_capability() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


# --------------------------------------------------------------------------- tables


class TunedTable:
    """The tuned configs of one kernel, as a launch function sees them.

    ``TunedTable("gemm", default={...})`` reads ``generated/gemm.py`` (or ``module``) lazily, on
    the first lookup. ``lookup(dtype, **key)`` returns a fresh dict: the kernel's constexprs plus
    launch options. ``strict=None`` follows the ``AOT_TUNE_STRICT`` environment variable.
    """

    def __init__(self, kernel: str, default: Mapping[str, Any] | None = None, module: str | None = None,
                 strict: bool | None = None) -> None:
        self.kernel = kernel
        self.default = dict(default or {})
        self.module_name = module or f"generated.{kernel}"
        self.strict = os.environ.get(STRICT_ENV) == "1" if strict is None else strict
        self._module: Any = None
        self._chosen: dict[tuple, dict | None] = {}
        self._warned: set[tuple] = set()
        self._lock = threading.Lock()

    def combos(self) -> Mapping[str, tuple[tuple[str, str], ...]]:
        """The dtype combinations the generated module declares (empty without one)."""
        module = self._load()
        return getattr(module, "COMBOS", {}) if module else {}

    def dtype_of(self, *dtypes: Any) -> str:
        """The table's dtype key for a launch whose tensors have these dtypes, in argument order:
        a combination they make (``fp8_w8a8``), else the first one's name."""
        names = tuple(dtype_name(d) for d in dtypes)
        return combo_of(self.combos(), names) or names[0]

    def lookup(self, dtype: Any, **key: int) -> dict:
        config = self.choose(current_device_key(), dtype, key)
        return dict(self.default if config is None else config)

    def choose(self, device: str, dtype: Any, key: Mapping[str, Any]) -> dict | None:
        """The table's config for a call, or None for "use your default" (after a one-time warning).

        The one lookup path of the runtime; memoized per (device, dtype, key). The returned dict
        is shared: callers copy it before handing it out.
        """
        memo = (device, dtype_name(dtype), *sorted(key.items()))
        try:
            return self._chosen[memo]
        except KeyError:
            pass
        config = self._chosen[memo] = self._choose(device, dtype_name(dtype), key)
        return config

    def _choose(self, device: str, dtype: str, key: Mapping[str, Any]) -> dict | None:
        module = self._load()
        if module is None:
            return None
        values = self._key_values(module, key)
        shown = f"key {dict(zip(module.KEY, values))} {dtype}"
        tables = module.TABLES
        exact = tables.get(device, {}).get((*values, dtype))
        if exact is not None:
            return exact
        if self.strict:
            raise UntunedError(f"{self.kernel}: {shown} is not tuned on device '{device}' (table {self.module_name}, "
                               f"strict mode); fix: add it to tuning.yaml and run `doit tune {self.kernel}` on this GPU")
        table_device = device if tables.get(device) else self._same_capability(module, device)
        if table_device is None:
            self._warn_once(("device", device), f"{self.kernel}: no tuned table for device '{device}' in "
                            f"{self.module_name}; using the default config. Fix: run `doit tune {self.kernel}` "
                            f"on this GPU")
            return None
        config = select_config(tables, module.KEY, table_device, dtype, dict(zip(module.KEY, values)))
        if config is None:
            flags = {name: v for name, v in zip(module.KEY, values) if not is_size(v)}
            entry = f"{dtype} entry" + (f" with {flags}" if flags else "")
            self._warn_once(("dtype", device, dtype, *flags.values()), f"{self.kernel}: no tuned {entry} for "
                            f"'{table_device}' in {self.module_name}; using the default config. Fix: add it "
                            f"to the kernel's dtypes and shapes in tuning.yaml and run `doit tune {self.kernel}`")
            return None
        if (*values, dtype) not in tables[table_device]:
            self._warn_once(("key", device, dtype, values), f"{self.kernel}: {shown} was not tuned on "
                            f"'{table_device}'; using the nearest tuned key. Fix: add it to tuning.yaml and run "
                            f"`doit tune {self.kernel}`")
        return config

    def _key_values(self, module: Any, key: Mapping[str, Any]) -> tuple[int, ...]:
        missing = [name for name in module.KEY if name not in key]
        if missing or len(key) != len(module.KEY):
            raise TuneError(f"{self.kernel}: {self.module_name} is keyed by {', '.join(module.KEY)} but the launch "
                            f"gives {', '.join(key) or 'nothing'}; fix: name the key dims of tuning.yaml in the "
                            f"lookup (or in aot_tune.autotune's key=)")
        try:
            return tuple(key_value(key[name]) for name in module.KEY)
        except (TypeError, ValueError):
            raise TuneError(f"{self.kernel}: key values must be integers, bools or strings, got {dict(key)}; "
                            f"fix: key the kernel by its size arguments and flags") from None

    def _same_capability(self, module: Any, device: str) -> str | None:
        if device == INTERPRETER:
            return None
        capability = _cuda_capability()
        for other, info in sorted(getattr(module, "DEVICES", {}).items()):
            if info.get("compute_capability") == capability and module.TABLES.get(other):
                self._warn_once(("capability", device), f"{self.kernel}: no table for '{device}'; using "
                                f"the table of '{other}' (same compute capability {capability}). Fix: run "
                                f"`doit tune {self.kernel}` on this GPU")
                return other
        return None

    def _load(self) -> Any:
        with self._lock:
            if self._module is None:
                try:
                    self._module = importlib.import_module(self.module_name)
                except ModuleNotFoundError as exc:
                    if exc.name is None or not self.module_name.startswith(exc.name):
                        raise  # the module exists but imports something missing: not ours to hide
                    self._module = False
            if self._module is False:
                if self.strict:
                    raise UntunedError(f"{self.kernel}: no generated module {self.module_name} (strict mode); "
                                       f"fix: run `doit tune {self.kernel}`")
                self._warn_once(("module",), f"{self.kernel}: no generated module {self.module_name}; "
                                f"using the default config. Fix: run `doit tune {self.kernel}`")
            return self._module or None

    def _warn_once(self, what: tuple, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(message, TuningWarning, stacklevel=caller_stacklevel())
