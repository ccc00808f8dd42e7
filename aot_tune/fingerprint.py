"""Fingerprints: hashes of every input that decides a task's result (a measurement, its
baselines, the toolchain), over the source closures of aot_tune.sources; like those, computed
without importing torch or triton.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from aot_tune.sources import SourceIndex, UnresolvedReference, digest

if TYPE_CHECKING:
    from aot_tune.manifest import KernelSpec
    from aot_tune.space import Config

#: Bump when the meaning of a record changes, so every record is re-measured once.
RECORD_FORMAT = 2

@dataclass(frozen=True)
class Toolchain:
    """The triton and torch versions a run compiles and measures with, and the environment pinned
    for Triton's cache key (aot_tune.triton_compat.PINNED_ENV): part of every compile's fingerprint."""

    triton: str
    torch: str
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def installed(cls) -> "Toolchain":
        from aot_tune.triton_compat import PINNED_ENV, versions

        found = versions()
        return cls(found["triton"], found["torch"], tuple(sorted(PINNED_ENV.items())))

    def as_dict(self) -> dict[str, str]:
        """The form fingerprints hash (unchanged since records began: keep it so)."""
        return {"triton": self.triton, "torch": self.torch, **dict(self.env)}


@dataclass(frozen=True)
class MeasuredOn:
    """The device and toolchain a measurement's fingerprint names (a record stores them too)."""

    key: str
    name: str
    compute_capability: str
    backend: str
    triton: str
    torch: str


def measured_code(sources: SourceIndex, spec: "KernelSpec") -> str:
    """Hash of the source that decides a measurement: the kernel and its launch function, and the
    input builder and reference that decide what is measured and what counts as correct."""
    return measured_dependencies(sources, spec)[0]


def measured_dependencies(sources: SourceIndex, spec: "KernelSpec") -> tuple[str, dict[str, str]]:
    """``measured_code`` and the pieces it covers, each with its digest (kept in every record)."""
    return spec_closure(sources, spec, list(spec.module_refs))


def spec_closure(sources: SourceIndex, spec: "KernelSpec", refs: list[str], with_lines: bool = False,
                 signatures: Iterable[str] = ()) -> tuple[str, dict[str, str]]:
    """``SourceIndex.closure_parts`` of a kernel entry's references: one that cannot be found is
    an error at its line of the manifest."""
    try:
        return sources.closure_parts(refs, with_lines, signatures)
    except UnresolvedReference as err:
        raise spec.reference_error(err.ref, err.problem, err.fix) from None


def bench_fingerprint(spec: "KernelSpec", code: str, shape: tuple[int, ...], dtype: str, on: MeasuredOn) -> str:
    """Everything that decides each config's measurement for one (kernel, shape, dtype) on one
    device, and for a budgeted search its strategy and settings (exhaustive adds nothing, so its
    fingerprints are those of records made before strategies existed). The config space is not
    part of it: a record lists the configs it measured (by stable id), so adding a config
    measures only that config and removing one only re-picks; a budgeted record names the
    candidates it searched, and a change of them reruns its search (aot_tune.search.strategies.covers)."""
    from aot_tune.triton_compat import PINNED_ENV

    toolchain = {"triton": on.triton, "torch": on.torch, **PINNED_ENV}
    strategy = () if spec.search.exhaustive else (spec.search.canonical(),)
    # A combination's argument dtypes and a tolerance the manifest sets (neither existed before,
    # so older records keep their fingerprints).
    overrides = dict(spec.tolerance)
    dtype_parts = ((spec.combo_args(dtype),) if spec.combo_args(dtype) else ()) + \
        ((("tolerance", overrides[dtype]),) if dtype in overrides else ())
    return digest("bench", RECORD_FORMAT, code, spec.dims, shape, dtype,
                  spec.bench.measured_fields(), toolchain, on.key, on.name, on.compute_capability, on.backend,
                  spec.reference, spec.inputs, *strategy, *dtype_parts, *_check_config(spec, shape))


def _check_config(spec: "KernelSpec", shape: tuple[int, ...]) -> tuple:
    """Without a reference, the config outputs are checked against decides what passes."""
    config = spec.check_config(shape)
    return () if config is None else ({"check_config": config.as_dict()},)


def baselines_fingerprint(spec: "KernelSpec", vendor_code: str, bench_fp: str, default_config: "Config | None") -> str:
    """What decides the baselines of one bench unit: everything its configs' fingerprint covers
    (the default config runs the kernel), the resolved default config, and the vendor function's
    source. Kept apart from the bench fingerprint, so declaring or changing a baseline measures
    the baselines alone, and records made before baselines existed keep their measurements."""
    if default_config is None and not spec.vendor:
        return ""
    return digest("baselines", RECORD_FORMAT, bench_fp, default_config.params if default_config else None,
                  spec.vendor or "", vendor_code)
