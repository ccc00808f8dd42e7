"""``devices``: the GPU models (and the interpreter) a project ships tables for, as the device
keys of aot_tune.runtime.devices, so that ``doit check`` can say which of them lack a table.

A key must be written as the runtime computes it: ``h100`` is refused with ``did you mean
'h100-sxm'?`` rather than silently never matching a table. A model the key table does not list
is named by the slug ``device_key`` makes of its name (``geforce-rtx-4090``), as ``doit check``
prints it on that machine; a slug one typo away from a listed key is refused as that typo.
"""
from __future__ import annotations

import difflib
from typing import Any

from aot_tune.errors import quoted
from aot_tune.manifest.checks import Ctx, as_list, described
from aot_tune.manifest.records import Defaults
from aot_tune.runtime.devices import KNOWN_KEYS, device_key

#: How close (difflib ratio) an unlisted slug may come to a listed key before it counts as a typo
#: of it: ``h10-sxm`` (0.93) and ``interpeter`` (0.95) are typos, ``a10`` (0.86, NVIDIA A10) is not.
_TYPO_RATIO = 0.9


def parse_devices(ctx: Ctx, value: Any, key: str, line: int, base: Defaults) -> tuple[str, ...]:
    seq = as_list(ctx, value, key, line, "h100-sxm", allow_empty=True)
    out = []
    for i, v in enumerate(seq):
        problem = _device_problem(v)
        if problem:
            ctx.fail(seq.item_lines[i], f"{key}[{i}]", *problem)
        out.append(v)
    return tuple(dict.fromkeys(out))


def _device_problem(value: Any) -> tuple[str, str] | None:
    """(problem, fix) for a value that is not a device key; None for one that is."""
    listed = f"known keys: {', '.join(KNOWN_KEYS)}"
    if not isinstance(value, str) or not value.strip():
        return f"expected a device key, got {described(value)}", f"write a key such as h100-sxm ({listed})"
    if value in KNOWN_KEYS:
        return None
    normalized = device_key(value)
    if normalized != value:
        return (f"{described(value)} is not a device key (the runtime names that GPU {quoted(normalized)})",
                f"did you mean {quoted(normalized)}?")
    close = difflib.get_close_matches(value, KNOWN_KEYS, n=1, cutoff=_TYPO_RATIO)
    if close:
        return f"unknown device key {described(value)}", f"did you mean {quoted(close[0])}?"
    return None
