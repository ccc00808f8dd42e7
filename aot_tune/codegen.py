"""Generated modules: the chosen configs as plain Python, rendered with jinja2.

Byte-for-byte deterministic for the same cache: tables sorted, no timestamps; the header
changes only when the inputs (the records' fingerprints) change.
"""
from __future__ import annotations

import functools
from pathlib import Path

from . import __version__
from .cache import config_from_proto
from .fingerprint import digest
from .tuning_schema import TuningCache


def _py(value) -> str:
    """A Python literal with dict keys in sorted order."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_py(k)}: {_py(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, tuple):
        inner = ", ".join(_py(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


@functools.lru_cache(maxsize=1)
def _environment():
    """Built on first render: importing jinja2 costs a no-op run about 0.1 s it does not need."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("aot_tune", "templates"), trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True, undefined=jinja2.StrictUndefined,
    )
    env.filters["py"] = _py
    return env


def render_module(kernel: str, key: tuple[str, ...], cache: TuningCache, manifest_name: str) -> str:
    devices = {}
    for record in cache.records:
        if record.kernel != kernel or not record.HasField("best"):
            continue
        device = devices.setdefault(record.device.key, {
            "key": record.device.key, "name": record.device.name,
            "compute_capability": record.device.compute_capability, "backend": record.device.backend,
            "toolchain": f"triton {record.toolchain.triton}, torch {record.toolchain.torch}", "entries": [],
        })
        device["entries"].append({"key": (*record.shape, record.dtype), "config": config_from_proto(record.best)})
    for device in devices.values():
        device["entries"].sort(key=lambda e: (e["key"][-1], e["key"][:-1]))
    fingerprints = sorted(r.fingerprint for r in cache.records if r.kernel == kernel)
    return _environment().get_template("generated_module.py.j2").render(
        version=__version__, manifest=manifest_name, kernel=kernel, key=tuple(key),
        inputs_digest=digest(fingerprints, tuple(key)), devices=[devices[k] for k in sorted(devices)],
    )


def header_digest(text: str) -> str | None:
    """The ``# inputs:`` digest in a generated module's header, or None if absent."""
    for line in text.splitlines()[:5]:
        if line.startswith("# inputs: "):
            return line.split(":", 1)[1].strip()
    return None


def module_inputs_digest(path: Path) -> str | None:
    """The header digest of a generated module file, or None if absent/unreadable."""
    try:
        with open(path) as handle:
            return header_digest("".join(line for _, line in zip(range(5), handle)))
    except OSError:
        return None
