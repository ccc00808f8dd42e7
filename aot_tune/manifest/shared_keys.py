"""The keys a kernel shares with ``defaults:`` (dtypes, targets, bench, search, cache,
generated, devices, exports): one parser per key, so a value means the same wherever it is written.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from aot_tune.errors import quoted
from aot_tune import dtypes
from aot_tune.dtypes import DtypeCombo
from aot_tune.manifest.checks import (Ctx, as_list, as_mapping, as_yaml, described, did_you_mean, is_ident, is_int,
                                      join_key, leaf_key, positive_int, positive_number)
from aot_tune.manifest.device_keys import parse_devices
from aot_tune.manifest.exports import parse_exports
from aot_tune.manifest.output_paths import parse_template
from aot_tune.manifest.records import (BenchSettings, BUDGET_OPTIONAL, Defaults, SearchSettings, STRATEGIES,
                                       STRATEGY_KEYS)
from aot_tune.manifest.yaml_lines import Map


#: dtype_combos first: dtypes and tolerance may name the combinations declared beside them.
_SHARED_KEYS = ("dtype_combos", "dtypes", "tolerance", "targets", "bench", "search", "cache", "generated", "devices",
                "exports")


def parse_defaults(ctx: Ctx, top: Map) -> Defaults:
    base = Defaults()
    if "defaults" not in top:
        return base
    m = as_mapping(ctx, top["defaults"], "defaults", top.key_lines["defaults"], allowed=_SHARED_KEYS)
    return parse_shared(ctx, m, "defaults", base)


def parse_shared(ctx: Ctx, m: Map, key: str, base: Defaults) -> Defaults:
    """Apply the keys a kernel shares with ``defaults`` over ``base``."""
    changes: dict[str, Any] = {}
    for k in _SHARED_KEYS:
        if k in m:
            sub, line = join_key(key, k), m.value_lines[k]
            if k in ("cache", "generated"):
                changes[k] = parse_template(ctx, m[k], sub, line, k)
            else:
                changes[k] = _SHARED_PARSERS[k](ctx, m[k], sub, line, replace(base, **changes))
    return replace(base, **changes)


def _dtypes(ctx: Ctx, value: Any, key: str, line: int, base: Defaults) -> tuple[str, ...]:
    seq = as_list(ctx, value, key, line, "float16")
    combos = {c.name: c for c in base.dtype_combos}
    out = []
    for i, v in enumerate(seq):
        name = v if isinstance(v, str) and v in combos else _dtype_name(ctx, v, f"{key}[{i}]", seq.item_lines[i],
                                                                         tuple(combos))
        out.append(name)
    return tuple(dict.fromkeys(out))


def _dtype_name(ctx: Ctx, value: Any, key: str, line: int, combos: tuple[str, ...] = ()) -> str:
    """A torch dtype name (or alias) as its canonical name; anything else is one line."""
    name = dtypes.canonical(value) if isinstance(value, str) else None
    if name is None:
        text = str(value).lower()
        hint = next(filter(None, (did_you_mean(text, names) for names in (dtypes.DTYPE_BYTES, combos, dtypes.ALIASES))),
                    "")
        named = f"; combinations: {', '.join(combos)}" if combos else ""
        ctx.fail(line, key, f"unknown dtype {described(value)} (torch dtypes: {', '.join(dtypes.DTYPE_BYTES)}{named})",
                 hint or "use a torch dtype name, or declare a combination under dtype_combos")
    return name


def _dtype_combos(ctx: Ctx, value: Any, key: str, line: int, base: Defaults) -> tuple[DtypeCombo, ...]:
    """``{name: {argument: dtype, ...}}``, over the inherited ones (a name here replaces one there)."""
    m = as_mapping(ctx, value, key, line)
    combos = {c.name: c for c in base.dtype_combos}
    for name in m:
        sub, vline = join_key(key, name), m.value_lines[name]
        if not is_ident(name) or dtypes.canonical(name) is not None:
            ctx.fail(m.key_lines[name], sub, f"combination name {described(name)} must be an identifier that is not "
                     f"a dtype name", "name it after what it holds, e.g. fp8_w8a8 or w8a16")
        args = as_mapping(ctx, m[name], sub, vline)
        if not args:
            ctx.fail(vline, sub, "a combination names no argument",
                     "write e.g. fp8_w8a8: {a: float8_e4m3fn, b: float8_e4m3fn, out: bfloat16}")
        pairs = []
        for arg in args:
            if not is_ident(arg):
                ctx.fail(args.key_lines[arg], join_key(sub, arg), f"{described(arg)} is not an argument name",
                         "name the launch function's tensor arguments")
            pairs.append((arg, _dtype_name(ctx, args[arg], join_key(sub, arg), args.value_lines[arg])))
        combos[name] = DtypeCombo(name, tuple(pairs), sub, m.key_lines[name])
    return tuple(combos.values())


def _tolerance(ctx: Ctx, value: Any, key: str, line: int, base: Defaults) -> tuple[tuple[str, float], ...]:
    """``{dtype or combination: relative error}``, over the inherited ones."""
    m = as_mapping(ctx, value, key, line)
    combos = tuple(c.name for c in base.dtype_combos)
    out = dict(base.tolerance)
    for name in m:
        sub = join_key(key, name)
        dtype = name if name in combos else _dtype_name(ctx, name, sub, m.key_lines[name], combos)
        out[dtype] = positive_number(ctx, m[name], sub, m.value_lines[name])
    return tuple(out.items())


_TARGET = re.compile(r"(?:sm_?)?([1-9][0-9]{1,2})")


def _targets(ctx: Ctx, value: Any, key: str, line: int, base: Defaults) -> tuple[str, ...]:
    seq = as_list(ctx, value, key, line, "sm90")
    out = []
    for i, v in enumerate(seq):
        m = _TARGET.fullmatch(str(v).strip().lower()) if is_int(v) or isinstance(v, str) else None
        if m is None:
            fix = "write GPU targets as smNN, sm_NN or NN, e.g. sm80 (A100), sm90 (H100), sm100 (B200)"
            ctx.fail(seq.item_lines[i], f"{key}[{i}]", f"unknown target {described(v)}", fix)
        out.append(f"sm{m.group(1)}")
    return tuple(dict.fromkeys(out))


_BENCH_KEYS = ("warmup_ms", "rep_ms", "l2_flush", "l2_flush_bytes", "timeout_s")


def _bench(ctx: Ctx, value: Any, key: str, line: int, base: Defaults) -> BenchSettings:
    m = as_mapping(ctx, value, key, line, allowed=_BENCH_KEYS)
    changes: dict[str, Any] = {}
    for k in m:
        sub, vline, v = join_key(key, k), m.value_lines[k], m[k]
        if k in ("warmup_ms", "rep_ms"):
            changes[k] = positive_number(ctx, v, sub, vline)
        elif k == "timeout_s":
            changes[k] = None if v is None else positive_number(ctx, v, sub, vline)
        elif k == "l2_flush":
            if not isinstance(v, bool):
                ctx.fail(vline, sub, f"expected true or false, got {described(v)}", "write l2_flush: true (or false)")
            changes[k] = v
        elif v is not None:
            changes[k] = positive_int(
                ctx, v, sub, vline, "write a byte count such as 52428800, or null for twice the device's L2"
            )
        else:
            changes[k] = None
    return replace(base.bench, **changes)


_SEARCH_KEYS = ("strategy", "budget", "seed", "transfer", "eta", "rungs")
_BUDGETED = ", ".join(s for s in STRATEGIES if s != "exhaustive")


def _search(ctx: Ctx, value: Any, key: str, line: int, base: Defaults) -> SearchSettings:
    """A search block over the inherited one; keys the resulting strategy does not take are
    errors when written here, and are not inherited from the defaults."""
    if isinstance(value, str):
        ctx.fail(line, key, f"expected a mapping, got {described(value)}",
                 f"write {leaf_key(key)}: {{strategy: {as_yaml(value)}, budget: {{configs: 40}}}}")
    m = as_mapping(ctx, value, key, line, allowed=_SEARCH_KEYS)
    changes: dict[str, Any] = {}
    for k in m:
        sub, vline, v = join_key(key, k), m.value_lines[k], m[k]
        if k == "strategy":
            if v not in STRATEGIES:
                hint = did_you_mean(v, STRATEGIES) or f"use one of: {', '.join(STRATEGIES)}"
                ctx.fail(vline, sub, f"unknown strategy {described(v)} (allowed: {', '.join(STRATEGIES)})", hint)
            changes[k] = v
        elif k == "budget":
            changes.update(_search_budget(ctx, v, sub, vline))
        elif k in ("seed", "eta", "rungs"):
            low = 0 if k == "seed" else 2
            if not is_int(v) or v < low:
                ctx.fail(vline, sub, f"expected an integer >= {low}, got {described(v)}",
                         f"write e.g. {k}: {max(low, 3) if k != 'seed' else 0}")
            changes[k] = v
        else:  # transfer
            if not isinstance(v, bool):
                ctx.fail(vline, sub, f"expected true or false, got {described(v)}", "write transfer: true (or false)")
            changes[k] = v
    strategy = changes.get("strategy", base.search.strategy)
    takes = STRATEGY_KEYS[strategy]
    for k in m:
        if k != "strategy" and k not in takes:
            fix = (f"remove it, or choose strategy: {_BUDGETED}" if strategy == "exhaustive"
                   else f"remove it (strategy {strategy} takes: {', '.join(takes)})")
            what = "exhaustive measures every config and takes no " if strategy == "exhaustive" else \
                f"strategy {strategy} does not take "
            ctx.fail(m.key_lines[k], join_key(key, k), f"{what}{quoted(k)}", fix)
    inherited = {f: getattr(base.search, f) for f in SearchSettings.__dataclass_fields__}
    merged = {**inherited, **changes}
    defaults = SearchSettings()
    for field_name in ("seed", "transfer", "eta", "rungs"):
        if field_name not in takes:
            merged[field_name] = getattr(defaults, field_name)
    if "budget" not in takes:
        merged["budget_configs"] = merged["budget_seconds"] = None
    elif merged["budget_configs"] is None and merged["budget_seconds"] is None and strategy not in BUDGET_OPTIONAL:
        ctx.fail(line, key, f"strategy {strategy} needs a budget per shape",
                 "add budget: {configs: 40} (configs measured per shape) or budget: {seconds: 2.0}")
    return SearchSettings(**merged)


def _search_budget(ctx: Ctx, value: Any, key: str, line: int) -> dict[str, Any]:
    m = as_mapping(ctx, value, key, line, allowed=("configs", "seconds"))
    if len(m) != 1:
        ctx.fail(line, key, f"expected one of configs or seconds, got {len(m)} keys",
                 "write budget: {configs: 40} or budget: {seconds: 2.0}")
    (k,) = m
    if k == "configs":
        return {"budget_configs": positive_int(ctx, m[k], join_key(key, k), m.value_lines[k],
                                                "write the number of configs measured per shape, e.g. 40"),
                "budget_seconds": None}
    return {"budget_configs": None,
            "budget_seconds": positive_number(ctx, m[k], join_key(key, k), m.value_lines[k])}


_SHARED_PARSERS: dict[str, Callable[[Ctx, Any, str, int, Defaults], Any]] = {
    "dtype_combos": _dtype_combos,
    "dtypes": _dtypes,
    "tolerance": _tolerance,
    "targets": _targets,
    "bench": _bench,
    "search": _search,
    "devices": parse_devices,
    "exports": parse_exports,
}
