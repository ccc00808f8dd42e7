"""The compile stage on the CPU: real cross-compiles for sm80/sm90 through Triton's launch path,
in a compile worker process as in a run (this test process may have the interpreter switched on)."""
from __future__ import annotations

import pytest
from tunerun import REPO

from aot_tune import triton_compat
from aot_tune.build.compile import CompileRequest, CompileResult, compile_time_estimate, longest_first
from aot_tune.triton_compat import binary
from aot_tune.space import parse_constraint

pytest.importorskip("triton")


def gemm_request(config: dict, shapes: tuple[dict, ...], target: str = "sm90") -> CompileRequest:
    return CompileRequest(
        kernel="gemm", root=str(REPO), kernel_ref="kernels.gemm:matmul_kernel", launch_ref="kernels.gemm:matmul",
        inputs_ref="kernels.gemm:make_inputs", config=config, target=target, shapes=shapes, dtypes=("float16",),
    )


SMALL = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}


@pytest.fixture
def compile_config(compile_executors):
    def compile_one(request: CompileRequest, config_id: str) -> CompileResult:
        return compile_executors.compile(request, config_id)
    return compile_one


def test_one_compile_per_distinct_specialization(compile_config):
    aligned = {"M": 64, "N": 64, "K": 64}
    also_aligned = {"M": 128, "N": 64, "K": 96}   # every size and stride divisible by 16: same specialization
    unaligned = {"M": 33, "N": 65, "K": 47}       # not divisible by 16: another one
    result = compile_config(gemm_request(SMALL, (aligned, also_aligned, unaligned)), "small")
    assert result.valid, result.message
    assert len(result.specializations) == 2
    assert 0 < result.shared_bytes <= 232448 and result.seconds > 0


def test_registers_and_spills_are_read_from_the_cubin(compile_config):
    small = compile_config(gemm_request(SMALL, ({"M": 64, "N": 64, "K": 64},)), "small")
    assert small.resources_unknown == "" and 0 < small.registers <= 255 and small.spills == 0
    # A 128x256 fp32 accumulator on 4 warps needs 256 registers a thread: ptxas spills.
    spilling = {**SMALL, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32}
    big = compile_config(gemm_request(spilling, ({"M": 256, "N": 256, "K": 64},)), "spilling")
    assert big.valid and big.registers == 255 and big.spills > 0
    assert big.spills == (big.stack_bytes + big.local_bytes) // 4


def test_resources_are_unknown_with_a_reason_without_cuobjdump(monkeypatch):
    monkeypatch.setattr(binary, "cuobjdump_path", lambda: None)  # where resource_usage looks it up
    assert triton_compat.resource_usage(b"", "k") == "no cuobjdump in this Triton installation"
    monkeypatch.setattr(binary, "cuobjdump_path", lambda: "/bin/false")
    assert "gave no line for k" in triton_compat.resource_usage(b"not a cubin", "k")


def test_shared_memory_over_the_target_limit_is_invalid(compile_config):
    huge = {**SMALL, "BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 4}
    result = compile_config(gemm_request(huge, ({"M": 512, "N": 512, "K": 512},), "sm80"), "huge")
    assert result.status == "shared_memory"
    assert result.shared_bytes > 166912 and "sm80 allows 166912" in result.message
    assert result.registers is None and result.resources_unknown == "no cubin: the compile stopped (shared_memory)"


def test_a_kernel_compile_error_is_a_typed_result(compile_config):
    # tl.arange needs a power-of-two range: Triton refuses BLOCK_K=48 at compile time.
    result = compile_config(gemm_request({**SMALL, "BLOCK_K": 48}, ({"M": 64, "N": 64, "K": 64},)), "bad")
    assert result.status == "compile_error" and result.message


def test_an_unknown_parameter_is_a_launch_error_naming_it(compile_config):
    result = compile_config(gemm_request({**SMALL, "BLOCK_Q": 8}, ({"M": 64, "N": 64, "K": 64},)), "typo")
    assert result.status == "launch_error" and "BLOCK_Q" in result.message


def test_cost_estimate_orders_big_tiles_first():
    big = {**SMALL, "BLOCK_M": 256, "BLOCK_N": 256, "num_warps": 2}
    assert compile_time_estimate(big) > compile_time_estimate(SMALL)


def test_a_declared_compile_cost_ranks_before_the_generic_estimate():
    """The seed paper's space on sm90: a 256x256 tile on 2 warps with BLOCK_K 32 compiles for
    about 150 s, one with BLOCK_K 256 and a 128x256 tile for about 23 s; the generic product
    ranks the second first, the accumulator per warp the first."""
    declared = parse_constraint("BLOCK_M * BLOCK_N / num_warps", ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"))
    slow = {**SMALL, "BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 32, "num_warps": 2}
    fast = {**SMALL, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 256, "num_warps": 2}
    assert compile_time_estimate(fast)[0] > compile_time_estimate(slow)[0]
    assert compile_time_estimate(slow, declared) > compile_time_estimate(fast, declared)
    same_tile = {**slow, "BLOCK_K": 64}  # a tie in the declared cost falls back to the generic one
    assert compile_time_estimate(same_tile, declared) > compile_time_estimate(slow, declared)


def test_longest_first_puts_recorded_seconds_among_scaled_estimates():
    estimates = {"a": 10.0, "b": 20.0, "c": 40.0, "d": 30.0, "e": 5.0}
    recorded = {"a": 1.0, "b": 2.0, "e": 9.0}  # 0.1 s per unit of estimate; e took far longer than estimated
    order = longest_first(list(estimates), lambda k: (estimates[k], 0.0), recorded.get)
    assert order == ["e", "c", "d", "b", "a"]  # c and d: 4.0 and 3.0 s expected
    assert longest_first(list(estimates), lambda k: (estimates[k], 0.0), lambda k: None) == ["c", "d", "b", "a", "e"]
    assert longest_first(["x", "y"], lambda k: (1.0, 0.0), lambda k: None) == ["x", "y"]  # ties keep the input order


def vector_add_request(config: dict) -> CompileRequest:
    return CompileRequest(
        kernel="vector_add", root=str(REPO), kernel_ref="kernels.vector_add:add_kernel",
        launch_ref="kernels.vector_add:add", inputs_ref="kernels.vector_add:make_inputs", config=config,
        target="sm90", shapes=({"n": 1000}, {"n": 4096}), dtypes=("float16",),
    )


def test_a_decorated_kernel_compiles_the_forced_candidate(compile_config):
    """add_kernel is an @aot_tune.autotune object and add() passes no config: the compile stage
    unwraps the decorator to intercept the JITFunction, and the candidate reaches it forced."""
    result = compile_config(vector_add_request({"BLOCK_SIZE": 256, "num_warps": 2}), "ok")
    assert result.valid, result.message
    assert len(result.specializations) == 2  # n=1000 and n=4096 (divisible by 16) specialize differently
    bad = compile_config(vector_add_request({"BLOCK_SIZE": 384, "num_warps": 2}), "bad")
    assert bad.status == "compile_error"  # tl.arange(0, 384): the forced value, not a table's


def test_bench_compile_projects_a_chunk_by_its_share_of_the_worker_time(tmp_path):
    """One cheap config of four compiled alone cannot stand for a space whose costs span 100x:
    the projection scales it by its share of the fan-out's worker time, not by the config count."""
    import json
    import subprocess
    import sys

    def result(config_id: str, seconds: float) -> dict:
        return {"config_id": config_id, "status": "ok", "seconds": seconds}

    fan = {"pass": "fanout", "wall_s": 101.0, "jobs": 2, "cores": 2,
           "results": [result("big", 100.0), result("a", 1.0), result("b", 1.0), result("c", 1.0)]}
    seq = {"pass": "sequential", "wall_s": 0.9, "jobs": 2, "cores": 2, "results": [result("a", 0.9)]}
    (tmp_path / "fan.json").write_text(json.dumps(fan))
    (tmp_path / "seq.json").write_text(json.dumps(seq))
    out = subprocess.run([sys.executable, "-m", "tools.bench.bench_compile", "--report",
                          str(tmp_path / "fan.json"), str(tmp_path / "seq.json")],
                         cwd=REPO, capture_output=True, text=True, timeout=120, check=True).stdout
    assert "projected   sequential     92.7 s for all 4 configs, from 1 measured (0.9 s x 103.00" in out, out
    assert "0.92x  (fan-out vs PROJECTED sequential)" in out, out


#: Configs of the paper's space on both sides of sm90's 232448 bytes (fp16 A and B tiles, one per stage).
NEAR_THE_LIMIT = [
    {**SMALL, "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 4, "num_warps": 8},   # 196608: fits
    {**SMALL, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_stages": 5, "num_warps": 8},   # 163840: fits
    {**SMALL, "BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 128, "num_stages": 3, "num_warps": 8},   # 245760: over
    {**SMALL, "BLOCK_M": 256, "BLOCK_N": 32, "BLOCK_K": 128, "num_stages": 4, "num_warps": 8},   # 294912: over
]


def test_the_early_rejection_agrees_with_the_full_compile(compile_executors):
    """Stopped after ttgir exactly when the fully lowered kernel is over the limit, never for a
    config that fits, and with the same result fields as the full compile."""
    from aot_tune.build.compile import compile_config as compile_here

    pool = compile_executors._pool()
    for i, config in enumerate(NEAR_THE_LIMIT):
        request = gemm_request(config, ({"M": 4096, "N": 4096, "K": 4096},))
        early = pool.submit(compile_here, request, f"c{i}", stop_early=True).result()  # first: a full
        full = pool.submit(compile_here, request, f"c{i}", stop_early=False).result()  # compile is cached
        assert early.status == full.status, (config, early.message, full.message)
        assert full.ttgir_shared_bound <= full.shared_bytes
        if full.status == "shared_memory":
            assert early.rejected_at == "ttgir" and "llir" not in early.stage_seconds
            assert early.shared_bytes == full.shared_bytes and "sm90 allows 232448" in early.message
        else:
            assert early.rejected_at == "" and full.shared_bytes <= 232448
