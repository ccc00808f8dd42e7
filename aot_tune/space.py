"""Config spaces and stable config ids.

A space is either a grid (named parameters, each with a list of candidate values, whose
cartesian product is the candidates) or an explicit list of configs (``configs:``, e.g. a
``@triton.autotune`` decorator's own list), plus constraints that prune it. Constraints that
mention only parameters are *shape-independent* and are applied once by
:meth:`ConfigSpace.configs`; constraints that also mention key dims (M, N, ...) are applied per
shape by :meth:`ConfigSpace.configs_for`. The constraint language is :mod:`aot_tune.constraints`.

This module must not import torch or triton: it is loaded by the doit loader,
where start-up time matters.
"""

from __future__ import annotations

import itertools
import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

# re-exported: the names every caller of the space reads from here
from aot_tune.errors import quoted, shorten
from aot_tune.constraints import (FUNCTIONS, MAX_EXPRESSION_LENGTH, MAX_POWER_BITS, Constraint,  # noqa: F401
                                  ConstraintError, cdiv, is_pow2, log2, next_pow2, parse_constraint)

#: Most raw combinations (the product of every param's value count) a space may have: each is
#: checked against the constraints when the manifest loads.
MAX_SPACE_COMBINATIONS = 200_000

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
"""Triton launch options; every other space parameter is a kernel constexpr."""
#: A string value of a key dim (``activation: gelu``): part of task and file names.
KEY_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


# --------------------------------------------------------------------------- #
# Configs
# --------------------------------------------------------------------------- #


@dataclass(frozen=True, order=True)
class Config:
    """One point of a space: parameter values, sorted by name.

    Sorting by name makes equality, hashing and the id independent of the
    order in which the manifest lists parameters.
    """

    params: tuple[tuple[str, Any], ...]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Config:
        """Build a config from ``{param: value}`` (any order)."""
        return cls(tuple(sorted(d.items())))

    @functools.cached_property
    def id(self) -> str:
        """Stable short id: first 10 hex digits of sha256 over canonical JSON (computed once).

        JSON with sorted keys and no whitespace is identical on every machine
        and Python version, so ids can be checked in and compared across runs.
        """
        import hashlib  # deferred: OpenSSL start-up is ~2 ms the doit loader doesn't need

        return hashlib.sha256(self._canonical_json().encode("ascii")).hexdigest()[:10]

    def _canonical_json(self) -> str:
        return json.dumps(
            dict(self.params),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=True,
            allow_nan=False,
        )

    def as_dict(self) -> dict[str, Any]:
        """All params as a new dict."""
        return dict(self.params)

    @property
    def constexprs(self) -> dict[str, Any]:
        """Params passed to the kernel as ``tl.constexpr`` arguments."""
        return {k: v for k, v in self.params if k not in LAUNCH_OPTIONS}

    @property
    def launch_options(self) -> dict[str, Any]:
        """Params passed to the launcher (num_warps, ...), in LAUNCH_OPTIONS order."""
        d = dict(self.params)
        return {k: d[k] for k in LAUNCH_OPTIONS if k in d}

    def label(self) -> str:
        """Human-readable form: constexprs by name, then launch options."""
        items = [*self.constexprs.items(), *self.launch_options.items()]
        return " ".join(f"{k}={v}" for k, v in items)


# --------------------------------------------------------------------------- #
# Spaces
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class ConfigSpace:
    """Params with candidate values (file order) and the constraints that prune them.

    ``listed`` (a ``configs:`` list) replaces the grid: the candidates are exactly those configs,
    in list order, and ``params`` holds each param's values as they occur in the list."""

    params: tuple[tuple[str, tuple], ...]
    constraints: tuple[Constraint, ...] = ()
    listed: tuple[Config, ...] | None = None

    @classmethod
    def from_list(cls, configs: tuple[Config, ...], constraints: tuple[Constraint, ...] = ()) -> ConfigSpace:
        """The space of an explicit list; every config has the same param names."""
        names = [name for name, _ in configs[0].params]
        values = {name: tuple(dict.fromkeys(dict(c.params)[name] for c in configs)) for name in names}
        return cls(tuple(values.items()), constraints, tuple(configs))

    @cached_property
    def _param_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.params)

    @cached_property
    def _independent(self) -> tuple[Constraint, ...]:
        return tuple(c for c in self.constraints if c.names <= self._param_names)

    @cached_property
    def _dependent(self) -> tuple[Constraint, ...]:
        return tuple(c for c in self.constraints if not c.names <= self._param_names)

    @cached_property
    def _configs(self) -> tuple[Config, ...]:
        if self.listed is not None:
            return tuple(c for c in self.listed if _passes(self._independent, c.as_dict()))
        names = [name for name, _ in self.params]
        out = []
        for values in itertools.product(*(vals for _, vals in self.params)):
            env = dict(zip(names, values, strict=True))
            if _passes(self._independent, env):
                out.append(Config(tuple(sorted(env.items()))))
        return tuple(out)

    def configs(self) -> list[Config]:
        """All combinations (listed configs) passing the shape-independent constraints.

        Order is the list's, or the cartesian product in file order (last param
        varies fastest), so it is deterministic. Cached: the product is computed once.
        """
        return list(self._configs)

    def configs_for(self, shape: Mapping[str, int]) -> list[Config]:
        """Configs that also pass the shape-dependent constraints for ``shape``.

        Raises :class:`ConstraintError` (a ValueError) when the shape lacks a
        key dim a constraint needs, or a constraint fails to evaluate.
        """
        deps = self._dependent
        if not deps:
            return self.configs()
        memo = tuple(shape.items())
        found = self._by_shape.get(memo)
        if found is None:
            self._check_shape_names(shape, deps)
            shape_env = dict(shape)
            found = self._by_shape[memo] = tuple(c for c in self._configs if _passes(deps, {**shape_env, **c.as_dict()}))
        return list(found)

    @cached_property
    def _by_shape(self) -> dict[tuple, tuple[Config, ...]]:
        """``configs_for`` per shape: the manifest checks every shape at load, the plan asks again."""
        return {}

    def _check_shape_names(self, shape: Mapping[str, int], deps: tuple[Constraint, ...]) -> None:
        for c in deps:
            missing = c.names - self._param_names - shape.keys()
            if missing:
                have = ", ".join(shape) or "nothing"
                raise ConstraintError(
                    f"constraint {quoted(c.text)} needs {', '.join(sorted(missing))} but the shape has only {have}",
                    "give every key dim in the shape",
                    c,
                )

    def combinations(self) -> int:
        """Raw combinations of the params' values (the listed configs), before any constraint."""
        if self.listed is not None:
            return len(self.listed)
        return math.prod(len(values) for _, values in self.params)

    def size(self) -> int:
        """Number of configs passing the shape-independent constraints."""
        return len(self._configs)

    def canonical(self) -> str:
        """Canonical text of params and constraints, for fingerprints.

        Params are sorted by name (their order doesn't change the set of
        configs) and constraints are normalised with ``ast.unparse`` so that
        reformatting the manifest doesn't invalidate tuning results.
        """
        doc = {
            "params": [[name, list(vals)] for name, vals in sorted(self.params)],
            "constraints": [c.canonical() for c in self.constraints],
        }
        if self.listed is not None:
            doc["configs"] = [c.as_dict() for c in self.listed]
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


@dataclass(frozen=True)
class DefaultConfig:
    """The config a kernel runs untuned (the manifest's ``default_config``), measured as a
    baseline beside the tuned pick. Each value is a literal or an expression over the key dims,
    so a default that depends on the shape (one block spanning a row, say) can be written down."""

    values: tuple[tuple[str, Any], ...]  # param -> literal, or a Constraint used as an expression

    def resolve(self, shape: Mapping[str, int]) -> Config:
        env = dict(shape)
        return Config.from_dict({name: value.evaluate(env) if isinstance(value, Constraint) else value
                                 for name, value in self.values})


def _passes(constraints: tuple[Constraint, ...], env: dict[str, Any]) -> bool:
    """All constraints hold; an evaluation error names the constraint and the config."""
    for c in constraints:
        try:
            if not c.holds(env):
                return False
        except Exception as e:  # noqa: BLE001 - any failure inside user code is reported
            shown = " ".join(f"{k}={v}" for k, v in env.items())
            raise ConstraintError(
                f"constraint {quoted(c.text)} failed for {shown}: {type(e).__name__}: {shorten(str(e))}",
                "guard the expression, e.g. 'x if d != 0 else 0', or drop the values that break it",
                c,
            ) from e
    return True
