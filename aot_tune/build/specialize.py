"""Specialization: which compiled variant of a kernel each planned launch needs.

Triton compiles a kernel once per *specialization* of its arguments (dtypes, ints equal to 1,
ints and pointers divisible by 16) and per config. Two declared shapes that specialize alike
share every compile, so the plan makes one compile task per (config, specialization, target).
Only running the launch function reveals its arguments, so this step runs it on ``meta``
tensors for every planned (shape, dtype, config) launch and target, in a compile worker, with
Triton's compiler replaced by a recorder (no compile, well under a millisecond a launch).

The answers are kept in ``.aot_tune/specialize/<kernel>.json``, a table under a fingerprint of
the launch, the inputs, the kernel's decorators and parameters (not its body, which decides
nothing here) and the toolchain. The loader reads it without importing torch; a launch the
table does not hold is captured only when some bench still has to measure its config, so a no-op
run and a fresh clone with current caches never run this step.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aot_tune.build.loading import Combos, autotuned_launch, input_dtype
from aot_tune.errors import TuneError
from aot_tune.fileio import write_atomic
from aot_tune.sources import digest

#: Specialization id of launches that failed before Triton bound their arguments (an unknown
#: parameter, a launch function that raises): their compile task reproduces and records the error.
UNBOUND = "unbound"


def launch_key(shape: tuple[int, ...], dtype: str) -> str:
    return f"{dtype}:{'x'.join(str(v) for v in shape)}"


@dataclass(frozen=True)
class SpecializeRequest:
    """The launches of one kernel to capture for one target; plain data for a worker process."""

    kernel: str
    root: str
    kernel_ref: str
    launch_ref: str
    inputs_ref: str
    target: str
    launches: tuple[tuple[tuple[int, ...], dict, str, tuple[tuple[str, dict], ...]], ...]
    # each: (shape, shape as a dict, dtype, ((config id, config), ...))
    combos: Combos = ()  # the manifest's dtype combinations the launches' dtypes may name


def split_request(request: SpecializeRequest, parts: int, least: int = 32) -> list[SpecializeRequest]:
    """``request`` as up to ``parts`` requests of about equal launch counts (at least ``least``
    each), so one kernel's captures spread over the compile workers; results merge back in
    ``SpecializationTable.add``."""
    launches = [(shape, shape_dict, dtype, config) for shape, shape_dict, dtype, configs in request.launches
                for config in configs]
    size = max(least, -(-len(launches) // max(parts, 1)))
    pieces = []
    for start in range(0, len(launches), size):
        grouped: dict[tuple, list] = {}
        for shape, shape_dict, dtype, config in launches[start:start + size]:
            grouped.setdefault((shape, dtype), [shape_dict, []])[1].append(config)
        pieces.append(replace(request, launches=tuple((shape, shape_dict, dtype, tuple(configs))
                                                      for (shape, dtype), (shape_dict, configs) in grouped.items())))
    return pieces or [request]


@dataclass
class SpecializeResult:
    target: str
    by_launch: dict[str, dict[str, str]] = field(default_factory=dict)  # launch key -> config id -> spec id
    described: dict[str, str] = field(default_factory=dict)  # spec id -> description
    launches: int = 0
    seconds: float = 0.0

    def merge(self, other: "SpecializeResult") -> None:
        """Fold in the result of another part of the same request (captured separately)."""
        for key, specs in other.by_launch.items():
            self.by_launch.setdefault(key, {}).update(specs)
        for spec_id, text in other.described.items():
            self.described.setdefault(spec_id, text)
        self.launches += other.launches
        self.seconds += other.seconds


def capture(request: SpecializeRequest) -> SpecializeResult:
    """Run every requested launch under the recorder; runs in a compile worker (imports torch,
    but for a kernel rebuilt from its recorded source)."""
    from aot_tune import triton_compat
    from aot_tune.build.loading import load_kernel_module_attrs
    from aot_tune.runtime.forcing import launch_with_config

    triton_compat.pin_environment()
    kernel_fn, launch, make_inputs, provided = load_kernel_module_attrs(
        request.root, request.kernel_ref, request.launch_ref, request.inputs_ref)
    result = SpecializeResult(request.target)
    start = time.perf_counter()
    refused = autotuned_launch(request.kernel, request.kernel_ref, request.launch_ref)
    with triton_compat.target_driver(triton_compat.parse_target(request.target), capture=True), \
            triton_compat.autotuners_refused(kernel_fn, refused):
        for shape, shape_dict, dtype, configs in request.launches:
            inputs = _meta_inputs(request, make_inputs, shape_dict,
                                  dtype if provided else input_dtype(dtype, request.combos))
            specs = result.by_launch.setdefault(launch_key(shape, dtype), {})
            for config_id, config in configs:
                result.launches += 1
                try:
                    with triton_compat.capture_specializations(kernel_fn, config) as captured:
                        launch_with_config(launch, inputs, config, kernel=request.kernel, hooks=False)
                except Exception as exc:  # the compile task reproduces it as a typed result
                    specs[config_id] = UNBOUND
                    result.described.setdefault(UNBOUND, f"the launch failed: {type(exc).__name__}: {exc}"[:300])
                    continue
                if len(captured) != 1:
                    specs[config_id] = UNBOUND
                    result.described.setdefault(UNBOUND, f"the launch made {len(captured)} kernel calls, expected 1")
                    continue
                spec_id = digest("specialization", captured[0].signature, captured[0].constants,
                                 captured[0].attrs, captured[0].options)[:8]
                specs[config_id] = spec_id
                result.described.setdefault(spec_id, captured[0].describe())
    result.seconds = time.perf_counter() - start
    return result


def _meta_inputs(request: SpecializeRequest, make_inputs, shape: dict, dtype) -> tuple:
    """The input builder's tensors on the meta device; its failure is the user's one line, not a
    traceback (it raised, read tensor data, asked for a key dim the manifest lacks, overflowed)."""
    try:
        return tuple(make_inputs(dict(shape), dtype, "meta"))
    except Exception as exc:  # noqa: BLE001 - any failure inside user code is reported
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        hint = " (it reads tensor data: build inputs from the shape alone)" if "meta" in reason else ""
        raise TuneError(f"{request.kernel}: the input builder {request.inputs_ref} failed for shape {shape} "
                        f"{_dtype_text(dtype)} on meta tensors{hint}: {reason}; fix: make it build "
                        f"tensors of every declared shape from the shape dict (keys: the manifest's key dims)") from None


@dataclass
class SpecializationTable:
    """The durable answers for one kernel: per target and launch, each config's specialization."""

    fingerprint: str
    described: dict[str, str] = field(default_factory=dict)
    by_target: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)  # target -> launch -> config -> spec

    def lookup(self, target: str, shape: tuple[int, ...], dtype: str) -> dict[str, str]:
        return self.by_target.get(target, {}).get(launch_key(shape, dtype), {})

    def add(self, result: SpecializeResult) -> None:
        launches = self.by_target.setdefault(result.target, {})
        for key, specs in result.by_launch.items():
            launches.setdefault(key, {}).update(specs)
        for spec_id, text in result.described.items():
            self.described.setdefault(spec_id, text)

    def write(self, path: Path) -> None:
        """Stored grouped by specialization (config ids listed once per launch), sorted: small and stable."""
        grouped = {
            target: {key: _group(specs) for key, specs in sorted(launches.items())}
            for target, launches in sorted(self.by_target.items())
        }
        payload = {"fingerprint": self.fingerprint, "specializations": dict(sorted(self.described.items())),
                   "launches": grouped}
        write_atomic(path, json.dumps(payload, indent=1, sort_keys=True))


def read_table(path: Path, fingerprint: str) -> SpecializationTable:
    """The stored table if it was made under this fingerprint, else an empty one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return SpecializationTable(fingerprint)
    if not isinstance(data, dict) or data.get("fingerprint") != fingerprint:
        return SpecializationTable(fingerprint)
    try:
        by_target = {
            target: {key: {str(cid): str(spec) for spec, cids in groups.items() for cid in cids}
                     for key, groups in launches.items()}
            for target, launches in data.get("launches", {}).items()
        }
        return SpecializationTable(fingerprint, {str(k): str(v) for k, v in data.get("specializations", {}).items()},
                                   by_target)
    except (AttributeError, TypeError, ValueError):  # not a table this version wrote: capture again
        print(f"aot_tune: {path} is not a specialization table; its launches are captured again",
              file=sys.__stderr__, flush=True)
        return SpecializationTable(fingerprint)


def _group(specs: dict[str, str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for config_id, spec_id in sorted(specs.items()):
        grouped.setdefault(spec_id, []).append(config_id)
    return grouped


def _dtype_text(dtype: Any) -> str:
    if isinstance(dtype, dict):
        return "{" + ", ".join(f"{arg}: {str(d).removeprefix('torch.')}" for arg, d in dtype.items()) + "}"
    return str(dtype).removeprefix("torch.")
