"""Runtime: pick a tuned config for a launch from a generated table. Never benchmarks.

Imported by kernel libraries, so it imports neither torch nor triton at module load (torch is
asked for the device name only on the first lookup, when the caller has imported it anyway).

Policy for a call whose key was not tuned: the nearest tuned key of the same dtype, where the
distance is the sum over key dims of |log2(a) - log2(b)| (shapes scale geometrically); if the
device has no table, a table measured on a GPU of the same compute capability; else the
kernel's declared default config. Each fallback warns once.
"""
from __future__ import annotations

import importlib
import math
import os
import threading
import warnings
from typing import Any, Mapping

from .devices import INTERPRETER, device_key


class TuningWarning(UserWarning):
    """A launch ran with a config that was not tuned for exactly its key and device."""


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _distance(a: tuple, b: tuple) -> float:
    return sum(abs(math.log2(max(x, 1)) - math.log2(max(y, 1))) for x, y in zip(a, b))


def select_config(tables: Mapping[str, Mapping[tuple, dict]], key_names: tuple[str, ...], device: str,
                  dtype: Any, key: Mapping[str, int]) -> dict | None:
    """Exact key, else nearest key of the same dtype in the device's table; None if none."""
    table = tables.get(device)
    if not table:
        return None
    dtype = _dtype_name(dtype)
    values = tuple(int(key[name]) for name in key_names)
    exact = table.get((*values, dtype))
    if exact is not None:
        return exact
    candidates = [k for k in table if k[-1] == dtype]
    if not candidates:
        return None
    nearest = min(candidates, key=lambda k: (_distance(k[:-1], values), k[:-1]))
    return table[nearest]


_device_keys: dict[int, str] = {}


def current_device_key() -> str:
    """Table key of the device launches go to: the interpreter, or the current CUDA GPU's model."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return INTERPRETER
    import torch

    index = torch.cuda.current_device()
    if index not in _device_keys:
        _device_keys[index] = device_key(torch.cuda.get_device_name(index))
    return _device_keys[index]


class TunedTable:
    """The tuned configs of one kernel, as a launch function sees them.

    ``TunedTable("gemm", default={...})`` reads ``generated/gemm.py`` (or ``module``) lazily.
    ``lookup(dtype, **key)`` returns a fresh dict: the kernel's constexprs plus launch options.
    """

    def __init__(self, kernel: str, default: Mapping[str, Any], module: str | None = None) -> None:
        self.kernel = kernel
        self.default = dict(default)
        self.module_name = module or f"generated.{kernel}"
        self._module: Any = None
        self._chosen: dict[tuple, dict] = {}
        self._warned: set[tuple] = set()
        self._lock = threading.Lock()

    def lookup(self, dtype: Any, **key: int) -> dict:
        device = current_device_key()
        memo = (device, _dtype_name(dtype), *sorted(key.items()))
        config = self._chosen.get(memo)
        if config is None:
            config = self._chosen[memo] = self._choose(device, dtype, key)
        return dict(config)

    def _choose(self, device: str, dtype: Any, key: Mapping[str, int]) -> dict:
        module = self._load()
        if module is None:
            return self.default
        tables = module.TABLES
        table_device = device if device in tables else self._same_capability(module, device)
        if table_device is None:
            self._warn_once(("device", device), f"{self.kernel}: no tuned table for device '{device}' "
                            f"in {self.module_name}; using the default config. Fix: run `doit tune {self.kernel}` "
                            f"on this GPU")
            return self.default
        config = select_config(tables, module.KEY, table_device, dtype, key)
        if config is None:
            self._warn_once(("dtype", device, _dtype_name(dtype)), f"{self.kernel}: no tuned {_dtype_name(dtype)} "
                            f"entry for '{table_device}'; using the default config")
            return self.default
        exact = tables[table_device].get((*(int(key[k]) for k in module.KEY), _dtype_name(dtype)))
        if exact is None:
            self._warn_once(("key", device, _dtype_name(dtype), *sorted(key.items())),
                            f"{self.kernel}: key {dict(key)} {_dtype_name(dtype)} was not tuned on "
                            f"'{table_device}'; using the nearest tuned key. Fix: add it to tuning.yaml")
        return config

    def _same_capability(self, module: Any, device: str) -> str | None:
        if device == INTERPRETER:
            return None
        import torch

        major, minor = torch.cuda.get_device_capability()
        capability = f"{major}.{minor}"
        for other, info in sorted(getattr(module, "DEVICES", {}).items()):
            if info.get("compute_capability") == capability:
                self._warn_once(("capability", device), f"{self.kernel}: no table for '{device}'; using "
                                f"the table of '{other}' (same compute capability {capability})")
                return other
        return None

    def _load(self) -> Any:
        with self._lock:
            if self._module is None:
                try:
                    self._module = importlib.import_module(self.module_name)
                except ImportError:
                    self._module = False
                    self._warn_once(("module",), f"{self.kernel}: no generated module {self.module_name}; "
                                    f"using the default config. Fix: run `doit tune {self.kernel}`")
            return self._module or None

    def _warn_once(self, what: tuple, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(message, TuningWarning, stacklevel=4)
