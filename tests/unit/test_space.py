"""Tests for aot_tune.space: expansion, constraints, stable ids, the whitelist."""

from __future__ import annotations

import time

import pytest

from aot_tune.space import (
    LAUNCH_OPTIONS,
    Config,
    ConfigSpace,
    ConstraintError,
    cdiv,
    is_pow2,
    next_pow2,
    parse_constraint,
)

PARAMS = (
    ("BLOCK_M", (32, 64, 128, 256)),
    ("BLOCK_N", (32, 64, 128, 256)),
    ("BLOCK_K", (32, 64, 128, 256)),
    ("GROUP_M", (8,)),
    ("num_warps", (2, 4, 8)),
    ("num_stages", (3, 4, 5)),
)
NAMES = [p for p, _ in PARAMS] + ["M", "N", "K"]


def space(*constraints: str) -> ConfigSpace:
    return ConfigSpace(PARAMS, tuple(parse_constraint(c, NAMES) for c in constraints))


# --------------------------------------------------------------------------- expansion


def test_expansion_without_constraints() -> None:
    s = space()
    assert s.size() == 4 * 4 * 4 * 1 * 3 * 3 == 576
    assert len(set(s.configs())) == 576


def test_expansion_order_is_file_order_last_fastest() -> None:
    s = ConfigSpace((("B", (1, 2)), ("A", (10, 20))))
    assert [c.as_dict() for c in s.configs()] == [
        {"B": 1, "A": 10}, {"B": 1, "A": 20}, {"B": 2, "A": 10}, {"B": 2, "A": 20},
    ]  # fmt: skip


def test_shape_independent_constraints_prune() -> None:
    s = space("BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N <= 65536")
    expected = (
        sum(
            1
            for m in (32, 64, 128, 256)
            for n in (32, 64, 128, 256)
            for k in (32, 64, 128, 256)
            if m * k + k * n <= 65536
        )
        * 9
    )
    assert s.size() == expected < 576
    assert all(
        c.as_dict()["BLOCK_M"] * c.as_dict()["BLOCK_K"] + c.as_dict()["BLOCK_K"] * c.as_dict()["BLOCK_N"] <= 65536
        for c in s.configs()
    )


def test_shape_dependent_constraints_apply_only_per_shape() -> None:
    s = space("BLOCK_M <= max(32, next_pow2(M))", "BLOCK_N <= N")
    assert s.size() == 576  # no shape, no pruning
    small = s.configs_for({"M": 40, "N": 64, "K": 16})
    assert {c.as_dict()["BLOCK_M"] for c in small} == {32, 64}
    assert {c.as_dict()["BLOCK_N"] for c in small} == {32, 64}
    assert len(small) == 2 * 2 * 4 * 9
    assert len(s.configs_for({"M": 4096, "N": 4096, "K": 16})) == 576


def test_configs_for_without_dependent_constraints_equals_configs() -> None:
    s = space("BLOCK_M >= BLOCK_N")
    assert s.configs_for({"M": 1, "N": 1, "K": 1}) == s.configs()


def test_configs_for_missing_dim_raises() -> None:
    s = space("BLOCK_M <= M")
    with pytest.raises(ValueError, match="needs M"):
        s.configs_for({"N": 4})


def test_evaluation_error_names_constraint_and_config() -> None:
    s = space("BLOCK_M // (M - 64) >= 0")
    with pytest.raises(ValueError) as info:
        s.configs_for({"M": 64, "N": 1, "K": 1})
    msg = str(info.value)
    assert "BLOCK_M // (M - 64) >= 0" in msg and "BLOCK_M=32" in msg and "ZeroDivisionError" in msg
    assert isinstance(info.value, ConstraintError) and info.value.constraint is s.constraints[0]


def test_expansion_is_fast() -> None:
    start = time.perf_counter()
    s = space(
        "BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N <= 65536",
        "num_warps * 32 <= BLOCK_M * BLOCK_N // 16",
        "BLOCK_M <= max(32, next_pow2(M))",
    )
    s.configs_for({"M": 128, "N": 128, "K": 128})
    assert time.perf_counter() - start < 0.05


def test_configs_returns_a_fresh_list() -> None:
    s = space()
    s.configs().clear()
    assert s.size() == 576


# --------------------------------------------------------------------------- configs and ids


def test_config_id_is_stable() -> None:
    # Regression guard: ids are checked into generated tables and compared
    # across machines, so this value must never change.
    c = Config.from_dict({"num_stages": 3, "BLOCK_N": 128, "num_warps": 4, "BLOCK_M": 64})
    assert c.id == "325089dcbf"
    assert (
        Config.from_dict({"BLOCK_M": 64, "EVEN": True, "ORDER": "row", "SCALE": 0.5, "num_warps": 4}).id == "31a07570c3"
    )


def test_config_ids_distinct_and_types_matter() -> None:
    ids = [c.id for c in space().configs()]
    assert len(set(ids)) == len(ids) == 576
    assert all(len(i) == 10 and int(i, 16) >= 0 for i in ids)
    assert Config.from_dict({"A": 1}).id != Config.from_dict({"A": True}).id
    assert Config.from_dict({"A": 1}).id != Config.from_dict({"A": 1.0}).id


def test_config_views() -> None:
    c = Config.from_dict({"num_stages": 3, "BLOCK_N": 128, "num_warps": 4, "BLOCK_M": 64})
    assert c.params == (("BLOCK_M", 64), ("BLOCK_N", 128), ("num_stages", 3), ("num_warps", 4))
    assert c.constexprs == {"BLOCK_M": 64, "BLOCK_N": 128}
    assert list(c.launch_options) == ["num_warps", "num_stages"]
    assert c.label() == "BLOCK_M=64 BLOCK_N=128 num_warps=4 num_stages=3"
    assert Config.from_dict(c.as_dict()) == c and hash(Config.from_dict(c.as_dict())) == hash(c)
    assert set(LAUNCH_OPTIONS) == {"num_warps", "num_stages", "num_ctas", "maxnreg"}


def test_canonical_ignores_param_order_and_whitespace() -> None:
    a = ConfigSpace((("A", (1, 2)), ("B", (3,))), (parse_constraint("A<B", ["A", "B"]),))
    b = ConfigSpace((("B", (3,)), ("A", (1, 2))), (parse_constraint("  A <  B ", ["A", "B"]),))
    c = ConfigSpace((("A", (1, 2)), ("B", (3,))), (parse_constraint("A <= B", ["A", "B"]),))
    assert a.canonical() == b.canonical() != c.canonical()


# --------------------------------------------------------------------------- constraint language


@pytest.mark.parametrize(
    "text",
    [
        "BLOCK_M <= 128",
        "32 <= BLOCK_M < 256",
        "not (BLOCK_M == 32 and num_warps > 4) or BLOCK_N != 64",
        "-BLOCK_M + 2 ** 3 * BLOCK_N // 4 % 7 / 2 < M",
        "(BLOCK_M if M > 64 else 32) >= 32",
        "cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) >= 1",
        "is_pow2(BLOCK_M) and log2(BLOCK_M) <= 8 and abs(-M) == M and min(M, N, K) > 0",
        "GROUP_M == 8 or True",
    ],
)
def test_allowed_syntax(text: str) -> None:
    c = parse_constraint(text, NAMES, line=7)
    assert c.line == 7 and c.names <= set(NAMES)
    assert isinstance(c.holds({n: 64 for n in NAMES}), bool)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("BLOCK_M.bit_length() > 3", "attribute access"),
        ("M.real > 3", "attribute access"),
        ("__import__('os')", "'__import__' is not allowed"),
        ("(lambda: 1)()", "not allowed"),
        ("(lambda x: x)", "lambda"),
        ("[1, 2][0] > 0", "subscripts"),
        ("sum(x for x in [1])", "not allowed"),
        ("open('f')", "'open' is not allowed"),
        ("BLOCK_M & 3", "'&'"),
        ("BLOCK_M in (1, 2)", "not allowed"),
        ("(x := 3) > 2", "not allowed"),
        ("max(M, key=N)", "keyword"),
        ("cdiv(M)", "takes 2"),
        ("max", "without calling"),
        ("BLOCK_M <=", "not a valid expression"),
        ("", "non-empty"),
    ],
)
def test_disallowed_syntax_rejected(text: str, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_constraint(text, NAMES)
    assert needle in str(info.value)


def test_unknown_name_rejected_with_suggestion() -> None:
    with pytest.raises(ConstraintError) as info:
        parse_constraint("BLOCK_MM <= 128", NAMES)
    assert "unknown name 'BLOCK_MM'" in info.value.problem
    assert "did you mean 'BLOCK_M'" in info.value.fix


def test_builtins_unavailable_at_eval_time() -> None:
    c = parse_constraint("M > 0", ["M"])
    with pytest.raises(NameError):
        c.holds({})  # no fallback to real builtins or globals


def test_helper_functions() -> None:
    assert [cdiv(a, 4) for a in (1, 4, 5, 8)] == [1, 1, 2, 2]
    assert [next_pow2(x) for x in (0, 1, 2, 3, 5, 64, 65)] == [1, 1, 2, 4, 8, 64, 128]
    assert [is_pow2(x) for x in (0, 1, 2, 3, 64, 96, -4, 2.0, True)] == [
        False,
        True,
        True,
        False,
        True,
        False,
        False,
        True,
        False,
    ]
