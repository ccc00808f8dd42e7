"""The kernel keys written as expressions: ``default_config`` and ``cost`` (over the key dims)
and ``compile_cost`` (over the params). Each is evaluated here for every shape or config, so a
bad one fails at load and not in the middle of a run.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

from aot_tune.errors import quoted, shorten
from aot_tune.cost import COST_NAMES, Cost
from aot_tune.dtypes import DtypeCombo, element_bytes
from aot_tune.manifest.checks import Ctx, as_mapping, described, is_number
from aot_tune.manifest.space_rules import check_value
from aot_tune.manifest.yaml_lines import Map
from aot_tune.space import ConfigSpace, Constraint, ConstraintError, DefaultConfig, parse_constraint


def _expression(ctx: Ctx, text: str, names: Sequence[str], key: str, line: int) -> Constraint:
    try:
        return parse_constraint(text, names, line)
    except ConstraintError as e:
        ctx.fail(line, key, e.problem, e.fix)


def _evaluate(ctx: Ctx, expression: Constraint, env: dict[str, Any], key: str, line: int) -> Any:
    try:
        return expression.evaluate(env)
    except Exception as e:  # noqa: BLE001 - any failure inside user code is reported
        shown = " ".join(f"{k}={v}" for k, v in env.items())
        ctx.fail(line, key, f"{quoted(expression.text)} failed for {shown}: {type(e).__name__}: {shorten(str(e))}",
                 "guard the expression, e.g. 'x if d != 0 else 0'")


def parse_default_config(
    ctx: Ctx, m: Map, key: str, space: ConfigSpace, dims: tuple[str, ...], shapes: tuple[tuple[int, ...], ...]
) -> DefaultConfig:
    """Exactly the space's params; expressions are evaluated for every shape here, so a bad one
    fails at load and not in the middle of a bench."""
    dkey, line = f"{key}.default_config", m.value_lines["default_config"]
    params = dict(space.params)
    dm = as_mapping(ctx, m["default_config"], dkey, line, allowed=tuple(params))
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
                if not is_number(result):
                    ctx.fail(vline, sub, f"{quoted(v)} gives {described(result)} for {env}", "make it a number")
                check_value(ctx, name, result, sub, vline)
        else:
            check_value(ctx, name, v, sub, vline)
            values.append((name, v))
    return DefaultConfig(tuple(values))


def parse_cost(
    ctx: Ctx, m: Map, key: str, dims: tuple[str, ...], shapes: tuple[tuple[int, ...], ...], dtypes: tuple[str, ...],
    combos: tuple[DtypeCombo, ...] = (),
) -> Cost:
    ckey, line = f"{key}.cost", m.value_lines["cost"]
    cm = as_mapping(ctx, m["cost"], ckey, line, allowed=COST_NAMES)
    if not cm:
        ctx.fail(line, ckey, "no cost given", 'write e.g. cost: {flops: "2*M*N*K"} or remove the key')
    parts: dict[str, Constraint] = {}
    for name in cm:
        sub, vline, v = f"{ckey}.{name}", cm.value_lines[name], cm[name]
        if is_number(v):
            v = repr(v)
        if not isinstance(v, str):
            ctx.fail(vline, sub, f"expected a number or an expression string, got {described(v)}",
                     f'write e.g. {name}: "2*M*N*K"')
        parts[name] = _expression(ctx, v, (*dims, "dtype_bytes"), sub, vline)
        for shape in shapes:
            for dtype in dtypes:
                env = {**dict(zip(dims, shape, strict=True)),
                       "dtype_bytes": element_bytes(dtype, {c.name: c for c in combos})}
                result = _evaluate(ctx, parts[name], env, sub, vline)
                if not is_number(result) or result < 0:
                    ctx.fail(vline, sub, f"{quoted(v)} gives {described(result)} for {env}",
                             "make it a non-negative number of " + name)
    return Cost(**parts, combos=combos)


def parse_compile_cost(ctx: Ctx, m: Map, key: str, space: ConfigSpace) -> Constraint:
    """Over the params only (a compile serves every shape of its specialization); evaluated for
    every config here, so a bad one fails at load and not while the compile queue is ordered."""
    ckey, line, v = f"{key}.compile_cost", m.value_lines["compile_cost"], m["compile_cost"]
    if is_number(v):
        v = repr(v)
    if not isinstance(v, str):
        ctx.fail(line, ckey, f"expected an expression string, got {described(v)}",
                 'write e.g. compile_cost: "BLOCK_M * BLOCK_N / num_warps"')
    expression = _expression(ctx, v, tuple(dict(space.params)), ckey, line)
    for config in space.configs():
        result = _evaluate(ctx, expression, config.as_dict(), ckey, line)
        if not is_number(result) or result < 0:
            ctx.fail(line, ckey, f"{quoted(v)} gives {described(result)} for {config.as_dict()}",
                     "make it a non-negative number (a relative compile time)")
    return expression


def check_flag_use(ctx: Ctx, expression: Constraint, kinds: dict[str, str], key: str, line: int) -> None:
    """A bool or string key dim may only be compared with == or != (a bool may also be a
    condition: ``not causal``, ``x if causal else y``); in arithmetic or an ordering it would
    silently compute nonsense (``'gelu' * 2``, ``True + 1``), so it is one line here."""
    tree = ast.parse(expression.text, mode="eval")
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        kind = kinds.get(node.id) if isinstance(node, ast.Name) else None
        if kind not in ("bool", "str") or isinstance(parents.get(id(node)), ast.Call) and \
                parents[id(node)].func is node:
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.Compare) and all(isinstance(op, (ast.Eq, ast.NotEq)) for op in parent.ops):
            continue
        if kind == "bool" and (isinstance(parent, (ast.BoolOp, ast.Expression)) or
                               isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not) or
                               isinstance(parent, ast.IfExp) and parent.test is node):
            continue
        what = "true/false" if kind == "bool" else "a name"
        example = f"{node.id}" if kind == "bool" else f"{node.id} == 'gelu'"
        ctx.fail(line, key, f"key dim {quoted(node.id)} is {what}, not a number, in {quoted(expression.text)}",
                 f"compare it with == or != (e.g. 'x if {example} else y'), or make {node.id} a size")
