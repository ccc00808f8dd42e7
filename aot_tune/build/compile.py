"""Builder: AOT-compile one config of one kernel for one GPU target, and judge its validity.

A compile runs the kernel's own launch function on ``meta`` tensors for a representative
(shape, dtype) of one specialization (see specialize.py), so Triton compiles exactly what a real
launch of any shape of that specialization will look up, into the Triton cache directory the
bench stage shares. Runs in compile worker processes (see executors.py); nothing here needs a GPU.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, TypeVar, get_args

from aot_tune import triton_compat
from aot_tune.build.loading import Combos, autotuned_launch, input_dtype, load_kernel_module_attrs
from aot_tune.runtime.forcing import launch_with_config
from aot_tune.space import Constraint

T = TypeVar("T")

#: What a compile can end in: ok, or a typed failure the bench stage never measures.
CompileStatus = Literal["ok", "shared_memory", "ptxas_error", "compile_assertion", "compile_error",
                        "out_of_resources", "launch_error", "crashed", "timeout"]
INVALID_REASONS = get_args(CompileStatus)[1:]


def compile_time_estimate(params: dict, declared: Constraint | None = None) -> tuple[float, float]:
    """A relative compile cost, to start the slowest compiles first (longest-first keeps a pool's
    tail short): the kernel's declared ``compile_cost`` expression, then the product of the
    integer params over ``num_warps`` (big tiles, deep pipelines and few warps compile slowest)
    for ties and for kernels that declare none. Only the order of compiles depends on this."""
    generic = 1.0
    for name, value in params.items():
        if isinstance(value, int) and not isinstance(value, bool) and name not in ("num_warps", "num_ctas", "maxnreg"):
            generic *= max(value, 1)
    generic /= max(params.get("num_warps", 4), 1)
    return (float(declared.evaluate(params)) if declared is not None else generic), generic


#: How a kernel's compile seconds follow its configs' estimates where none is recorded: as the
#: estimate to this power. Compiled one at a time on a 2-core CPU, a log-log fit over each of this
#: repository's kernels' spaces gave 0.14 for vector_add, 0.16 rmsnorm, 0.33 softmax and 0.41
#: gemm; in a run the spread is flatter (fla-core's l2norm: the third of its configs estimated
#: smallest took 0.29 s against 0.35 s for the largest, where 0.25 predicted 2.2x between them),
#: and with 0.25 the compile stage's progress line, pacing the small configs by the large ones
#: that finish first, read 7-52% short (docs/bench-log.md, 2026-11-29 evening).
ESTIMATE_POWER = 0.1


def compile_weight(estimate: float) -> float:
    """A config's estimate (``compile_time_estimate``) as a share of its kernel's compile seconds
    (the estimate to ``ESTIMATE_POWER``)."""
    return max(estimate, 1e-9) ** ESTIMATE_POWER


def expected_compile_seconds(estimates: Sequence[tuple[float, float]], recorded: Sequence[float | None],
                             typical_s: float = 1.0) -> list[float]:
    """Each unit's expected compile seconds. A unit compiled before (under an older kernel or
    toolchain, say) is expected to take its recorded seconds; the others their estimate
    (``compile_time_estimate``), put in seconds by the median seconds-per-estimate of the units
    that have both. Where none has, the units take ``typical_s`` on average, spread by their
    estimates to the power ``ESTIMATE_POWER``: the estimate ranks compiles, it does not measure
    them (this repository's rmsnorm space spans 128x in estimate and 3x in seconds)."""
    ratios = sorted(s / e[0] for s, e in zip(recorded, estimates) if s is not None and e[0] > 0)
    if not ratios:
        spread = [compile_weight(e[0]) for s, e in zip(recorded, estimates) if s is None]
        mean = sum(spread) / len(spread) if spread else 1.0
        return [s if s is not None else typical_s * compile_weight(e[0]) / mean
                for s, e in zip(recorded, estimates)]
    scale = ratios[len(ratios) // 2]
    return [s if s is not None else e[0] * scale for s, e in zip(recorded, estimates)]


def longest_first(items: Sequence[T], estimate: Callable[[T], tuple[float, float]],
                  recorded: Callable[[T], float | None]) -> list[T]:
    """``items`` in decreasing expected compile time (``expected_compile_seconds``), so the
    recorded and the estimated units interleave where they belong; expected alike, the larger
    estimate first. Ties keep the input order."""
    estimates = [estimate(item) for item in items]
    seconds = [recorded(item) for item in items]
    expected = expected_compile_seconds(estimates, seconds)
    keys = [(x, 0.0, 0.0) if s is not None else (x, *e) for x, s, e in zip(expected, seconds, estimates)]
    order = sorted(range(len(items)), key=lambda i: tuple(-k for k in keys[i]) + (i,))
    return [items[i] for i in order]


@dataclass(frozen=True)
class CompileRequest:
    """Everything a worker needs; plain data so it pickles into a spawned process."""

    kernel: str
    root: str
    kernel_ref: str
    launch_ref: str
    inputs_ref: str
    config: dict
    target: str
    shapes: tuple[dict, ...]
    dtypes: tuple[str, ...]
    combos: Combos = ()  # the manifest's dtype combinations the dtypes may name


@dataclass
class CompileResult:
    """Outcome of compiling one (kernel, config, target) for the launches of the request."""

    kernel: str
    config_id: str
    target: str
    status: CompileStatus = "ok"
    message: str = ""
    seconds: float = 0.0
    shared_bytes: int = 0
    specializations: list[str] = field(default_factory=list)  # Triton kernel hashes
    cache_hits: int = 0
    cache_misses: int = 0
    # Per thread, read from the cubin; None with resources_unknown saying why (e.g. no cubin made).
    registers: int | None = None
    spills: int | None = None
    stack_bytes: int | None = None
    local_bytes: int | None = None
    resources_unknown: str = ""
    # Seconds per lowering stage (ttir, ttgir, llir, ptx, cubin), the TTGIR's shared-memory lower
    # bound, and the stage after which a config over the limit was stopped ("" if none was).
    stage_seconds: dict[str, float] = field(default_factory=dict)
    ttgir_shared_bound: int = 0
    rejected_at: str = ""

    @property
    def valid(self) -> bool:
        return self.status == "ok"


@dataclass
class CompileRecord:
    """A compile task's durable output (``.aot_tune/compile/<kernel>/<target>/<spec>/<config>.json``):
    its result, under the fingerprint it was made for, with the launches it serves. The one
    writer and reader of that file (the plan, the compile queue and the report read it)."""

    fingerprint: str
    config: dict
    specialization: str
    launches: list[str]
    result: CompileResult

    def to_json(self) -> str:
        payload = {"fingerprint": self.fingerprint, "config": self.config, **asdict(self.result),
                   "specialization": self.specialization, "launches": self.launches}
        return json.dumps(payload, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "CompileRecord | None":
        """The record, or None for a file that is not one (torn, foreign, another version)."""
        try:
            data = json.loads(text)
            fields = CompileResult.__dataclass_fields__
            result = CompileResult(**{k: v for k, v in data.items() if k in fields})
            return cls(str(data["fingerprint"]), dict(data.get("config") or {}), str(data.get("specialization", "")),
                       list(data.get("launches") or []), result)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    @classmethod
    def read(cls, path: Path) -> "CompileRecord | None":
        try:
            return cls.from_json(path.read_text())
        except OSError:
            return None


def read_compile_result(output: Path, fingerprint: str) -> CompileResult | None:
    """The compile result at ``output`` if it was written under ``fingerprint``."""
    record = CompileRecord.read(output)
    return record.result if record is not None and record.fingerprint == fingerprint else None


def recorded_compile_seconds(output: Path) -> float | None:
    """How long the compile at ``output`` took last, under any fingerprint (an edited kernel or a new
    toolchain changes a compile's time far less than its config does); None if never compiled."""
    record = CompileRecord.read(output)
    if record is None:
        return None
    seconds = record.result.seconds
    return float(seconds) if isinstance(seconds, (int, float)) and seconds >= 0 else None


def compile_config(request: CompileRequest, config_id: str, *, stop_early: bool = True) -> CompileResult:
    """Compile every specialization of one config for one target; never raises for kernel faults.
    A config whose shared memory is proven over the target's limit stops at the first stage that
    proves it (after ttgir from a lower bound, after llir exactly); ``stop_early=False`` lowers it
    all the way (to profile the stages, or to check the early verdicts against the full ones)."""
    triton_compat.pin_environment()
    result = CompileResult(request.kernel, config_id, request.target)
    kernel_fn, launch, make_inputs, provided = load_kernel_module_attrs(
        request.root, request.kernel_ref, request.launch_ref, request.inputs_ref)
    arch = triton_compat.parse_target(request.target)
    limit = triton_compat.shared_memory_limit(arch)
    counter = triton_compat.CacheHitCounter()
    stages = triton_compat.StageLog()
    refused = autotuned_launch(request.kernel, request.kernel_ref, request.launch_ref)
    start = time.perf_counter()
    try:
        with counter.installed(), triton_compat.target_driver(arch), \
                triton_compat.watched_stages(arch, limit if stop_early else sys.maxsize) as stages, \
                triton_compat.autotuners_refused(kernel_fn, refused), \
                triton_compat.compile_instead_of_launch(kernel_fn) as captured:
            for shape in request.shapes:
                for dtype in request.dtypes:
                    inputs = make_inputs(dict(shape), dtype if provided else input_dtype(dtype, request.combos),
                                         "meta")
                    launch_with_config(launch, inputs, request.config, kernel=request.kernel, hooks=False)
    except Exception as exc:  # a kernel fault is a result, not a crash of the pipeline
        reason = triton_compat.compile_error_kind(exc)
        result.status = reason or "launch_error"
        result.message = _one_line(exc) if reason else _short_traceback(exc)
        if isinstance(exc, triton_compat.SharedMemoryExceeded):
            result.shared_bytes = exc.shared
            result.rejected_at = exc.proven_at
            at_least = "at least " if exc.proven_at != "llir" else ""
            result.message = f"needs {at_least}{exc.shared} bytes of shared memory, {request.target} allows {limit}"
    result.seconds = time.perf_counter() - start
    result.stage_seconds = {name: round(seconds, 4) for name, seconds in stages.seconds.items()}
    result.ttgir_shared_bound = stages.ttgir_shared_bound
    result.cache_hits, result.cache_misses = counter.hits, counter.misses
    if result.status == "ok":
        result.specializations = sorted({c.hash for c in captured})
        result.shared_bytes = max((c.shared for c in captured), default=0)
        if result.shared_bytes > limit:  # a pipeline without an llir stage is checked here
            result.status = "shared_memory"
            result.message = f"needs {result.shared_bytes} bytes of shared memory, {request.target} allows {limit}"
        _record_resources(result, captured)
        for launcher_of in {c.hash: c for c in captured}.values():
            triton_compat.prebuild_launcher(launcher_of.kernel)  # after the timing: not the compile's
    else:
        result.resources_unknown = f"no cubin: the compile stopped ({result.status})"
    return result


def _record_resources(result: CompileResult, captured: list[triton_compat.CapturedCompile]) -> None:
    """Registers and spills of the compiled cubin (the largest over the request's launches)."""
    usages = []
    for compiled in captured:
        if compiled.cubin is None:
            result.resources_unknown = "no cubin in the compile output"
            return
        usage = triton_compat.resource_usage(compiled.cubin, compiled.name)
        if isinstance(usage, str):
            result.resources_unknown = usage
            return
        usages.append(usage)
    if not usages:
        result.resources_unknown = "nothing was compiled"
        return
    result.registers = max(u.registers for u in usages)
    result.spills = max(u.spills for u in usages)
    result.stack_bytes = max(u.stack_bytes for u in usages)
    result.local_bytes = max(u.local_bytes for u in usages)


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:500]


def _short_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()[:500]


class CompileHistory:
    """The compile outputs one kernel's earlier runs left (any fingerprint, any specialization),
    read on first use: what a (target, config) took and whether it compiled."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._paths: dict[str, dict[str, list[Path]]] = {}  # target -> config id -> outputs
        self._records: dict[Path, CompileRecord | None] = {}

    def records(self, target: str, config_id: str) -> list[CompileRecord]:
        if target not in self._paths:
            found: dict[str, list[Path]] = {}
            for spec in _folders(self.folder / target):
                for entry in os.scandir(spec):
                    if entry.name.endswith(".json"):
                        found.setdefault(entry.name[:-5], []).append(Path(entry.path))
            self._paths[target] = found
        for path in self._paths[target].get(config_id, ()):
            if path not in self._records:
                self._records[path] = CompileRecord.read(path)
        return [r for r in (self._records[p] for p in self._paths[target].get(config_id, ())) if r is not None]

    def seconds(self, target: str, config_id: str) -> float | None:
        """The median seconds this config's compiles for ``target`` took, or None if never compiled."""
        seconds = [float(r.result.seconds) for r in self.records(target, config_id)]
        return statistics.median(seconds) if seconds else None

    def invalid(self, targets: Iterable[str], config_id: str) -> bool:
        """Whether the config failed to compile for the targets a bench needs, every time it was compiled."""
        results = [r.result for t in targets for r in self.records(t, config_id)]
        return bool(results) and not any(r.valid for r in results)


def _folders(path: Path) -> list[str]:
    try:
        return [entry.path for entry in os.scandir(path) if entry.is_dir()]
    except OSError:
        return []
