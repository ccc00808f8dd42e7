"""Tests for aot_tune.manifest: a kernel's baselines, cost and compile cost, and its search block."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from manifest_cases import BASE, edit, fail, line_of, load

from aot_tune.manifest import SearchSettings, load_manifest

REPO = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- baselines and cost

BASELINES = edit("""    shapes:
      - {ROWS: 4, COLS: 128}
""", """    shapes:
      - {ROWS: 4, COLS: 128}
    default_config: {BLOCK: "max(128, next_pow2(COLS))", num_warps: 4}
    vendor: kernels.softmax:vendor
    cost: {bytes: "2 * ROWS * COLS * dtype_bytes", flops: 0}
""")


def test_baselines_and_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = load(tmp_path, monkeypatch, BASELINES)
    softmax = m.kernel("softmax")
    assert softmax.vendor == "kernels.softmax:vendor"
    assert softmax.default_config.resolve({"ROWS": 4, "COLS": 300}).as_dict() == {"BLOCK": 512, "num_warps": 4}
    assert softmax.default_config.resolve({"ROWS": 1, "COLS": 16}).as_dict() == {"BLOCK": 128, "num_warps": 4}
    work = softmax.cost.work({"ROWS": 4, "COLS": 128}, "float32")
    assert (work.flops, work.bytes) == (0.0, 2 * 4 * 128 * 4)
    pickle.loads(pickle.dumps(m))  # specs travel to worker processes
    gemm = m.kernel("gemm")
    assert (gemm.default_config, gemm.vendor, gemm.cost) == (None, None, None)


def test_repository_manifest_declares_every_baseline() -> None:
    m = load_manifest(REPO / "tuning.yaml")
    for spec in m.kernels:
        assert spec.default_config is not None and spec.vendor and spec.cost, spec.name


@pytest.mark.parametrize("old,new,needle,key", [
    ('num_warps: 4}\n    vendor', 'num_warps: 3}\n    vendor', "num_warps must be", "default_config.num_warps"),
    ('BLOCK: "max(128, next_pow2(COLS))", ', '', "missing param(s) BLOCK", "default_config"),
    ('num_warps: 4}\n    vendor', 'num_warps: 4, BLOK: 1}\n    vendor', "did you mean 'BLOCK'", "default_config.BLOK"),
    ('"max(128, next_pow2(COLS))"', '"max(128, next_pow2(C))"', "unknown name 'C'", "default_config.BLOCK"),
    ('"max(128, next_pow2(COLS))"', '"128 // (COLS - 128)"', "ZeroDivisionError", "default_config.BLOCK"),
    ('"max(128, next_pow2(COLS))"', '"COLS > 3"', "make it a number", "default_config.BLOCK"),
    ("vendor: kernels.softmax:vendor", "vendor: kernels.softmax.vendor", "separate the attribute", "vendor"),
    ('bytes: "2 * ROWS * COLS * dtype_bytes"', 'bytes: "2 * ROWS * dtype"', "unknown name 'dtype'", "cost.bytes"),
    ('flops: 0', 'flops: "-ROWS"', "non-negative", "cost.flops"),
    ('flops: 0', 'flop: 0', "did you mean 'flops'", "cost.flop"),
    ('flops: 0', 'flops: [1]', "expected a number or an expression", "cost.flops"),
])
def test_baseline_and_cost_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old, new, needle, key) -> None:
    text = edit(old, new, BASELINES)
    err = fail(tmp_path, monkeypatch, text)
    assert err.key == f"kernels.softmax.{key}", str(err)
    assert needle in str(err), str(err)
    assert err.line is not None and text.splitlines()[err.line - 1].strip(), str(err)


def test_empty_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    err = fail(tmp_path, monkeypatch, edit('cost: {bytes: "2 * ROWS * COLS * dtype_bytes", flops: 0}', "cost: {}",
                                           BASELINES))
    assert err.key == "kernels.softmax.cost" and "no cost given" in str(err)


COMPILE_COST = edit("""    shapes:
      - {ROWS: 4, COLS: 128}
""", """    shapes:
      - {ROWS: 4, COLS: 128}
    compile_cost: "BLOCK / num_warps"
""")


def test_compile_cost_is_evaluated_over_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    softmax = load(tmp_path, monkeypatch, COMPILE_COST).kernel("softmax")
    assert softmax.compile_cost.evaluate({"BLOCK": 256, "num_warps": 4}) == 64
    assert load(tmp_path, monkeypatch, BASE).kernel("gemm").compile_cost is None


@pytest.mark.parametrize("new,needle", [
    ('compile_cost: "BLOCK / ROWS"', "unknown name 'ROWS'"),            # a key dim: compiles serve many shapes
    ('compile_cost: "BLOCK - 200"', "non-negative"),                    # negative for BLOCK 128
    ('compile_cost: "BLOCK > 128"', "non-negative number"),             # a bool
    ('compile_cost: "BLOCK // (num_warps - 4)"', "ZeroDivisionError"),
    ("compile_cost: [BLOCK]", "expected an expression string"),
])
def test_compile_cost_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new, needle) -> None:
    text = edit('compile_cost: "BLOCK / num_warps"', new, COMPILE_COST)
    err = fail(tmp_path, monkeypatch, text)
    assert err.key == "kernels.softmax.compile_cost", str(err)
    assert needle in str(err), str(err)
    assert "compile_cost" in text.splitlines()[err.line - 1], str(err)


# --------------------------------------------------------------------------- search strategies


def test_search_defaults_to_exhaustive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    g = load(tmp_path, monkeypatch, BASE).kernel("gemm")
    assert g.search == SearchSettings() and g.search.exhaustive
    assert g.search.canonical() == {"strategy": "exhaustive"}


def test_search_block_merges_over_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = edit("  bench: {warmup_ms: 10}\n",
                "  bench: {warmup_ms: 10}\n  search: {strategy: surrogate, budget: {configs: 40}, seed: 3}\n")
    text = edit("    bench: {rep_ms: 50, l2_flush: false}\n",
                "    bench: {rep_ms: 50, l2_flush: false}\n"
                "    search:\n      strategy: successive_halving\n      budget: {seconds: 2.5}\n      eta: 4\n", text)
    m = load(tmp_path, monkeypatch, text)
    assert m.kernel("gemm").search == SearchSettings("surrogate", 40, None, 3)
    sh = m.kernel("softmax").search  # its own strategy and budget; the seed is inherited
    assert sh == SearchSettings("successive_halving", None, 2.5, 3, True, 4, 3)
    assert sh.canonical() == {"strategy": "successive_halving", "budget": {"seconds": 2.5}, "seed": 3,
                              "transfer": True, "eta": 4, "rungs": 3}
    assert sh.describe() == "successive_halving, 2.5 s per shape"


def test_options_of_another_strategy_are_not_inherited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = edit("  bench: {warmup_ms: 10}\n", "  bench: {warmup_ms: 10}\n  search: {strategy: successive_halving, "
                "budget: {configs: 30}, eta: 4, transfer: false}\n")
    text = edit("    bench: {rep_ms: 50, l2_flush: false}\n",
                "    bench: {rep_ms: 50, l2_flush: false}\n    search: {strategy: random}\n", text)
    text = edit("    constraints:\n      - \"BLOCK_M * BLOCK_K",
                "    search: {strategy: exhaustive}\n    constraints:\n      - \"BLOCK_M * BLOCK_K", text)
    m = load(tmp_path, monkeypatch, text)
    assert m.kernel("softmax").search == SearchSettings("random", 30, None, 0)  # eta, transfer dropped
    assert m.kernel("gemm").search == SearchSettings()  # budget dropped too


def test_ranked_needs_no_budget_and_takes_one_as_a_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = edit("  bench: {warmup_ms: 10}\n", "  bench: {warmup_ms: 10}\n  search: {strategy: ranked}\n")
    text = edit("    bench: {rep_ms: 50, l2_flush: false}\n",
                "    bench: {rep_ms: 50, l2_flush: false}\n    search: {budget: {configs: 40}}\n", text)
    m = load(tmp_path, monkeypatch, text)
    free, capped = m.kernel("gemm").search, m.kernel("softmax").search
    assert free == SearchSettings("ranked") and not free.exhaustive
    assert free.canonical() == {"strategy": "ranked"} and free.describe() == "ranked"
    assert capped == SearchSettings("ranked", 40)
    assert capped.canonical() == {"strategy": "ranked", "budget": {"configs": 40}}
    assert capped.describe(" from h200 (triton 3.6.0)") == \
        "ranked from h200 (triton 3.6.0), at most 40 configs per shape"


@pytest.mark.parametrize("block, needle, problem, fix", [
    ("{strategy: sucessive_halving, budget: {configs: 4}}", "sucessive", "unknown strategy 'sucessive_halving'",
     "did you mean 'successive_halving'?"),
    ("{strategy: rankd}", "rankd", "unknown strategy 'rankd'", "did you mean 'ranked'?"),
    ("{strategy: ranked, seed: 1}", "seed: 1", "strategy ranked does not take 'seed'",
     "remove it (strategy ranked takes: budget)"),
    ("{strategy: ranked, budget: {configs: 0}}", "strategy: ranked", "expected a positive integer, got 0",
     "configs measured per shape"),
    ("{strategy: surrogate}", "strategy: surrogate", "strategy surrogate needs a budget per shape",
     "budget: {configs: 40}"),
    ("{strategy: random, budget: {configs: 4, seconds: 1}}", "strategy: random",
     "expected one of configs or seconds, got 2 keys", "budget: {seconds: 2.0}"),
    ("{strategy: random, budget: {configs: 0}}", "strategy: random", "expected a positive integer, got 0",
     "configs measured per shape"),
    ("{strategy: random, budget: {minutes: 1}}", "strategy: random", "unknown key 'minutes'", ""),
    ("{strategy: random, budget: {configs: 4}, eta: 3}", "strategy: random", "strategy random does not take 'eta'",
     "strategy random takes: budget, seed"),
    ("{strategy: surrogate, budget: {configs: 4}, transfer: yes please}", "strategy: surrogate",
     "expected true or false", "transfer: true"),
    ("{strategy: successive_halving, budget: {configs: 4}, rungs: 1}", "strategy: successive_halving",
     "expected an integer >= 2, got 1", "rungs: 3"),
    ("{strategy: exhaustive, budget: {configs: 4}}", "strategy: exhaustive",
     "exhaustive measures every config and takes no 'budget'", "choose strategy: random"),
    ("surrogate", "search: surrogate", "expected a mapping, got 'surrogate'",
     "search: {strategy: surrogate, budget: {configs: 40}}"),
])
def test_bad_search_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block, needle, problem, fix) -> None:
    text = edit("    bench: {rep_ms: 50, l2_flush: false}\n",
                f"    bench: {{rep_ms: 50, l2_flush: false}}\n    search: {block}\n")
    err = fail(tmp_path, monkeypatch, text)
    assert err.line == line_of(text, needle) and err.key.startswith("kernels.softmax.search"), str(err)
    assert problem in str(err) and fix in err.fix, str(err)


