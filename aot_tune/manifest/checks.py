"""Checks and error helpers that know nothing of the manifest's keys: one place for the
wording of type errors, "did you mean" hints and the ``file:LINE: key: problem; fix`` failure.
"""

from __future__ import annotations

import difflib
import json
import keyword
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from aot_tune.errors import ManifestError, quoted
from aot_tune.manifest.yaml_lines import Map, Seq


@dataclass(frozen=True)
class Ctx:
    """The path to show in errors (as the user gave it), and whether reading may keep what it
    expanded under .aot_tune/ (a dry run writes nothing)."""

    shown: str
    write_caches: bool = True

    def fail(self, line: int | None, key: str, problem: str, fix: str) -> NoReturn:
        raise ManifestError(self.shown, line, key, problem, fix)


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_ident(v: Any) -> bool:
    return isinstance(v, str) and _IDENT.fullmatch(v) is not None and not keyword.iskeyword(v)


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_power_of_two(v: Any) -> bool:
    return is_int(v) and v > 0 and v & (v - 1) == 0


def described(v: Any) -> str:
    """Show a YAML value the way the user wrote it (roughly)."""
    if v is None:
        return "nothing (null)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    return quoted(v)


def as_yaml(v: Any) -> str:
    """A scalar as it could be written back into the YAML file."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str) and re.fullmatch(r"[A-Za-z_][\w.\-]*", v):
        return v
    return json.dumps(v) if isinstance(v, (str, int, float)) else "..."


def join_key(key: str, part: Any) -> str:
    return f"{key}.{part}" if key else str(part)


def leaf_key(key: str) -> str:
    return re.sub(r"\[\d+\]$", "", key.rsplit(".", 1)[-1])


def did_you_mean(word: Any, options: Iterable[str]) -> str:
    options = list(options)
    same_case = [o for o in options if o.lower() == str(word).lower()]
    close = same_case or difflib.get_close_matches(str(word), options, n=1)
    return f"did you mean {quoted(close[0])}?" if close else ""


def as_mapping(
    ctx: Ctx, value: Any, key: str, line: int, allowed: Sequence[str] | None = None, required: Sequence[str] = ()
) -> Map:
    """Check a mapping: its type, duplicate keys, string keys, unknown and missing keys."""
    if not isinstance(value, Map):
        ctx.fail(
            line,
            key,
            f"expected a mapping, got {described(value)}",
            f"write '{leaf_key(key)}:' followed by indented 'name: value' lines",
        )
    for dup, dup_line, first_line in value.duplicates:
        ctx.fail(
            dup_line,
            join_key(key, dup),
            f"duplicate key {quoted(dup)} (first at line {first_line})",
            "keep only one of them (YAML would silently use the last)",
        )
    for k in value:
        if not isinstance(k, str):
            ctx.fail(value.key_lines[k], key, f"keys must be strings, got {described(k)}", f'quote the key: "{k}":')
        if allowed is not None and k not in allowed:
            _unknown_key(ctx, value, key, k, allowed)
    for r in required:
        if r not in value:
            ctx.fail(line, join_key(key, r), f"missing required key {quoted(r)}",
                     f"add '{r}:' under {key or 'the top level'}")
    return value


def _unknown_key(ctx: Ctx, m: Map, key: str, k: str, allowed: Sequence[str]) -> NoReturn:
    listing = ", ".join(allowed)
    fix = did_you_mean(k, allowed) or f"remove it or use one of: {listing}"
    ctx.fail(m.key_lines[k], join_key(key, k), f"unknown key {quoted(k)} (allowed: {listing})", fix)


def as_list(ctx: Ctx, value: Any, key: str, line: int, example: str, allow_empty: bool = False) -> Seq:
    """Check a (non-empty) list; a scalar gets the fix ``write P: [v]``."""
    what = "a list" if allow_empty else "a non-empty list"
    if not isinstance(value, Seq):
        scalar = value is not None and not isinstance(value, (dict, list))
        inner = as_yaml(value) if scalar else example
        ctx.fail(line, key, f"expected {what}, got {described(value)}", f"write {leaf_key(key)}: [{inner}]")
    if not value and not allow_empty:
        ctx.fail(line, key, "expected a non-empty list, got []",
                 f"write {leaf_key(key)}: [{example}], or remove the key")
    return value


def as_string(ctx: Ctx, value: Any, key: str, line: int, example: str) -> str:
    if not isinstance(value, str) or not value.strip():
        ctx.fail(line, key, f"expected a non-empty string, got {described(value)}", f"write {leaf_key(key)}: {example}")
    return value


def _number_fix(value: Any) -> str:
    if isinstance(value, str) and re.fullmatch(r"[-+]?[\d.]+[eE][-+]?\d+", value.strip()):
        return "write a plain number such as 1000 or 1.0e+3 (YAML 1.1 reads 1e3 as a string)"
    return "write a number greater than 0, e.g. 25"


def positive_number(ctx: Ctx, value: Any, key: str, line: int) -> float:
    if not is_number(value) or value <= 0:
        ctx.fail(line, key, f"expected a positive number, got {described(value)}", _number_fix(value))
    return float(value)


def positive_int(ctx: Ctx, value: Any, key: str, line: int, fix: str) -> int:
    if not is_int(value) or value <= 0:
        ctx.fail(line, key, f"expected a positive integer, got {described(value)}", fix)
    return value
