"""Parse and validate ``tuning.yaml`` into frozen, typed records.

Every mistake a user can make in the manifest raises :class:`ManifestError`
with the file, the 1-based line, the dotted key path and a fix, e.g.::

    tuning.yaml:12: kernels.gemm.space.BLOCK_M: expected a non-empty list, got 64; fix: write BLOCK_M: [64]

This module must not import torch or triton: the doit loader imports it on
every invocation, so it has to load in a few milliseconds.

The schema and its rules are documented once, in docs/reference/tuning-yaml.md
(its defaults are checked against :class:`Defaults` and :class:`SearchSettings`
by tests/unit/test_docs.py).
"""

from __future__ import annotations

import difflib
import itertools
import json
import keyword
import math
import os
import posixpath
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

import yaml

from aot_tune.errors import ManifestError, TuneError
from aot_tune.cost import COST_NAMES, DTYPE_BYTES, Cost
from aot_tune.space import FUNCTIONS, LAUNCH_OPTIONS, ConfigSpace, Constraint, ConstraintError, DefaultConfig, parse_constraint

__all__ = ["BenchSettings", "KernelSpec", "Manifest", "SearchSettings", "load_manifest"]


# --------------------------------------------------------------------------- #
# Records
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class BenchSettings:
    """How to time one config (passed to the benchmark backend)."""

    warmup_ms: float
    rep_ms: float
    l2_flush: bool
    l2_flush_bytes: int | None  # None: twice the device's L2


STRATEGIES = ("exhaustive", "random", "successive_halving", "surrogate")
#: The search keys each strategy takes (``strategy`` itself aside).
STRATEGY_KEYS: dict[str, tuple[str, ...]] = {
    "exhaustive": (),
    "random": ("budget", "seed"),
    "successive_halving": ("budget", "seed", "transfer", "eta", "rungs"),
    "surrogate": ("budget", "seed", "transfer"),
}


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
                out["budget"] = ({"configs": self.budget_configs} if self.budget_configs is not None
                                 else {"seconds": self.budget_seconds})
            else:
                out[key] = getattr(self, key)
        return out

    def describe(self) -> str:
        """One line for progress output, e.g. ``surrogate, 40 configs per shape``."""
        if self.exhaustive:
            return "exhaustive"
        budget = (f"{self.budget_configs} configs" if self.budget_configs is not None
                  else f"{self.budget_seconds:g} s")
        return f"{self.strategy}, {budget} per shape"


@dataclass(frozen=True)
class KernelSpec:
    """One kernel's validated entry; paths are relative to the manifest folder."""

    name: str
    kernel: str
    launch: str
    inputs: str
    reference: str
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

    def shapes_for(self, backend: str) -> tuple[tuple[int, ...], ...]:
        """The shapes a backend tunes: the small ``interpreter_shapes`` on the CPU interpreter."""
        return self.interpreter_shapes if backend == "interpreter" else self.shapes

    def shape_dict(self, shape: Sequence[int]) -> dict[str, int]:
        """``(256, 512, 64)`` -> ``{"M": 256, "N": 512, "K": 64}`` in key order."""
        if len(shape) != len(self.key):
            raise ValueError(
                f"kernel {self.name!r}: shape {tuple(shape)} has {len(shape)} dims, key {self.key} has {len(self.key)}"
            )
        return dict(zip(self.key, shape, strict=True))


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
        msg = f"unknown kernel {name!r} (known: {', '.join(known) or 'none'})"
        close = difflib.get_close_matches(name, known, n=1)
        return f"{msg}; did you mean {close[0]!r}?" if close else msg


# --------------------------------------------------------------------------- #
# Line-tracking YAML loader
# --------------------------------------------------------------------------- #


class _Map(dict):
    """A YAML mapping that remembers the line of each key and value.

    Duplicate keys are recorded instead of raised: the validator knows the
    dotted key path, the loader does not.
    """

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.key_lines: dict[Any, int] = {}
        self.value_lines: dict[Any, int] = {}
        self.duplicates: list[tuple[Any, int, int]] = []  # (key, line, first line)


class _Seq(list):
    """A YAML sequence that remembers the line of each item."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.item_lines: list[int] = []


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that builds _Map/_Seq so errors can point at lines."""


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _construct_key(loader: _LineLoader, node: yaml.MappingNode, key_node: yaml.Node) -> Any:
    key = loader.construct_object(key_node, deep=True)
    try:
        hash(key)
    except TypeError:
        raise yaml.constructor.ConstructorError(
            "while constructing a mapping", node.start_mark, "found unhashable key", key_node.start_mark
        ) from None
    return key


def _record_duplicates(loader: _LineLoader, node: yaml.MappingNode, out: _Map) -> None:
    """Find keys written twice in this mapping (merge keys ``<<`` excluded)."""
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = _construct_key(loader, node, key_node)
        if key in first:
            out.duplicates.append((key, _line(key_node), first[key]))
        else:
            first[key] = _line(key_node)


def _construct_map(loader: _LineLoader, node: yaml.MappingNode):
    out = _Map(_line(node))
    yield out
    _record_duplicates(loader, node, out)
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = _construct_key(loader, node, key_node)
        out[key] = loader.construct_object(value_node, deep=False)
        out.key_lines[key] = _line(key_node)
        out.value_lines[key] = _line(value_node)


def _construct_seq(loader: _LineLoader, node: yaml.SequenceNode):
    out = _Seq(_line(node))
    yield out
    for child in node.value:
        out.append(loader.construct_object(child, deep=False))
        out.item_lines.append(_line(child))


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


# --------------------------------------------------------------------------- #
# Generic checks
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class _Ctx:
    """The path to show in errors (as the user gave it)."""

    shown: str

    def fail(self, line: int | None, key: str, problem: str, fix: str) -> NoReturn:
        raise ManifestError(self.shown, line, key, problem, fix)


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _is_ident(v: Any) -> bool:
    return isinstance(v, str) and _IDENT.fullmatch(v) is not None and not keyword.iskeyword(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_pow2(v: Any) -> bool:
    return _is_int(v) and v > 0 and v & (v - 1) == 0


def _describe(v: Any) -> str:
    """Show a YAML value the way the user wrote it (roughly)."""
    if v is None:
        return "nothing (null)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    return repr(v)


def _as_yaml(v: Any) -> str:
    """A scalar as it could be written back into the YAML file."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str) and re.fullmatch(r"[A-Za-z_][\w.\-]*", v):
        return v
    return json.dumps(v) if isinstance(v, (str, int, float)) else "..."


def _join(key: str, part: Any) -> str:
    return f"{key}.{part}" if key else str(part)


def _leaf(key: str) -> str:
    return re.sub(r"\[\d+\]$", "", key.rsplit(".", 1)[-1])


def _did_you_mean(word: Any, options: Iterable[str]) -> str:
    options = list(options)
    same_case = [o for o in options if o.lower() == str(word).lower()]
    close = same_case or difflib.get_close_matches(str(word), options, n=1)
    return f"did you mean {close[0]!r}?" if close else ""


def _mapping(
    ctx: _Ctx, value: Any, key: str, line: int, allowed: Sequence[str] | None = None, required: Sequence[str] = ()
) -> _Map:
    """Check a mapping: its type, duplicate keys, string keys, unknown and missing keys."""
    if not isinstance(value, _Map):
        ctx.fail(
            line,
            key,
            f"expected a mapping, got {_describe(value)}",
            f"write '{_leaf(key)}:' followed by indented 'name: value' lines",
        )
    for dup, dup_line, first_line in value.duplicates:
        ctx.fail(
            dup_line,
            _join(key, dup),
            f"duplicate key {dup!r} (first at line {first_line})",
            "keep only one of them (YAML would silently use the last)",
        )
    for k in value:
        if not isinstance(k, str):
            ctx.fail(value.key_lines[k], key, f"keys must be strings, got {_describe(k)}", f'quote the key: "{k}":')
        if allowed is not None and k not in allowed:
            _unknown_key(ctx, value, key, k, allowed)
    for r in required:
        if r not in value:
            ctx.fail(line, _join(key, r), f"missing required key {r!r}", f"add '{r}:' under {key or 'the top level'}")
    return value


def _unknown_key(ctx: _Ctx, m: _Map, key: str, k: str, allowed: Sequence[str]) -> NoReturn:
    listing = ", ".join(allowed)
    fix = _did_you_mean(k, allowed) or f"remove it or use one of: {listing}"
    ctx.fail(m.key_lines[k], _join(key, k), f"unknown key {k!r} (allowed: {listing})", fix)


def _list(ctx: _Ctx, value: Any, key: str, line: int, example: str, allow_empty: bool = False) -> _Seq:
    """Check a (non-empty) list; a scalar gets the fix ``write P: [v]``."""
    what = "a list" if allow_empty else "a non-empty list"
    if not isinstance(value, _Seq):
        scalar = value is not None and not isinstance(value, (dict, list))
        inner = _as_yaml(value) if scalar else example
        ctx.fail(line, key, f"expected {what}, got {_describe(value)}", f"write {_leaf(key)}: [{inner}]")
    if not value and not allow_empty:
        ctx.fail(line, key, "expected a non-empty list, got []", f"write {_leaf(key)}: [{example}], or remove the key")
    return value


def _string(ctx: _Ctx, value: Any, key: str, line: int, example: str) -> str:
    if not isinstance(value, str) or not value.strip():
        ctx.fail(line, key, f"expected a non-empty string, got {_describe(value)}", f"write {_leaf(key)}: {example}")
    return value


def _number_fix(value: Any) -> str:
    if isinstance(value, str) and re.fullmatch(r"[-+]?[\d.]+[eE][-+]?\d+", value.strip()):
        return "write a plain number such as 1000 or 1.0e+3 (YAML 1.1 reads 1e3 as a string)"
    return "write a number greater than 0, e.g. 25"


def _positive_number(ctx: _Ctx, value: Any, key: str, line: int) -> float:
    if not _is_number(value) or value <= 0:
        ctx.fail(line, key, f"expected a positive number, got {_describe(value)}", _number_fix(value))
    return float(value)


def _positive_int(ctx: _Ctx, value: Any, key: str, line: int, fix: str) -> int:
    if not _is_int(value) or value <= 0:
        ctx.fail(line, key, f"expected a positive integer, got {_describe(value)}", fix)
    return value


# --------------------------------------------------------------------------- #
# Reading
# --------------------------------------------------------------------------- #


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read, parse and validate a manifest; every user mistake is a ManifestError."""
    ctx = _Ctx(os.fspath(path))
    doc = _parse_yaml(ctx, _read_text(ctx))
    top = _top_mapping(ctx, doc)
    absolute = Path(os.path.abspath(ctx.shown))
    return Manifest(path=absolute, root=absolute.parent, kernels=_kernels(ctx, top, absolute.parent))


def _read_text(ctx: _Ctx) -> str:
    try:
        return Path(ctx.shown).read_text(encoding="utf-8")
    except FileNotFoundError:
        ctx.fail(None, "", "file not found", "check the path, or create the manifest (start it with 'version: 1')")
    except IsADirectoryError:
        ctx.fail(None, "", "is a directory, not a manifest file", "pass the path of the YAML file, e.g. tuning.yaml")
    except UnicodeDecodeError as e:
        ctx.fail(None, "", f"not UTF-8 text (bad byte at offset {e.start})", "save the file as UTF-8")
    except OSError as e:
        ctx.fail(None, "", f"cannot read the file ({e.strerror or e})", "check that it exists and is readable")


def _parse_yaml(ctx: _Ctx, text: str) -> Any:
    fix = "correct the YAML at that line (indentation, ':' after keys, matching quotes and brackets)"
    try:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - _LineLoader is a SafeLoader
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        context = e.context or ""
        if e.context and e.context_mark and mark and e.context_mark.line != mark.line:
            context += f" (started at line {e.context_mark.line + 1})"
        problem = " ".join(p for p in (context, e.problem) if p)
        ctx.fail(mark.line + 1 if mark else None, "", f"invalid YAML: {problem}", fix)
    except yaml.YAMLError as e:
        ctx.fail(None, "", f"invalid YAML: {e}".replace("\n", " "), fix)


def _top_mapping(ctx: _Ctx, doc: Any) -> _Map:
    if doc is None:
        ctx.fail(1, "", "the manifest is empty", "start it with 'version: 1' and a 'kernels:' mapping")
    if not isinstance(doc, _Map):
        ctx.fail(
            getattr(doc, "line", 1),
            "",
            f"expected a mapping at the top level, got {_describe(doc)}",
            "write 'version: 1', 'defaults:' and 'kernels:' as top-level keys",
        )
    top = _mapping(ctx, doc, "", doc.line, allowed=("version", "defaults", "kernels"))
    if "version" not in top:
        ctx.fail(top.line, "version", "missing required key 'version'", "add 'version: 1' at the top of the file")
    if not (_is_int(top["version"]) and top["version"] == 1):
        ctx.fail(
            top.value_lines["version"],
            "version",
            f"unsupported version {_describe(top['version'])}",
            "set version: 1 (the only version this aot_tune reads)",
        )
    if "kernels" not in top:
        ctx.fail(
            top.line, "kernels", "missing required key 'kernels'", "add a 'kernels:' mapping of kernel name -> spec"
        )
    return top


# --------------------------------------------------------------------------- #
# Defaults and shared fields
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Defaults:
    """Values a kernel inherits unless it overrides them."""

    dtypes: tuple[str, ...] = ("float16",)
    targets: tuple[str, ...] = ("sm80", "sm90")
    bench: BenchSettings = BenchSettings(warmup_ms=2.0, rep_ms=20.0, l2_flush=True, l2_flush_bytes=None)
    cache: str = "generated/{kernel}.tuning.pb"
    generated: str = "generated/{kernel}.py"
    search: SearchSettings = SearchSettings()


_SHARED_KEYS = ("dtypes", "targets", "bench", "search", "cache", "generated")


def _defaults(ctx: _Ctx, top: _Map) -> Defaults:
    base = Defaults()
    if "defaults" not in top:
        return base
    m = _mapping(ctx, top["defaults"], "defaults", top.key_lines["defaults"], allowed=_SHARED_KEYS)
    return _shared(ctx, m, "defaults", base)


def _shared(ctx: _Ctx, m: _Map, key: str, base: Defaults) -> Defaults:
    """Apply the keys a kernel shares with ``defaults`` over ``base``."""
    changes: dict[str, Any] = {}
    for k in _SHARED_KEYS:
        if k in m:
            sub, line = _join(key, k), m.value_lines[k]
            if k in ("cache", "generated"):
                changes[k] = _template(ctx, m[k], sub, line, k)
            else:
                changes[k] = _SHARED_PARSERS[k](ctx, m[k], sub, line, base)
    return replace(base, **changes)


_DTYPES = {
    "float16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32",
}  # fmt: skip


def _dtypes(ctx: _Ctx, value: Any, key: str, line: int, base: Defaults) -> tuple[str, ...]:
    seq = _list(ctx, value, key, line, "float16")
    out = []
    for i, v in enumerate(seq):
        name = _DTYPES.get(v.lower()) if isinstance(v, str) else None
        if name is None:
            hint = _did_you_mean(str(v).lower(), _DTYPES)
            allowed = "float16, bfloat16, float32 (aliases fp16, half, bf16, fp32, float)"
            ctx.fail(
                seq.item_lines[i],
                f"{key}[{i}]",
                f"unknown dtype {_describe(v)} (allowed: {allowed})",
                hint or "use one of the allowed names",
            )
        out.append(name)
    return tuple(dict.fromkeys(out))


_TARGET = re.compile(r"(?:sm_?)?([1-9][0-9]{1,2})")


def _targets(ctx: _Ctx, value: Any, key: str, line: int, base: Defaults) -> tuple[str, ...]:
    seq = _list(ctx, value, key, line, "sm90")
    out = []
    for i, v in enumerate(seq):
        m = _TARGET.fullmatch(str(v).strip().lower()) if _is_int(v) or isinstance(v, str) else None
        if m is None:
            fix = "write GPU targets as smNN, sm_NN or NN, e.g. sm80 (A100), sm90 (H100), sm100 (B200)"
            ctx.fail(seq.item_lines[i], f"{key}[{i}]", f"unknown target {_describe(v)}", fix)
        out.append(f"sm{m.group(1)}")
    return tuple(dict.fromkeys(out))


_BENCH_KEYS = ("warmup_ms", "rep_ms", "l2_flush", "l2_flush_bytes")


def _bench(ctx: _Ctx, value: Any, key: str, line: int, base: Defaults) -> BenchSettings:
    m = _mapping(ctx, value, key, line, allowed=_BENCH_KEYS)
    changes: dict[str, Any] = {}
    for k in m:
        sub, vline, v = _join(key, k), m.value_lines[k], m[k]
        if k in ("warmup_ms", "rep_ms"):
            changes[k] = _positive_number(ctx, v, sub, vline)
        elif k == "l2_flush":
            if not isinstance(v, bool):
                ctx.fail(vline, sub, f"expected true or false, got {_describe(v)}", "write l2_flush: true (or false)")
            changes[k] = v
        elif v is not None:
            changes[k] = _positive_int(
                ctx, v, sub, vline, "write a byte count such as 52428800, or null for twice the device's L2"
            )
        else:
            changes[k] = None
    return replace(base.bench, **changes)


_SEARCH_KEYS = ("strategy", "budget", "seed", "transfer", "eta", "rungs")
_BUDGETED = ", ".join(s for s in STRATEGIES if s != "exhaustive")


def _search(ctx: _Ctx, value: Any, key: str, line: int, base: Defaults) -> SearchSettings:
    """A search block over the inherited one; keys the resulting strategy does not take are
    errors when written here, and are not inherited from the defaults."""
    if isinstance(value, str):
        ctx.fail(line, key, f"expected a mapping, got {_describe(value)}",
                 f"write {_leaf(key)}: {{strategy: {_as_yaml(value)}, budget: {{configs: 40}}}}")
    m = _mapping(ctx, value, key, line, allowed=_SEARCH_KEYS)
    changes: dict[str, Any] = {}
    for k in m:
        sub, vline, v = _join(key, k), m.value_lines[k], m[k]
        if k == "strategy":
            if v not in STRATEGIES:
                hint = _did_you_mean(v, STRATEGIES) or f"use one of: {', '.join(STRATEGIES)}"
                ctx.fail(vline, sub, f"unknown strategy {_describe(v)} (allowed: {', '.join(STRATEGIES)})", hint)
            changes[k] = v
        elif k == "budget":
            changes.update(_search_budget(ctx, v, sub, vline))
        elif k in ("seed", "eta", "rungs"):
            low = 0 if k == "seed" else 2
            if not _is_int(v) or v < low:
                ctx.fail(vline, sub, f"expected an integer >= {low}, got {_describe(v)}",
                         f"write e.g. {k}: {max(low, 3) if k != 'seed' else 0}")
            changes[k] = v
        else:  # transfer
            if not isinstance(v, bool):
                ctx.fail(vline, sub, f"expected true or false, got {_describe(v)}", "write transfer: true (or false)")
            changes[k] = v
    strategy = changes.get("strategy", base.search.strategy)
    takes = STRATEGY_KEYS[strategy]
    for k in m:
        if k != "strategy" and k not in takes:
            fix = (f"remove it, or choose strategy: {_BUDGETED}" if strategy == "exhaustive"
                   else f"remove it (strategy {strategy} takes: {', '.join(takes)})")
            what = "exhaustive measures every config and takes no " if strategy == "exhaustive" else \
                f"strategy {strategy} does not take "
            ctx.fail(m.key_lines[k], _join(key, k), f"{what}{k!r}", fix)
    inherited = {f: getattr(base.search, f) for f in SearchSettings.__dataclass_fields__}
    merged = {**inherited, **changes}
    defaults = SearchSettings()
    for field_name in ("seed", "transfer", "eta", "rungs"):
        if field_name not in takes:
            merged[field_name] = getattr(defaults, field_name)
    if "budget" not in takes:
        merged["budget_configs"] = merged["budget_seconds"] = None
    elif merged["budget_configs"] is None and merged["budget_seconds"] is None:
        ctx.fail(line, key, f"strategy {strategy} needs a budget per shape",
                 "add budget: {configs: 40} (configs measured per shape) or budget: {seconds: 2.0}")
    return SearchSettings(**merged)


def _search_budget(ctx: _Ctx, value: Any, key: str, line: int) -> dict[str, Any]:
    m = _mapping(ctx, value, key, line, allowed=("configs", "seconds"))
    if len(m) != 1:
        ctx.fail(line, key, f"expected one of configs or seconds, got {len(m)} keys",
                 "write budget: {configs: 40} or budget: {seconds: 2.0}")
    (k,) = m
    if k == "configs":
        return {"budget_configs": _positive_int(ctx, m[k], _join(key, k), m.value_lines[k],
                                                "write the number of configs measured per shape, e.g. 40"),
                "budget_seconds": None}
    return {"budget_configs": None,
            "budget_seconds": _positive_number(ctx, m[k], _join(key, k), m.value_lines[k])}


_SHARED_PARSERS: dict[str, Callable[[_Ctx, Any, str, int, Defaults], Any]] = {
    "dtypes": _dtypes,
    "targets": _targets,
    "bench": _bench,
    "search": _search,
}


def _template(ctx: _Ctx, value: Any, key: str, line: int, what: str) -> str:
    """A relative output path whose only placeholder is {kernel}."""
    example = '"generated/{kernel}.py"' if what == "generated" else '"generated/{kernel}.tuning.txtpb"'
    s = _string(ctx, value, key, line, example)
    rest = s.replace("{kernel}", "")
    if "{" in rest or "}" in rest:
        ctx.fail(
            line, key, f"{s!r} has a placeholder other than {{kernel}}", f"use only {{kernel}}, e.g. {what}: {example}"
        )
    if posixpath.isabs(s) or os.path.isabs(s) or re.match(r"[A-Za-z]:", s):
        ctx.fail(
            line,
            key,
            f"{s!r} is absolute; paths are relative to the manifest's folder",
            f"write e.g. {what}: {example}",
        )
    if what == "generated" and not s.endswith(".py"):
        ctx.fail(line, key, f"the generated module {s!r} must be a .py file", f"write e.g. generated: {example}")
    return s


# --------------------------------------------------------------------------- #
# Kernels
# --------------------------------------------------------------------------- #


_KERNEL_KEYS = (
    "kernel", "launch", "inputs", "reference", "key", "space", "constraints",
    "shapes", "interpreter_shapes", "dtypes", "bench", "search", "targets", "cache", "generated",
    "default_config", "vendor", "cost", "compile_cost",
)  # fmt: skip
_REQUIRED_KERNEL_KEYS = ("kernel", "launch", "inputs", "reference", "key", "space", "shapes")
_KERNEL_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def _kernels(ctx: _Ctx, top: _Map, root: Path) -> tuple[KernelSpec, ...]:
    base = _defaults(ctx, top)
    m = _mapping(ctx, top["kernels"], "kernels", top.key_lines["kernels"])
    if not m:
        ctx.fail(
            top.key_lines["kernels"], "kernels", "no kernels are defined", "add at least one kernel under 'kernels:'"
        )
    specs = tuple(_kernel(ctx, name, m, base) for name in m)
    _check_outputs_inside(ctx, specs, m, top, root)
    _check_outputs_distinct(ctx, specs, m)
    return specs


def _kernel(ctx: _Ctx, name: str, kernels: _Map, base: Defaults) -> KernelSpec:
    key, line = f"kernels.{name}", kernels.key_lines[name]
    _check_kernel_name(ctx, name, key, line)
    m = _mapping(ctx, kernels[name], key, line, allowed=_KERNEL_KEYS, required=_REQUIRED_KERNEL_KEYS)
    refs = {
        f: _module_attr(ctx, m[f], f"{key}.{f}", m.value_lines[f]) for f in ("kernel", "launch", "inputs", "reference")
    }
    dims = _key_dims(ctx, m["key"], f"{key}.key", m.value_lines["key"])
    space = _space(ctx, m, key, dims)
    shapes = _shapes(ctx, m["shapes"], f"{key}.shapes", m.value_lines["shapes"], dims)
    interp = shapes
    if "interpreter_shapes" in m:
        interp = _shapes(
            ctx, m["interpreter_shapes"], f"{key}.interpreter_shapes", m.value_lines["interpreter_shapes"], dims
        )
    s = _shared(ctx, m, key, base)
    every_shape = tuple(dict.fromkeys(shapes + interp))
    default = _default_config(ctx, m, key, space, dims, every_shape) if "default_config" in m else None
    vendor = _module_attr(ctx, m["vendor"], f"{key}.vendor", m.value_lines["vendor"]) if "vendor" in m else None
    cost = _cost(ctx, m, key, dims, every_shape, s.dtypes) if "cost" in m else None
    compile_cost = _compile_cost(ctx, m, key, space) if "compile_cost" in m else None
    return KernelSpec(
        name=name, **refs, key=dims, space=space, shapes=shapes, interpreter_shapes=interp,
        dtypes=s.dtypes, bench=s.bench, targets=s.targets,
        cache=s.cache.replace("{kernel}", name), generated=s.generated.replace("{kernel}", name), line=line,
        default_config=default, vendor=vendor, cost=cost, compile_cost=compile_cost, search=s.search,
    )  # fmt: skip


def _check_kernel_name(ctx: _Ctx, name: str, key: str, line: int) -> None:
    if _KERNEL_NAME.fullmatch(name) and len(name) > MAX_KERNEL_NAME:
        ctx.fail(line, f"kernels.{name[:40]}...", f"kernel name of {len(name)} characters is too long "
                 f"(at most {MAX_KERNEL_NAME}: it names files)", f"shorten it, e.g. to {name[:MAX_KERNEL_NAME]!r}")
    if _KERNEL_NAME.fullmatch(name) and not keyword.iskeyword(name):
        return
    better = re.sub(r"[^a-z0-9_]", "_", name.lower())
    better = f"_{better}" if not better or better[0].isdigit() or keyword.iskeyword(better) else better
    ctx.fail(
        line,
        key,
        f"kernel name {name!r} must match [a-z_][a-z0-9_]* and not be a Python keyword",
        f"rename it, e.g. to {better!r}",
    )


#: Kernel names become file names (generated/<kernel>.py, .aot_tune/bench/<device>/<kernel>/...).
MAX_KERNEL_NAME = 64
#: Longest file or folder name an output path may have: the file systems' 255 bytes, less the
#: temp-file affixes of atomic writes.
MAX_PATH_PART = 200
_CACHE_SUFFIXES = (".pb", ".txtpb", ".textproto", ".pbtxt")


def _check_outputs_inside(ctx: _Ctx, specs: tuple[KernelSpec, ...], kernels: _Map, top: _Map, root: Path) -> None:
    """Outputs stay inside the project, and never land on a module a kernel entry names."""
    sources = set()
    for spec in specs:
        for ref in (spec.kernel, spec.launch, spec.inputs, spec.reference, spec.vendor):
            if ref:
                module = Path(*ref.partition(":")[0].split("."))
                sources |= {posixpath.normpath((module.with_suffix(".py")).as_posix()),
                            posixpath.normpath((module / "__init__.py").as_posix())}
    real_root = root.resolve()
    for spec in specs:
        km = kernels[spec.name]
        for what in ("cache", "generated"):
            path = getattr(spec, what)
            where = km if what in km else (top["defaults"] if "defaults" in top and what in top["defaults"] else km)
            line = where.value_lines.get(what, spec.line)
            key = f"kernels.{spec.name}.{what}"
            normal = posixpath.normpath(path)
            fix = f'keep it inside the project, e.g. {what}: "generated/{{kernel}}{".py" if what == "generated" else ".tuning.pb"}"'
            if normal == ".." or normal.startswith("../") or normal == ".":
                ctx.fail(line, key, f"{path!r} is outside the project folder", fix)
            try:
                (root / normal).resolve().relative_to(real_root)
            except ValueError:
                ctx.fail(line, key, f"{path!r} leads outside the project folder (through a link)", fix)
            too_long = [part for part in normal.split("/") if len(part.encode()) > MAX_PATH_PART]
            if too_long:
                ctx.fail(line, key, f"a part of {path!r} is {len(too_long[0].encode())} bytes long, over the "
                         f"{MAX_PATH_PART} a file name may take", "shorten the kernel name or the path")
            if normal in sources:
                ctx.fail(line, key, f"{path!r} is a module the manifest's kernels import: writing it would "
                         f"overwrite their source", fix)
            if what == "cache" and not normal.endswith(_CACHE_SUFFIXES):
                ctx.fail(line, key, f"the cache {path!r} must end in {', '.join(_CACHE_SUFFIXES)} "
                         f"(binary, or text for the last three)", 'write e.g. cache: "generated/{kernel}.tuning.pb"')


_MODULE_ATTR = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", re.ASCII)


def _module_attr(ctx: _Ctx, value: Any, key: str, line: int) -> str:
    if isinstance(value, str) and _MODULE_ATTR.fullmatch(value):
        return value
    fix = "write it as package.module:name, e.g. kernels.gemm:matmul"
    if isinstance(value, str) and ":" not in value and "." in value:
        module, attr = value.rsplit(".", 1)
        if _MODULE_ATTR.fullmatch(f"{module}:{attr}"):
            fix = f"separate the attribute with a colon: {module}:{attr}"
    ctx.fail(line, key, f"expected 'module.path:attr', got {_describe(value)}", fix)


def _key_dims(ctx: _Ctx, value: Any, key: str, line: int) -> tuple[str, ...]:
    seq = _list(ctx, value, key, line, "M, N, K")
    for i, d in enumerate(seq):
        sub, iline = f"{key}[{i}]", seq.item_lines[i]
        if not _is_ident(d):
            ctx.fail(
                iline,
                sub,
                f"key dim {_describe(d)} is not an identifier",
                "use names like M, N, K (letters, digits and _)",
            )
        if d in FUNCTIONS or d == "grid":
            ctx.fail(
                iline, sub, f"key dim {d!r} is a reserved name", f"rename it (reserved: grid, {', '.join(FUNCTIONS)})"
            )
        if d in seq[:i]:
            ctx.fail(iline, sub, f"key dim {d!r} is listed twice", "list each key dim once")
    return tuple(seq)


# --------------------------------------------------------------------------- #
# Space and constraints
# --------------------------------------------------------------------------- #


def _space(ctx: _Ctx, m: _Map, key: str, dims: tuple[str, ...]) -> ConfigSpace:
    skey = f"{key}.space"
    sm = _mapping(ctx, m["space"], skey, m.key_lines["space"])
    if not sm:
        ctx.fail(
            m.key_lines["space"], skey, "the space has no params", "add at least one param, e.g. BLOCK_M: [64, 128]"
        )
    params = tuple((p, _param(ctx, sm, p, f"{skey}.{p}", dims)) for p in sm)
    names = [p for p, _ in params] + list(dims)
    space = ConfigSpace(params, _constraints(ctx, m, key, names))
    _check_not_empty(ctx, space, m, key)
    return space


def _param(ctx: _Ctx, sm: _Map, name: str, key: str, dims: tuple[str, ...]) -> tuple:
    kline = sm.key_lines[name]
    if not _is_ident(name):
        ctx.fail(
            kline, key, f"param name {name!r} is not an identifier", "use a name like BLOCK_M (letters, digits and _)"
        )
    if name in dims:
        ctx.fail(kline, key, f"{name!r} is both a key dim and a space param", "rename the param")
    if name in FUNCTIONS:
        ctx.fail(kline, key, f"param {name!r} shadows the constraint function {name}()", "rename the param")
    seq = _list(ctx, sm[name], key, sm.value_lines[name], "64")
    seen: set[tuple[type, Any]] = set()
    for i, v in enumerate(seq):
        _check_value(ctx, name, v, f"{key}[{i}]", seq.item_lines[i])
        if (type(v), v) in seen:
            ctx.fail(seq.item_lines[i], f"{key}[{i}]", f"duplicate value {_describe(v)}", "list each value once")
        seen.add((type(v), v))
    return tuple(seq)


_LAUNCH_RULES: dict[str, tuple[Callable[[Any], bool], str, str]] = {
    "num_warps": (lambda v: _is_pow2(v) and v <= 32, "a power of two from 1 to 32", "[2, 4, 8]"),
    "num_stages": (lambda v: _is_int(v) and v >= 1, "an integer >= 1", "[2, 3, 4]"),
    "num_ctas": (_is_pow2, "a power of two", "[1, 2]"),
    "maxnreg": (lambda v: v is None or (_is_int(v) and v >= 1), "an integer >= 1 or null", "[null, 128]"),
}
assert set(_LAUNCH_RULES) == set(LAUNCH_OPTIONS)


def _check_value(ctx: _Ctx, name: str, v: Any, key: str, line: int) -> None:
    if name in _LAUNCH_RULES:
        ok, want, example = _LAUNCH_RULES[name]
        if not ok(v):
            ctx.fail(line, key, f"{name} must be {want}, got {_describe(v)}", f"write e.g. {name}: {example}")
        return
    if isinstance(v, float) and not math.isfinite(v):
        ctx.fail(line, key, f"value {v!r} is not finite", "use finite numbers")
    if not isinstance(v, (int, float, str)):
        ctx.fail(
            line,
            key,
            f"values must be ints, floats, bools or strings, got {_describe(v)}",
            f"write e.g. {name}: [64, 128]",
        )


def _constraints(ctx: _Ctx, m: _Map, key: str, names: list[str]) -> tuple[Constraint, ...]:
    if "constraints" not in m:
        return ()
    ckey = f"{key}.constraints"
    seq = _list(ctx, m["constraints"], ckey, m.value_lines["constraints"], '"BLOCK_M <= 128"', allow_empty=True)
    out = []
    for i, text in enumerate(seq):
        sub, line = f"{ckey}[{i}]", seq.item_lines[i]
        if not isinstance(text, str):
            ctx.fail(
                line,
                sub,
                f"expected an expression string, got {_describe(text)}",
                'quote the expression, e.g. - "BLOCK_M <= 128"',
            )
        try:
            out.append(parse_constraint(text, names, line))
        except ConstraintError as e:
            ctx.fail(line, sub, e.problem, e.fix)
    return tuple(out)


def _check_not_empty(ctx: _Ctx, space: ConfigSpace, m: _Map, key: str) -> None:
    """Fail when the shape-independent constraints reject every config."""
    try:
        if space.size():
            return
    except ConstraintError as e:
        _fail_constraint(ctx, space, m, key, e.constraint, e.problem, e.fix)
    total = math.prod(len(vals) for _, vals in space.params)
    for c in space.constraints:
        if c.names <= {p for p, _ in space.params} and ConfigSpace(space.params, (c,)).size() == 0:
            _fail_constraint(
                ctx,
                space,
                m,
                key,
                c,
                f"this constraint rejects all {total} configs of the space",
                "relax it or add values to the space",
            )
    ckey = f"{key}.constraints"
    ctx.fail(
        m.key_lines["constraints"],
        ckey,
        f"the shape-independent constraints together reject all {total} configs",
        "relax them or add values to the space",
    )


def _fail_constraint(
    ctx: _Ctx, space: ConfigSpace, m: _Map, key: str, c: Constraint | None, problem: str, fix: str
) -> NoReturn:
    if c is None:
        ctx.fail(m.key_lines.get("constraints"), f"{key}.constraints", problem, fix)
    ctx.fail(c.line, f"{key}.constraints[{space.constraints.index(c)}]", problem, fix)


# --------------------------------------------------------------------------- #
# Baselines and cost
# --------------------------------------------------------------------------- #


def _expression(ctx: _Ctx, text: str, names: Sequence[str], key: str, line: int) -> Constraint:
    try:
        return parse_constraint(text, names, line)
    except ConstraintError as e:
        ctx.fail(line, key, e.problem, e.fix)


def _evaluate(ctx: _Ctx, expression: Constraint, env: dict[str, Any], key: str, line: int) -> Any:
    try:
        return expression.evaluate(env)
    except Exception as e:  # noqa: BLE001 - any failure inside user code is reported
        shown = " ".join(f"{k}={v}" for k, v in env.items())
        ctx.fail(line, key, f"{expression.text!r} failed for {shown}: {type(e).__name__}: {e}",
                 "guard the expression, e.g. 'x if d != 0 else 0'")


def _default_config(
    ctx: _Ctx, m: _Map, key: str, space: ConfigSpace, dims: tuple[str, ...], shapes: tuple[tuple[int, ...], ...]
) -> DefaultConfig:
    """Exactly the space's params; expressions are evaluated for every shape here, so a bad one
    fails at load and not in the middle of a bench."""
    dkey, line = f"{key}.default_config", m.value_lines["default_config"]
    params = dict(space.params)
    dm = _mapping(ctx, m["default_config"], dkey, line, allowed=tuple(params))
    missing = [p for p in params if p not in dm]
    if missing:
        ctx.fail(line, dkey, f"missing param(s) {', '.join(missing)}",
                 "give a value for every param of the space (the config the kernel runs untuned)")
    values: list[tuple[str, Any]] = []
    for name in params:
        sub, vline, v = f"{dkey}.{name}", dm.value_lines[name], dm[name]
        numeric = not any(isinstance(x, str) for x in params[name])
        if isinstance(v, str) and numeric:
            values.append((name, _expression(ctx, v, dims, sub, vline)))
            for shape in shapes:
                env = dict(zip(dims, shape, strict=True))
                result = _evaluate(ctx, values[-1][1], env, sub, vline)
                if not _is_number(result):
                    ctx.fail(vline, sub, f"{v!r} gives {_describe(result)} for {env}", "make it a number")
                _check_value(ctx, name, result, sub, vline)
        else:
            _check_value(ctx, name, v, sub, vline)
            values.append((name, v))
    return DefaultConfig(tuple(values))


def _cost(
    ctx: _Ctx, m: _Map, key: str, dims: tuple[str, ...], shapes: tuple[tuple[int, ...], ...], dtypes: tuple[str, ...]
) -> Cost:
    ckey, line = f"{key}.cost", m.value_lines["cost"]
    cm = _mapping(ctx, m["cost"], ckey, line, allowed=COST_NAMES)
    if not cm:
        ctx.fail(line, ckey, "no cost given", 'write e.g. cost: {flops: "2*M*N*K"} or remove the key')
    parts: dict[str, Constraint] = {}
    for name in cm:
        sub, vline, v = f"{ckey}.{name}", cm.value_lines[name], cm[name]
        if _is_number(v):
            v = repr(v)
        if not isinstance(v, str):
            ctx.fail(vline, sub, f"expected a number or an expression string, got {_describe(v)}",
                     f'write e.g. {name}: "2*M*N*K"')
        parts[name] = _expression(ctx, v, (*dims, "dtype_bytes"), sub, vline)
        for shape in shapes:
            for dtype in dtypes:
                env = {**dict(zip(dims, shape, strict=True)), "dtype_bytes": DTYPE_BYTES[dtype]}
                result = _evaluate(ctx, parts[name], env, sub, vline)
                if not _is_number(result) or result < 0:
                    ctx.fail(vline, sub, f"{v!r} gives {_describe(result)} for {env}",
                             "make it a non-negative number of " + name)
    return Cost(**parts)


def _compile_cost(ctx: _Ctx, m: _Map, key: str, space: ConfigSpace) -> Constraint:
    """Over the params only (a compile serves every shape of its specialization); evaluated for
    every config here, so a bad one fails at load and not while the compile queue is ordered."""
    ckey, line, v = f"{key}.compile_cost", m.value_lines["compile_cost"], m["compile_cost"]
    if _is_number(v):
        v = repr(v)
    if not isinstance(v, str):
        ctx.fail(line, ckey, f"expected an expression string, got {_describe(v)}",
                 'write e.g. compile_cost: "BLOCK_M * BLOCK_N / num_warps"')
    expression = _expression(ctx, v, tuple(dict(space.params)), ckey, line)
    for config in space.configs():
        result = _evaluate(ctx, expression, config.as_dict(), ckey, line)
        if not _is_number(result) or result < 0:
            ctx.fail(line, ckey, f"{v!r} gives {_describe(result)} for {config.as_dict()}",
                     "make it a non-negative number (a relative compile time)")
    return expression


# --------------------------------------------------------------------------- #
# Shapes
# --------------------------------------------------------------------------- #


def _shapes(ctx: _Ctx, value: Any, key: str, line: int, dims: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    """Explicit shapes first, then grid expansions; file order; duplicates dropped."""
    example = "{" + ", ".join(f"{d}: 256" for d in dims) + "}"
    seq = _list(ctx, value, key, line, example)
    explicit: list[tuple[int, ...]] = []
    grids: list[tuple[int, ...]] = []
    for i, item in enumerate(seq):
        sub, iline = f"{key}[{i}]", seq.item_lines[i]
        if not isinstance(item, _Map):
            ctx.fail(
                iline, sub, f"expected a shape mapping, got {_describe(item)}", f"write - {example} or - grid: {{...}}"
            )
        if "grid" in item:
            grids.extend(_grid(ctx, item, sub, iline, dims))
        else:
            explicit.append(_explicit(ctx, item, sub, iline, dims))
    return tuple(dict.fromkeys(explicit + grids))


def _check_dims(ctx: _Ctx, m: _Map, key: str, line: int, dims: tuple[str, ...]) -> None:
    """A shape mapping must name exactly the key dims."""
    _mapping(ctx, m, key, line)
    for k in m:
        if k not in dims:
            hint = _did_you_mean(k, dims)
            fix = f"{hint} " if hint else ""
            ctx.fail(
                m.key_lines[k],
                _join(key, k),
                f"{k!r} is not a key dim (key: {', '.join(dims)})",
                f"{fix}remove it, or add it to key",
            )
    for d in dims:
        if d not in m:
            ctx.fail(m.line, key, f"shape is missing key dim {d!r}", f"give every key dim: {', '.join(dims)}")


def _explicit(ctx: _Ctx, m: _Map, key: str, line: int, dims: tuple[str, ...]) -> tuple[int, ...]:
    _check_dims(ctx, m, key, line, dims)
    fix = "shape dims are sizes: use an integer >= 1"
    return tuple(_positive_int(ctx, m[d], f"{key}.{d}", m.value_lines[d], fix) for d in dims)


def _grid(ctx: _Ctx, item: _Map, key: str, line: int, dims: tuple[str, ...]) -> list[tuple[int, ...]]:
    _mapping(ctx, item, key, line)
    extra = [k for k in item if k != "grid"]
    if extra:
        ctx.fail(
            item.key_lines[extra[0]],
            _join(key, extra[0]),
            "a grid entry takes only the key 'grid'",
            f"move {extra[0]} inside the grid as {extra[0]}: [...]",
        )
    gkey = f"{key}.grid"
    g = _mapping(ctx, item["grid"], gkey, item.value_lines["grid"])
    _check_dims(ctx, g, gkey, item.value_lines["grid"], dims)
    axes = [_grid_axis(ctx, g[d], f"{gkey}.{d}", g.value_lines[d]) for d in dims]
    return list(itertools.product(*axes))


def _grid_axis(ctx: _Ctx, value: Any, key: str, line: int) -> tuple[int, ...]:
    seq = _list(ctx, value, key, line, "256, 512")
    fix = "shape dims are sizes: use integers >= 1"
    return tuple(_positive_int(ctx, v, f"{key}[{i}]", seq.item_lines[i], fix) for i, v in enumerate(seq))


def _check_outputs_distinct(ctx: _Ctx, specs: tuple[KernelSpec, ...], kernels: _Map) -> None:
    """Two kernels writing the same cache or module would overwrite each other."""
    owners: dict[str, str] = {}
    for spec in specs:
        for what in ("cache", "generated"):
            path = posixpath.normpath(getattr(spec, what))
            km = kernels[spec.name]
            key = f"kernels.{spec.name}.{what}"
            line = km.value_lines.get(what, spec.line)
            if path in owners:
                ctx.fail(
                    line,
                    key,
                    f"output path {path!r} is also the {owners[path]}",
                    "put {kernel} in the path so each kernel gets its own file",
                )
            owners[path] = f"{what} path of kernel {spec.name!r}"
