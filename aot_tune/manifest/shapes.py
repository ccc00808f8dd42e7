"""A kernel's ``shapes`` and ``interpreter_shapes``: explicit shapes and grids, each naming
every key dim and, where a benchmark needs more than the table is keyed on, the same bench dims
(rows, tokens), with sizes >= 1, bools (``causal: true``) or short strings
(``activation: gelu``); each dim keeps one kind across every shape.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from aot_tune.errors import quoted, shorten
from aot_tune.manifest.checks import Ctx, as_list, as_mapping, described, did_you_mean, is_ident, join_key, positive_int
from aot_tune.manifest.yaml_lines import Map
from aot_tune.space import FUNCTIONS, KEY_LABEL


#: Most shapes one kernel may declare (each is a bench task per dtype and GPU model).
MAX_SHAPES = 10_000
#: Largest shape dim: 2**40 elements is beyond any GPU's memory.
MAX_DIM = 2**40


@dataclass(frozen=True)
class ShapeEntry:
    """One shape as written: every dim it names (key and bench dims), and where."""

    values: dict[str, Any]
    line: int
    where: str


def parse_shapes(ctx: Ctx, value: Any, key: str, line: int, dims: tuple[str, ...]) -> tuple[ShapeEntry, ...]:
    """Explicit shapes first, then grid expansions; file order. Each names every key dim (``dims``)
    and may name bench dims besides; :func:`ordered_shapes` checks them across the lists."""
    example = "{" + ", ".join(f"{d}: 256" for d in dims) + "}"
    seq = as_list(ctx, value, key, line, example)
    explicit: list[ShapeEntry] = []
    grids: list[ShapeEntry] = []
    for i, item in enumerate(seq):
        sub, iline = f"{key}[{i}]", seq.item_lines[i]
        if not isinstance(item, Map):
            ctx.fail(
                iline, sub, f"expected a shape mapping, got {described(item)}", f"write - {example} or - grid: {{...}}"
            )
        if "grid" in item:
            grids.extend(_grid(ctx, item, sub, iline, dims))
        else:
            explicit.append(_explicit(ctx, item, sub, iline, dims))
    shapes = explicit + grids
    if len(shapes) > MAX_SHAPES:
        ctx.fail(line, key, f"{len(shapes):,} shapes, over the {MAX_SHAPES:,} a kernel may declare",
                 "list fewer shapes: tables fall back to the nearest tuned shape in between")
    return tuple(shapes)


def ordered_shapes(ctx: Ctx, key_dims: tuple[str, ...], *lists: tuple[ShapeEntry, ...]
                    ) -> tuple[tuple[str, ...], tuple[tuple, ...]]:
    """The bench dims (the dims the shapes name beyond the key, in first-seen order), and each
    list as value tuples over key dims then bench dims, duplicates dropped. Every shape of every
    list names the same bench dims: the inputs builder is given all of them."""
    named_by: dict[str, ShapeEntry] = {}  # each bench dim -> the first shape naming it
    for entries in lists:
        for entry in entries:
            for dim in entry.values:
                if dim not in key_dims:
                    named_by.setdefault(dim, entry)
    bench = list(named_by)
    for entries in lists:
        for entry in entries:
            missing = [d for d in bench if d not in entry.values]
            if missing:
                ctx.fail(entry.line, entry.where,
                         f"shape is missing bench dim {quoted(missing[0])} "
                         f"({shorten(named_by[missing[0]].where)} names it)",
                         f"give every shape the same dims ({shorten(', '.join(key_dims + tuple(bench)), 240)}): "
                         "the inputs builder gets all of them")
    dims = key_dims + tuple(bench)
    ordered = tuple(tuple(dict.fromkeys(tuple(e.values[d] for d in dims) for e in entries)) for entries in lists)
    return tuple(bench), ordered


def _check_dims(ctx: Ctx, m: Map, key: str, line: int, dims: tuple[str, ...]) -> None:
    """A shape mapping names every key dim; any other dim it names is a bench dim (an identifier
    that is not reserved)."""
    as_mapping(ctx, m, key, line)
    for k in m:
        if k in dims:
            continue
        if not is_ident(k) or k in FUNCTIONS or k == "grid":
            ctx.fail(m.key_lines[k], join_key(key, k), f"dim {described(k)} is not a name a constraint can use",
                     f"name dims like M, N, T (letters, digits and _; not grid or {', '.join(FUNCTIONS)})")
        twin = next((d for d in dims if d.lower() == k.lower()), None)
        if twin is not None:
            ctx.fail(m.key_lines[k], join_key(key, k), f"{quoted(k)} differs from key dim {quoted(twin)} only in case",
                     f"did you mean {quoted(twin)}? (a bench dim needs a name of its own)")
    for d in dims:
        if d not in m:
            hint = did_you_mean(d, [k for k in m if k not in dims])
            ctx.fail(m.line, key, f"shape is missing key dim {quoted(d)}",
                     f"{hint + ' ' if hint else ''}give every key dim: {shorten(', '.join(dims), 240)} "
                     "(other dims a shape names are bench dims: the inputs see them, tables are keyed without them)")


def _explicit(ctx: Ctx, m: Map, key: str, line: int, dims: tuple[str, ...]) -> ShapeEntry:
    _check_dims(ctx, m, key, line, dims)
    return ShapeEntry({d: _key_value(ctx, m[d], f"{key}.{d}", m.value_lines[d]) for d in m}, line, key)


def _grid(ctx: Ctx, item: Map, key: str, line: int, dims: tuple[str, ...]) -> list[ShapeEntry]:
    as_mapping(ctx, item, key, line)
    extra = [k for k in item if k != "grid"]
    if extra:
        ctx.fail(
            item.key_lines[extra[0]],
            join_key(key, extra[0]),
            "a grid entry takes only the key 'grid'",
            f"move {extra[0]} inside the grid as {extra[0]}: [...]",
        )
    gkey = f"{key}.grid"
    g = as_mapping(ctx, item["grid"], gkey, item.value_lines["grid"])
    _check_dims(ctx, g, gkey, item.value_lines["grid"], dims)
    names = list(g)
    axes = [_grid_axis(ctx, g[d], f"{gkey}.{d}", g.value_lines[d]) for d in names]
    count = math.prod(len(axis) for axis in axes)
    if count > MAX_SHAPES:
        ctx.fail(item.value_lines["grid"], gkey, f"the grid makes {count:,} shapes, over the {MAX_SHAPES:,} a kernel "
                 f"may declare (each is a bench task per dtype and GPU model)",
                 "list fewer sizes per dim: tables fall back to the nearest tuned shape in between")
    return [ShapeEntry(dict(zip(names, values)), line, gkey) for values in itertools.product(*axes)]


def _grid_axis(ctx: Ctx, value: Any, key: str, line: int) -> tuple[int, ...]:
    seq = as_list(ctx, value, key, line, "256, 512")
    return tuple(_key_value(ctx, v, f"{key}[{i}]", seq.item_lines[i]) for i, v in enumerate(seq))


def _key_value(ctx: Ctx, value: Any, key: str, line: int) -> int | bool | str:
    """A size, a bool, or a string that can name files (it is part of task and file names)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if not KEY_LABEL.fullmatch(value):
            ctx.fail(line, key, f"key value {described(value)} is not a size, a bool or a short name",
                     "use an integer >= 1, true/false, or a name of letters, digits, '_', '.' and '-' "
                     "starting with a letter (at most 64)")
        return value
    return _size(ctx, value, key, line, "key values are sizes (integers >= 1), true/false, or names")


def key_kind(value: Any) -> str:
    """'bool', 'str' or 'int': what kind of key value this is."""
    return "bool" if isinstance(value, bool) else "str" if isinstance(value, str) else "int"


def check_kinds(ctx: Ctx, line: int, key: str, dims: tuple[str, ...], shapes: tuple[tuple, ...]) -> dict[str, str]:
    """Each dim's kind, the same in every shape (a dim mixing sizes and names is a mistake)."""
    kinds: dict[str, str] = {}
    for shape in shapes:
        for dim, value in zip(dims, shape):
            kind = key_kind(value)
            if kinds.setdefault(dim, kind) != kind:
                ctx.fail(line, key, f"dim {quoted(dim)} mixes kinds ({kinds[dim]} and {kind} {quoted(value)})",
                         f"give {dim} values of one kind: sizes, true/false, or names")
    return kinds


def _size(ctx: Ctx, value: Any, key: str, line: int, fix: str) -> int:
    """A shape dim: a positive integer no larger than any tensor a GPU holds."""
    size = positive_int(ctx, value, key, line, fix)
    if size > MAX_DIM:
        ctx.fail(line, key, f"size {size} is over {MAX_DIM} (2**40), more elements than any GPU holds",
                 "write the size the kernel serves")
    return size
