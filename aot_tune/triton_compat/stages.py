"""A compile's lowering stages, watched: the seconds each stage takes, and a compile stopped at
the first stage where its shared memory is proven to exceed the target's limit.

What this relies on (triton 3.6 to 3.9), and why:

* A backend's ``add_stages(stages, options, language)`` fills an ordered dict of stages (ttir,
  ttgir, llir, ptx, cubin for CUDA), each ``stage(src, metadata)``; wrapping the entries times
  them and lets a check run between two of them.
* The TTGIR (printed as text) holds the kernel's explicit shared-memory buffers as
  ``ttg.local_alloc`` ops typed ``!ttg.memdesc<SHAPExELEM, layout, #smem, ...>`` in the
  ``#ttg.shared_memory`` space. Triton's allocator gives buffers whose live ranges overlap
  disjoint offsets, and a buffer is live at least from its ``local_alloc`` to its last use by
  name (its ``local_dealloc``), in the order ops are printed. So the largest sum of sizes over
  buffers live at one point is a lower bound of the llir stage's ``metadata["shared"]``
  (which adds scratch buffers, padding and alignment). Only for one CTA per block
  (``ttg.num-ctas = 1``): with more, a buffer is split across the CTAs.
* The llir stage sets ``metadata["shared"]``; checking it before ptx skips PTX and ptxas.
"""
from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import Iterator

from aot_tune.triton_compat.target import SharedMemoryExceeded

#: Bytes per element of the element types a shared buffer holds (others count zero: a lower bound).
_ELEMENT_BYTES = {"f64": 8, "i64": 8, "f32": 4, "i32": 4, "tf32": 4, "f16": 2, "bf16": 2, "i16": 2,
                  "i8": 1, "f8E4M3FN": 1, "f8E5M2": 1, "f8E4M3FNUZ": 1, "f8E5M2FNUZ": 1, "f8E4M3B11FNUZ": 1}
_ALLOC = re.compile(r"^\s*(%[\w.$-]+) = ttg\.local_alloc\b.*?->\s*!ttg\.memdesc<([^>]*)>")
_NAME = re.compile(r"%[\w.$-]+")
_ONE_CTA = re.compile(r'"ttg\.num-ctas" = 1\b')
_FUNCTION = re.compile(r"^\s*tt\.func\b", re.M)
_MEMORY_SPACE_ALIAS = re.compile(r"^(#[\w.$-]+)\s*=\s*#ttg\.shared_memory\s*$", re.M)


@dataclass
class StageLog:
    """What the watched compiles of one request did: seconds per stage (summed over its
    specializations), the TTGIR's shared-memory lower bound, and where a compile was stopped."""

    seconds: dict[str, float] = field(default_factory=dict)
    ttgir_shared_bound: int = 0
    stopped_at: str = ""


def ttgir_shared_lower_bound(ttgir: str) -> int:
    """Bytes of shared memory the kernel needs at least, from its explicit buffers (see the
    module docstring); 0 when nothing can be proven (several CTAs, no buffers, unknown types)."""
    if not _ONE_CTA.search(ttgir):
        return 0
    spaces = set(_MEMORY_SPACE_ALIAS.findall(ttgir)) | {"#ttg.shared_memory"}
    return max((_peak(body, spaces) for body in _FUNCTION.split(ttgir)[1:]), default=0)


def _peak(function: str, spaces: set[str]) -> int:
    """The largest sum of sizes of the buffers live at one line of one function."""
    lines = function.splitlines()
    buffers: dict[str, tuple[int, int]] = {}  # name -> (line of its alloc, bytes)
    last_use: dict[str, int] = {}
    for number, line in enumerate(lines):
        found = _ALLOC.match(line)
        if found:
            size = _memdesc_bytes(found.group(2), spaces)
            if size:
                buffers[found.group(1)] = (number, size)
                last_use[found.group(1)] = number
            continue
        for name in _NAME.findall(line):
            if name in buffers:
                last_use[name] = number
    events = sorted([(start, size) for start, size in buffers.values()]
                    + [(last_use[name] + 0.5, -size) for name, (_, size) in buffers.items()])
    live = peak = 0
    for _, change in events:
        live += change
        peak = max(peak, live)
    return peak


def _memdesc_bytes(memdesc: str, spaces: set[str]) -> int:
    parts = [p.strip() for p in memdesc.split(",")]
    if not any(p in spaces for p in parts[1:]):
        return 0
    *dims, element = parts[0].split("x")
    if element not in _ELEMENT_BYTES or not all(d.isdigit() for d in dims):
        return 0
    size = _ELEMENT_BYTES[element]
    for dim in dims:
        size *= int(dim)
    return size


@contextlib.contextmanager
def watched_stages(arch: int, limit: int) -> Iterator[StageLog]:
    """While active, every compile for ``sm{arch}`` in this process is timed stage by stage and
    stops with ``SharedMemoryExceeded`` as soon as its shared memory is proven over ``limit``:
    after ttgir from the TTGIR's lower bound, after llir from the exact figure."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    log = StageLog()
    backend_type = type(make_backend(GPUTarget("cuda", arch, 32)))
    original = backend_type.add_stages

    def add_stages(self, stages, *args, **kwargs):
        original(self, stages, *args, **kwargs)
        names = list(stages)
        for index, name in enumerate(names):
            stages[name] = _watched(name, stages[name], names[index + 1:], log, limit)

    backend_type.add_stages = add_stages
    try:
        yield log
    finally:
        backend_type.add_stages = original


def _watched(name: str, stage, later: list[str], log: StageLog, limit: int):
    def run(src, metadata):
        start = time.perf_counter()
        try:
            out = stage(src, metadata)
        finally:
            log.seconds[name] = log.seconds.get(name, 0.0) + time.perf_counter() - start
        if not later:
            return out
        if name == "ttgir":
            start = time.perf_counter()
            bound = ttgir_shared_lower_bound(str(out))
            log.seconds["ttgir_check"] = log.seconds.get("ttgir_check", 0.0) + time.perf_counter() - start
            log.ttgir_shared_bound = max(log.ttgir_shared_bound, bound)
            if bound > limit:
                log.stopped_at = name
                raise SharedMemoryExceeded(bound, limit, proven_at=name)
        shared = int(metadata.get("shared") or 0)
        if shared > limit:
            log.stopped_at = name
            raise SharedMemoryExceeded(shared, limit, proven_at=name)
        return out

    return run
