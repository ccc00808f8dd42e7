"""The constraint language: whitelisted Python expressions over params and key dims.

Constraints (and the manifest's cost and default-config expressions) are user-written, so they
are checked against a small whitelist of syntax (see :func:`parse_constraint`) and evaluated with
no builtins: a manifest must not be able to import modules or touch attributes. Imports neither
torch nor triton (the doit loader reads it on every run).
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from aot_tune.errors import quoted, shorten

# --------------------------------------------------------------------------- #
# Functions available inside constraints
# --------------------------------------------------------------------------- #


def cdiv(a: int, b: int) -> int:
    """Ceiling division, as Triton's ``cdiv``."""
    return -(-a // b)


def next_pow2(x: float) -> int:
    """Smallest power of two >= x (1 for x <= 1), as Triton's ``next_power_of_2``."""
    n = math.ceil(x)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def log2(x: float) -> float:
    """Base-2 logarithm; exact for powers of two."""
    return math.log2(x)


def is_pow2(x: Any) -> bool:
    """True for positive integral powers of two (1, 2, 4, ...)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != int(x):
        return False
    n = int(x)
    return n > 0 and n & (n - 1) == 0


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "cdiv": cdiv,
    "next_pow2": next_pow2,
    "log2": log2,
    "is_pow2": is_pow2,
}
"""Functions a constraint may call; nothing else is callable."""

# name -> (min args, max args or None)
_ARITY: dict[str, tuple[int, int | None]] = {
    "min": (2, None),
    "max": (2, None),
    "abs": (1, 1),
    "cdiv": (2, 2),
    "next_pow2": (1, 1),
    "log2": (1, 1),
    "is_pow2": (1, 1),
}

#: Longest expression text accepted: enough for a generated constraint listing hundreds of configs.
MAX_EXPRESSION_LENGTH = 100_000
#: Largest integer a power may produce (bits): far beyond any tile or size, far below a hang.
MAX_POWER_BITS = 4096


def _bounded_pow(base: Any, exponent: Any) -> Any:
    """``base ** exponent``, refused when an integer result would exceed ``MAX_POWER_BITS`` bits
    (``9 ** 9 ** 9`` would otherwise run for minutes): every ``**`` of an expression comes here."""
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if exponent * abs(base).bit_length() > MAX_POWER_BITS:
            raise ValueError(f"{base} ** {exponent} is too large (over {MAX_POWER_BITS} bits)")
    return base ** exponent


_EVAL_GLOBALS: dict[str, Any] = {"__builtins__": {}, **FUNCTIONS, "_bounded_pow": _bounded_pow}


class _PowToCall(ast.NodeTransformer):
    """Rewrites ``a ** b`` into ``_bounded_pow(a, b)`` (after the whitelist check, so users cannot name it)."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Pow):
            call = ast.Call(func=ast.Name("_bounded_pow", ast.Load()), args=[node.left, node.right], keywords=[])
            return ast.copy_location(call, node)
        return node



# --------------------------------------------------------------------------- #
# Constraints
# --------------------------------------------------------------------------- #


class ConstraintError(ValueError):
    """A constraint is malformed or failed to evaluate.

    ``problem`` and ``fix`` are kept apart so the manifest can place them in its
    ``file:line: key: problem; fix: ...`` format; ``constraint`` is set when the
    error comes from evaluating a parsed constraint.
    """

    def __init__(self, problem: str, fix: str = "", constraint: Constraint | None = None) -> None:
        self.problem = problem
        self.fix = fix
        self.constraint = constraint
        super().__init__(f"{problem} ({fix})" if fix else problem)


@dataclass(frozen=True)
class Constraint:
    """A parsed, whitelisted constraint expression.

    Built by :func:`parse_constraint`; ``names`` are the params and key dims it
    reads, which decides whether it is shape-independent.
    """

    text: str
    names: frozenset[str]
    line: int | None
    _code: CodeType = field(compare=False, repr=False, hash=False)

    def holds(self, env: Mapping[str, Any]) -> bool:
        """Evaluate against ``env`` (params and key dims); exceptions propagate."""
        return bool(eval(self._code, _EVAL_GLOBALS, env))  # noqa: S307 - whitelisted AST

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """The expression's value (the manifest's cost and default-config expressions use the
        same whitelisted language); exceptions propagate."""
        return eval(self._code, _EVAL_GLOBALS, env)  # noqa: S307 - whitelisted AST

    def __reduce__(self) -> tuple[Callable[..., Constraint], tuple[str, frozenset[str], int | None]]:
        # Code objects don't pickle; rebuild from the text so specs can go to worker processes.
        return (parse_constraint, (self.text, self.names, self.line))

    def canonical(self) -> str:
        """Whitespace-insensitive text, so reformatting doesn't change fingerprints."""
        return ast.unparse(ast.parse(self.text.strip(), mode="eval"))


_ALLOWED_NODES: tuple[type, ...] = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp,
    ast.Call, ast.Name, ast.Constant, ast.Load,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
    ast.USub, ast.UAdd, ast.Not, ast.And, ast.Or,
    ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
)  # fmt: skip

_NODE_NAMES: dict[type, str] = {
    ast.Attribute: "attribute access",
    ast.Subscript: "subscripts",
    ast.Slice: "slices",
    ast.Lambda: "lambda",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions",
    ast.NamedExpr: "assignment (:=)",
    ast.Starred: "star arguments",
    ast.JoinedStr: "f-strings",
    ast.List: "list literals",
    ast.Tuple: "tuple literals",
    ast.Set: "set literals",
    ast.Dict: "dict literals",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.BitAnd: "operator '&' (use 'and')",
    ast.BitOr: "operator '|' (use 'or')",
    ast.BitXor: "operator '^' (use '**' for powers)",
    ast.LShift: "operator '<<'",
    ast.RShift: "operator '>>'",
    ast.Invert: "operator '~' (use 'not')",
    ast.MatMult: "operator '@'",
    ast.In: "'in'",
    ast.NotIn: "'not in'",
    ast.Is: "'is' (use '==')",
    ast.IsNot: "'is not' (use '!=')",
}

_SYNTAX_HELP = (
    "use numbers, quoted strings, params, key dims, + - * / // % **, comparisons, and/or/not, "
    "'x if c else y' and the functions " + ", ".join(FUNCTIONS)
)


def parse_constraint(text: str, allowed_names: Iterable[str], line: int | None = None) -> Constraint:
    """Parse and whitelist a constraint; raise :class:`ConstraintError` (a ValueError) if bad.

    Only the syntax listed in ``_SYNTAX_HELP`` is accepted, and every name must
    be in ``allowed_names`` (params and key dims) or be a call to one of
    :data:`FUNCTIONS`. Checking here means a typo fails at load time, not in the
    middle of a tuning run.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConstraintError(
            f"constraint must be a non-empty string, got {quoted(text)}",
            "write a Python expression such as 'BLOCK_M <= 128'"
        )
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ConstraintError(f"expression of {len(text)} characters is too long (at most {MAX_EXPRESSION_LENGTH})",
                              "split it into several constraints, or simplify it")
    allowed = frozenset(allowed_names)
    tree = _parse_expression(text)
    names = _check_tree(tree, text, allowed)
    tree = ast.fix_missing_locations(_PowToCall().visit(tree))
    code = compile(tree, f"<constraint {text.strip()!r}>", "eval")
    return Constraint(text=text.strip(), names=names, line=line, _code=code)


def _parse_expression(text: str) -> ast.Expression:
    """ast.parse in eval mode, with the syntax error turned into a ConstraintError."""
    try:
        return ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        col = f" at column {e.offset}" if e.offset else ""
        raise ConstraintError(
            f"constraint {quoted(text.strip())} is not a valid expression ({e.msg}{col})", _SYNTAX_HELP
        ) from None


def _check_tree(tree: ast.Expression, text: str, allowed: frozenset[str]) -> frozenset[str]:
    """Reject disallowed nodes and names; return the variable names used."""
    call_targets = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    names: set[str] = set()
    for node in ast.walk(tree):
        _check_node(node, text)
        if isinstance(node, ast.Call):
            _check_call(node, text)
        elif isinstance(node, ast.Name) and id(node) not in call_targets:
            _check_name(node.id, text, allowed)
            names.add(node.id)
    return frozenset(names)


def _check_node(node: ast.AST, text: str) -> None:
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (bytes, complex))):
        raise ConstraintError(f"constraint {quoted(text)}: constant {quoted(node.value)} is not allowed", _SYNTAX_HELP)
    if not isinstance(node, _ALLOWED_NODES):
        what = _NODE_NAMES.get(type(node), type(node).__name__)
        raise ConstraintError(f"constraint {quoted(text)}: {what} is not allowed", _SYNTAX_HELP)


def _check_call(node: ast.Call, text: str) -> None:
    fn = node.func
    if isinstance(fn, ast.Attribute):
        raise ConstraintError(
            f"constraint {quoted(text)}: attribute access ({quoted(ast.unparse(fn))}) is not allowed", _SYNTAX_HELP
        )
    if not isinstance(fn, ast.Name) or fn.id not in FUNCTIONS:
        shown = fn.id if isinstance(fn, ast.Name) else ast.unparse(fn)
        raise ConstraintError(
            f"constraint {quoted(text)}: call to {quoted(shown)} is not allowed",
            "call only " + ", ".join(FUNCTIONS),
        )
    if node.keywords:
        raise ConstraintError(
            f"constraint {quoted(text)}: keyword arguments are not allowed in {fn.id}()", "pass arguments by position"
        )
    lo, hi = _ARITY[fn.id]
    n = len(node.args)
    if n < lo or (hi is not None and n > hi):
        want = str(lo) if lo == hi else f"at least {lo}"
        raise ConstraintError(
            f"constraint {quoted(text)}: {fn.id}() takes {want} argument(s), got {n}",
            f"call {fn.id} with {want} argument(s)"
        )


def _check_name(name: str, text: str, allowed: frozenset[str]) -> None:
    if name in allowed:
        return
    if name in FUNCTIONS:
        raise ConstraintError(
            f"constraint {quoted(text)}: function {quoted(name)} used without calling it", f"call it, e.g. {name}(...)"
        )
    close = difflib.get_close_matches(name, sorted(allowed), n=1)
    hint = f"did you mean {quoted(close[0])}? Otherwise " if close else ""
    known = shorten(", ".join(sorted(allowed)), 240) or "(none)"
    raise ConstraintError(
        f"constraint {quoted(text)} uses unknown name {quoted(name)}",
        f"{hint}use only space params and key dims ({known}) or the functions {', '.join(FUNCTIONS)}",
    )
