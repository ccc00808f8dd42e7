"""The frozen records a validated manifest is made of: what every later stage reads.

The rules that build them live in the sibling modules; the defaults here are checked against
docs/reference/tuning-yaml.md by tests/unit/test_docs.py.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aot_tune import dtypes as dtype_facts
from aot_tune.cost import Cost
from aot_tune.dtypes import DtypeCombo
from aot_tune.errors import ManifestError, TuneError, quoted, shorten
from aot_tune.space import Config, ConfigSpace, Constraint, DefaultConfig


@dataclass(frozen=True)
class BenchSettings:
    """How to time one config (passed to the benchmark backend)."""

    warmup_ms: float
    rep_ms: float
    l2_flush: bool
    l2_flush_bytes: int | None  # None: twice the device's L2
    #: Seconds a device worker may go without progress before its config is recorded as a
    #: timeout; None: derived (aot_tune.pipeline.streaming.bench_timeout). Decides no measurement,
    #: so it is not part of any fingerprint.
    timeout_s: float | None = None

    def screening(self, share: float) -> "BenchSettings":
        """A screening timing's settings, ``share`` (< 1) of a full one: its warm-up scaled with
        its timed launches (the kernel was just checked and probed). Unscaled, the whole GEMM
        benchmark's 2.2 ms screenings each paid about 2.6 ms of warm-up on the device."""
        if share >= 1:
            return self
        return replace(self, warmup_ms=self.warmup_ms * share, rep_ms=self.rep_ms * share)

    def measured_fields(self) -> dict:
        """The settings that decide a measurement (what fingerprints cover)."""
        return {"warmup_ms": self.warmup_ms, "rep_ms": self.rep_ms, "l2_flush": self.l2_flush,
                "l2_flush_bytes": self.l2_flush_bytes}


STRATEGIES = ("exhaustive", "random", "successive_halving", "surrogate", "ranked")
#: The search keys each strategy takes (``strategy`` itself aside).
STRATEGY_KEYS: dict[str, tuple[str, ...]] = {
    "exhaustive": (),
    "random": ("budget", "seed"),
    "successive_halving": ("budget", "seed", "transfer", "eta", "rungs"),
    "surrogate": ("budget", "seed", "transfer"),
    "ranked": ("budget",),
}
#: Strategies that stop on their own, so a budget only caps them further (the others need one).
BUDGET_OPTIONAL = ("ranked",)


@dataclass(frozen=True)
class SearchSettings:
    """How the bench stage searches one shape's configs (aot_tune.search.strategies); the budget is per shape."""

    strategy: str = "exhaustive"
    budget_configs: int | None = None
    budget_seconds: float | None = None
    seed: int = 0
    transfer: bool = True
    eta: int = 3
    rungs: int = 3

    @property
    def exhaustive(self) -> bool:
        return self.strategy == "exhaustive"

    def canonical(self) -> dict[str, Any]:
        """The settings this strategy takes: what its fingerprint covers and its records name."""
        out: dict[str, Any] = {"strategy": self.strategy}
        for key in STRATEGY_KEYS[self.strategy]:
            if key == "budget":
                if self.budget_configs is not None:
                    out["budget"] = {"configs": self.budget_configs}
                elif self.budget_seconds is not None:
                    out["budget"] = {"seconds": self.budget_seconds}
            else:
                out[key] = getattr(self, key)
        return out

    def describe(self, origin: str = "") -> str:
        """One line for progress output, e.g. ``surrogate, 40 configs per shape``; ``origin`` follows
        the strategy's name (where a ranked search's ranking came from)."""
        if self.budget_configs is None and self.budget_seconds is None:
            return self.strategy + origin
        budget = (f"{self.budget_configs} configs" if self.budget_configs is not None
                  else f"{self.budget_seconds:g} s")
        return f"{self.strategy}{origin}, {'at most ' * (self.strategy in BUDGET_OPTIONAL)}{budget} per shape"


@dataclass(frozen=True)
class ExportSpec:
    """One ``exports:`` item: a table written in a library's own format (aot_tune.exports)."""

    to: str  # "json", or "module:function" of the project's own exporter
    path: str  # a template over {kernel}, {device}, {device_name}, {dtype}, {triton} and the key dims
    line: int


@dataclass(frozen=True)
class KernelSpec:
    """One kernel's validated entry; paths are relative to the manifest folder."""

    name: str
    kernel: str
    launch: str
    inputs: str
    reference: str | None  # None: outputs are checked against the default (else first) config's
    key: tuple[str, ...]
    space: ConfigSpace
    shapes: tuple[tuple[int, ...], ...]
    interpreter_shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    bench: BenchSettings
    targets: tuple[str, ...]
    cache: str
    generated: str
    line: int
    default_config: DefaultConfig | None = None  # what the kernel runs untuned: a baseline
    vendor: str | None = None  # the vendor implementation (module:attr, reference's signature): a baseline
    cost: Cost | None = None  # FLOPs and bytes of a shape, for rates and floors in reports
    compile_cost: Constraint | None = None  # a config's relative compile time: orders the compile queue
    search: SearchSettings = SearchSettings()
    devices: tuple[str, ...] = ()  # device keys it ships tables for: `doit check` flags those without one
    dtype_combos: tuple[DtypeCombo, ...] = ()  # the combinations the manifest declares (some may be unused)
    tolerance: tuple[tuple[str, float], ...] = ()  # the manifest's overrides of dtype_facts.TOLERANCE
    exports: tuple[ExportSpec, ...] = ()  # the tables in libraries' formats, written with the generated module
    #: Dims the shapes name beyond the key (rows, tokens): the inputs, constraints and costs see
    #: them, the tables are keyed without them. Shapes hold ``key`` values, then these.
    bench_dims: tuple[str, ...] = ()
    key_line: int = 0  # where `key:` and the space (`space:` or `configs:`) are: what a stale record names
    space_line: int = 0
    #: The manifest as the user named it, and the line of each ``module:attr`` field (kernel,
    #: launch, inputs, reference, vendor): errors found after loading (a module that is not
    #: there) name the line, as the manifest's own do.
    manifest: str = "tuning.yaml"
    ref_lines: tuple[tuple[str, int], ...] = ()

    def reference_error(self, ref: str, problem: str, fix: str) -> TuneError:
        """An error about one of this entry's ``module:attr`` references, at its manifest line."""
        for name, line in self.ref_lines:
            if getattr(self, name) == ref:
                return ManifestError(self.manifest, line, f"kernels.{self.name}.{name}", problem, fix)
        return TuneError(f"{problem} (from '{shorten(ref)}' in the manifest); fix: {fix}")

    @property
    def module_refs(self) -> tuple[str, ...]:
        """The ``module:attr`` a worker imports to launch, feed and check the kernel (kernel,
        launch, inputs, and the reference where there is one)."""
        return tuple(ref for ref in (self.kernel, self.launch, self.inputs, self.reference) if ref)

    @property
    def dims(self) -> tuple[str, ...]:
        """Every dim a shape names: the key dims, then the bench dims."""
        return self.key + self.bench_dims

    def key_of(self, shape: Sequence) -> tuple:
        """A shape's key values: what its record and table entry are keyed by."""
        return tuple(shape[: len(self.key)])

    def bench_of(self, shape: Sequence) -> tuple[tuple[str, object], ...]:
        """A shape's bench dims as ``((name, value), ...)``."""
        return tuple(zip(self.bench_dims, shape[len(self.key):], strict=True))

    @property
    def combos(self) -> dict[str, DtypeCombo]:
        return {c.name: c for c in self.dtype_combos}

    def combo_args(self, dtype: str) -> tuple[tuple[str, str], ...]:
        """A combination's (argument, dtype) pairs; () for a plain dtype."""
        combo = self.combos.get(dtype)
        return combo.args if combo else ()

    @property
    def combo_table(self) -> dict[str, tuple[tuple[str, str], ...]]:
        """The combinations as generated modules hold them: name -> ((argument, dtype), ...)."""
        return {c.name: c.args for c in self.dtype_combos}

    @property
    def combo_pairs(self) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
        """The combinations as requests to workers carry them (aot_tune.build.loading.Combos)."""
        return tuple((c.name, c.args) for c in self.dtype_combos)

    def tolerance_for(self, dtype: str) -> float:
        return dtype_facts.tolerance(dtype, self.combos, dict(self.tolerance))

    def dtypes_for(self, backend: str) -> tuple[str, ...]:
        """The dtypes a backend measures: the interpreter skips those it cannot compute (fp8, bfloat16)."""
        if backend != "interpreter":
            return self.dtypes
        return tuple(d for d in self.dtypes if dtype_facts.interpreter_runs(d, self.combos))

    def shapes_for(self, backend: str) -> tuple[tuple[int, ...], ...]:
        """The shapes a backend tunes: the small ``interpreter_shapes`` on the CPU interpreter."""
        return self.interpreter_shapes if backend == "interpreter" else self.shapes

    def check_config(self, shape: Sequence[int]) -> Config | None:
        """Without a ``reference``, the config whose output every config's is checked against on
        this shape: the ``default_config``, else the shape's first candidate."""
        if self.reference is not None:
            return None
        named = self.shape_dict(shape)
        return self.default_config.resolve(named) if self.default_config else self.space.configs_for(named)[0]

    def shape_dict(self, shape: Sequence[int]) -> dict[str, int]:
        """``(256, 512, 64)`` -> ``{"M": 256, "N": 512, "K": 64}`` in ``dims`` order."""
        if len(shape) != len(self.dims):
            raise ValueError(
                f"kernel {quoted(self.name)}: shape {tuple(shape)} has {len(shape)} dims, {self.dims} are "
                f"{len(self.dims)}"
            )
        return dict(zip(self.dims, shape, strict=True))


@dataclass(frozen=True)
class Manifest:
    """The whole validated manifest."""

    path: Path
    root: Path
    kernels: tuple[KernelSpec, ...]

    def kernel(self, name: str) -> KernelSpec:
        """The kernel called ``name``; a TuneError listing known names if none."""
        for spec in self.kernels:
            if spec.name == name:
                return spec
        raise TuneError(self._unknown(name))

    def select(self, names: Sequence[str]) -> tuple[KernelSpec, ...]:
        """Kernels named on the command line, in that order (all when empty)."""
        if not names:
            return self.kernels
        return tuple(self.kernel(n) for n in dict.fromkeys(names))

    def _unknown(self, name: str) -> str:
        known = [k.name for k in self.kernels]
        msg = f"unknown kernel {quoted(name)} (known: {', '.join(known) or 'none'})"
        close = difflib.get_close_matches(name, known, n=1)
        return f"{msg}; did you mean {quoted(close[0])}?" if close else msg


@dataclass(frozen=True)
class Defaults:
    """Values a kernel inherits unless it overrides them."""

    dtypes: tuple[str, ...] = ("float16",)
    targets: tuple[str, ...] = ("sm80", "sm90")
    bench: BenchSettings = BenchSettings(warmup_ms=2.0, rep_ms=20.0, l2_flush=True, l2_flush_bytes=None)
    cache: str = "generated/{kernel}.tuning.pb"
    generated: str = "generated/{kernel}.py"
    search: SearchSettings = SearchSettings()
    devices: tuple[str, ...] = ()
    dtype_combos: tuple[DtypeCombo, ...] = ()
    tolerance: tuple[tuple[str, float], ...] = ()
    exports: tuple[ExportSpec, ...] = ()
