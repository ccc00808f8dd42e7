"""``aot_tune.untuned`` over each way a library stacks its decorators, under the Triton interpreter:
the autotuner is gone (a passed config is the one launched), the heuristics stay (their values are
computed), the chosen config's own pre_hook runs, and the result matches the library's own call."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import aot_tune
from aot_tune.errors import TuneError
from aot_tune.runtime.untuned import ConfigPreHooks

CONFIGS = [triton.Config({"BLOCK": 16}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2)]
HEURISTICS = {"HAS_FACTOR": lambda args: args["factor"] != 1.0}


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr, HAS_FACTOR: tl.constexpr):
    """out = x * factor (x where the heuristics say the factor is 1)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if HAS_FACTOR:
        x = x * factor
    tl.store(out_ptr + offs, x, mask=mask)


def stacked(stacking: str):
    """``scale_kernel`` decorated as a library would: outermost decorator first."""
    autotune = triton.autotune(configs=CONFIGS, key=["n"])
    heuristics = triton.heuristics(HEURISTICS)
    return {"autotune>heuristics": lambda: autotune(heuristics(scale_kernel)),
            "heuristics>autotune": lambda: heuristics(autotune(scale_kernel)),
            "aot_tune>heuristics": lambda: aot_tune.autotune(configs=CONFIGS, key=["n"], table="untuned_probe")(
                heuristics(scale_kernel))}[stacking]()


def launch(kernel, n: int, factor: float, seen: list, **config) -> torch.Tensor:
    """The library's launch, recording the meta-parameters the grid sees."""
    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)

    def grid(meta):
        seen.append({k: meta[k] for k in ("BLOCK", "HAS_FACTOR") if k in meta})
        return (triton.cdiv(n, meta["BLOCK"]),)

    kernel[grid](x, out, n, factor, **config)
    return out


@pytest.mark.filterwarnings("ignore::aot_tune.runtime.TuningWarning")  # no table for aot_tune's own launch
@pytest.mark.parametrize("stacking", ["autotune>heuristics", "heuristics>autotune", "aot_tune>heuristics"])
@pytest.mark.parametrize("factor", [1.0, 3.0])
def test_a_passed_config_is_launched_with_the_heuristics_kept(stacking, factor):
    kernel = stacked(stacking)
    beneath = aot_tune.untuned(kernel)
    assert beneath is aot_tune.untuned(kernel)  # memoized: a launch pays a dict lookup
    for config in ({"BLOCK": 16, "num_warps": 1}, {"BLOCK": 64, "num_warps": 2, "num_stages": 1}):
        seen: list = []
        out = launch(beneath, 100, factor, seen, **config)
        assert seen == [{"BLOCK": config["BLOCK"], "HAS_FACTOR": factor != 1.0}]
        torch.testing.assert_close(out, torch.arange(100, dtype=torch.float32) * factor)
    with pytest.raises(Exception, match="BLOCK"):  # the autotuner itself refuses a passed config
        launch(kernel, 100, factor, [], BLOCK=16)


def test_what_stays_is_the_librarys_own_object_where_nothing_above_it_changed():
    plain = triton.autotune(configs=CONFIGS, key=["n"])(scale_kernel)
    assert aot_tune.untuned(plain) is scale_kernel
    inner = triton.heuristics(HEURISTICS)(scale_kernel)
    assert aot_tune.untuned(triton.autotune(configs=CONFIGS, key=["n"])(inner)) is inner
    assert aot_tune.untuned(scale_kernel) is scale_kernel and aot_tune.untuned(inner) is inner  # nothing to remove
    over = aot_tune.untuned(triton.heuristics(HEURISTICS)(plain))
    assert type(over) is type(inner) and over.fn is scale_kernel and over.values == HEURISTICS
    tuned = aot_tune.autotune(configs=CONFIGS, key=["n"], table="untuned_probe")(scale_kernel)
    assert aot_tune.untuned(tuned) is scale_kernel


def test_the_chosen_configs_own_pre_hook_runs_and_prune_and_reset_do_not():
    calls: list = []
    configs = [triton.Config({"BLOCK": 16}, num_warps=1, pre_hook=lambda a: calls.append(("16", a["n"]))),
               triton.Config({"BLOCK": 64}, num_warps=2, pre_hook=lambda a: calls.append(("64", a["n"])))]
    prune = {"early_config_prune": lambda configs, named, **kw: calls.append("pruned") or configs[:1]}
    kernel = triton.heuristics(HEURISTICS)(triton.autotune(configs=configs, key=["n"], prune_configs_by=prune,
                                                           reset_to_zero=["out_ptr"])(scale_kernel))
    beneath = aot_tune.untuned(kernel)
    assert isinstance(beneath.fn, ConfigPreHooks)
    out = launch(beneath, 40, 2.0, [], BLOCK=64, num_warps=2)
    assert calls == [("64", 40)]
    torch.testing.assert_close(out, torch.arange(40, dtype=torch.float32) * 2.0)
    calls.clear()
    torch.testing.assert_close(launch(kernel, 40, 2.0, []), out)  # the library's own call: pruned to BLOCK 16
    assert calls == ["pruned", ("16", 40)]


def test_something_that_is_not_a_kernel_is_one_line():
    with pytest.raises(TuneError, match=r"aot_tune.untuned: .* is not a Triton kernel .*; fix: pass the @triton.jit"):
        aot_tune.untuned(lambda x: x)


def test_while_tuning_a_launch_through_the_autotuner_is_refused_and_one_beneath_it_is_not():
    from aot_tune import triton_compat

    kernel = triton.heuristics(HEURISTICS)(triton.autotune(configs=CONFIGS, key=["n"])(scale_kernel))
    with triton_compat.autotuners_refused(kernel, TuneError("refused")):
        with pytest.raises(TuneError, match="refused"):
            launch(kernel, 40, 2.0, [])
        launch(aot_tune.untuned(kernel), 40, 2.0, [], BLOCK=16)
    assert "run" not in vars(kernel.fn)  # the autotuner is as it was
