"""A kernel's ``space`` and ``constraints``: param names and values (launch options by their
own rules), and constraints parsed and checked not to reject every config.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NoReturn

from aot_tune.errors import quoted
from aot_tune.manifest.checks import Ctx, as_list, as_mapping, described, is_ident, is_int, is_power_of_two
from aot_tune.manifest.yaml_lines import Map
from aot_tune.space import MAX_SPACE_COMBINATIONS, FUNCTIONS, LAUNCH_OPTIONS, ConfigSpace, Constraint, ConstraintError, parse_constraint


def parse_space(ctx: Ctx, m: Map, key: str, dims: tuple[str, ...]) -> ConfigSpace:
    skey = f"{key}.space"
    sm = as_mapping(ctx, m["space"], skey, m.key_lines["space"])
    if not sm:
        ctx.fail(
            m.key_lines["space"], skey, "the space has no params", "add at least one param, e.g. BLOCK_M: [64, 128]"
        )
    params = tuple((p, _param(ctx, sm, p, f"{skey}.{p}", dims)) for p in sm)
    names = [p for p, _ in params] + list(dims)
    space = ConfigSpace(params, parse_constraints(ctx, m, key, names))
    if space.combinations() > MAX_SPACE_COMBINATIONS:
        ctx.fail(m.key_lines["space"], skey, f"the space has {space.combinations():,} combinations of values, over "
                 f"the {MAX_SPACE_COMBINATIONS:,} a manifest may declare",
                 "list fewer values per param (constraints prune after the product is formed), or split the kernel")
    _check_not_empty(ctx, space, m, key)
    return space


def _param(ctx: Ctx, sm: Map, name: str, key: str, dims: tuple[str, ...]) -> tuple:
    kline = sm.key_lines[name]
    if not is_ident(name):
        ctx.fail(
            kline, key, f"param name {quoted(name)} is not an identifier",
            "use a name like BLOCK_M (letters, digits and _)"
        )
    if name in dims:
        ctx.fail(kline, key, f"{quoted(name)} is both a key dim and a space param", "rename the param")
    if name in FUNCTIONS:
        ctx.fail(kline, key, f"param {quoted(name)} shadows the constraint function {name}()", "rename the param")
    seq = as_list(ctx, sm[name], key, sm.value_lines[name], "64")
    seen: set[tuple[type, Any]] = set()
    for i, v in enumerate(seq):
        check_value(ctx, name, v, f"{key}[{i}]", seq.item_lines[i])
        if (type(v), v) in seen:
            ctx.fail(seq.item_lines[i], f"{key}[{i}]", f"duplicate value {described(v)}", "list each value once")
        seen.add((type(v), v))
    return tuple(seq)


_LAUNCH_RULES: dict[str, tuple[Callable[[Any], bool], str, str]] = {
    "num_warps": (lambda v: is_power_of_two(v) and v <= 32, "a power of two from 1 to 32", "[2, 4, 8]"),
    "num_stages": (lambda v: is_int(v) and v >= 1, "an integer >= 1", "[2, 3, 4]"),
    "num_ctas": (is_power_of_two, "a power of two", "[1, 2]"),
    "maxnreg": (lambda v: v is None or (is_int(v) and v >= 1), "an integer >= 1 or null", "[null, 128]"),
}
assert set(_LAUNCH_RULES) == set(LAUNCH_OPTIONS)


def check_value(ctx: Ctx, name: str, v: Any, key: str, line: int) -> None:
    if name in _LAUNCH_RULES:
        ok, want, example = _LAUNCH_RULES[name]
        if not ok(v):
            ctx.fail(line, key, f"{name} must be {want}, got {described(v)}", f"write e.g. {name}: {example}")
        return
    if isinstance(v, float) and not math.isfinite(v):
        ctx.fail(line, key, f"value {quoted(v)} is not finite", "use finite numbers")
    if not isinstance(v, (int, float, str)):
        ctx.fail(
            line,
            key,
            f"values must be ints, floats, bools or strings, got {described(v)}",
            f"write e.g. {name}: [64, 128]",
        )


def parse_constraints(ctx: Ctx, m: Map, key: str, names: list[str]) -> tuple[Constraint, ...]:
    if "constraints" not in m:
        return ()
    ckey = f"{key}.constraints"
    seq = as_list(ctx, m["constraints"], ckey, m.value_lines["constraints"], '"BLOCK_M <= 128"', allow_empty=True)
    out = []
    for i, text in enumerate(seq):
        sub, line = f"{ckey}[{i}]", seq.item_lines[i]
        if not isinstance(text, str):
            ctx.fail(
                line,
                sub,
                f"expected an expression string, got {described(text)}",
                'quote the expression, e.g. - "BLOCK_M <= 128"',
            )
        try:
            out.append(parse_constraint(text, names, line))
        except ConstraintError as e:
            ctx.fail(line, sub, e.problem, e.fix)
    return tuple(out)


def _check_not_empty(ctx: Ctx, space: ConfigSpace, m: Map, key: str) -> None:
    """Fail when the shape-independent constraints reject every config."""
    try:
        if space.size():
            return
    except ConstraintError as e:
        fail_constraint(ctx, space, m, key, e.constraint, e.problem, e.fix)
    total = math.prod(len(vals) for _, vals in space.params)
    for c in space.constraints:
        if c.names <= {p for p, _ in space.params} and ConfigSpace(space.params, (c,)).size() == 0:
            fail_constraint(
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


def fail_constraint(
    ctx: Ctx, space: ConfigSpace, m: Map, key: str, c: Constraint | None, problem: str, fix: str
) -> NoReturn:
    if c is None:
        ctx.fail(m.key_lines.get("constraints"), f"{key}.constraints", problem, fix)
    ctx.fail(c.line, f"{key}.constraints[{space.constraints.index(c)}]", problem, fix)
