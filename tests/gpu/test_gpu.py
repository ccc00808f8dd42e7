"""On a CUDA GPU: `doit tune` measures for real, the bench stage reuses every AOT compile, and
kernels launch with the tuned configs. Run with `python -m pytest -m gpu` on a GPU machine."""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
from tunerun import REPO, doit, make_project, subprocess_env, tune

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

MANIFEST = """\
version: 1
defaults:
  targets: [sm80, sm90]
  bench: {warmup_ms: 2, rep_ms: 5}
kernels:
  vector_add:
    kernel: kernels.vector_add:add_kernel
    launch: kernels.vector_add:add
    inputs: kernels.vector_add:make_inputs
    reference: kernels.vector_add:reference
    key: [n]
    space:
      BLOCK_SIZE: [256, 1024, 4096]
      num_warps: [4, 8]
    shapes: [{n: 100000}, {n: 1048576}]
  gemm:
    kernel: kernels.gemm:matmul_kernel
    launch: kernels.gemm:matmul
    inputs: kernels.gemm:make_inputs
    reference: kernels.gemm:reference
    key: [M, N, K]
    space:
      BLOCK_M: [64, 128, 256]
      BLOCK_N: [64, 256]
      BLOCK_K: [64, 256]
      GROUP_M: [8]
      num_stages: [4]
      num_warps: [4, 8]
    shapes: [{M: 512, N: 512, K: 512}, {M: 1000, N: 520, K: 264}]
    default_config: {BLOCK_M: 64, BLOCK_N: 64, BLOCK_K: 32, GROUP_M: 8, num_stages: 3, num_warps: 4}
    vendor: kernels.gemm:vendor
    cost: {flops: "2 * M * N * K"}
"""


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("gpu-project"), MANIFEST)
    return project, tune(project, backend="cuda")


def test_bench_stage_hits_every_aot_compile(tuned):
    _, proc = tuned
    rate = re.search(r"Triton cache hit rate (\d+)% \((\d+)/(\d+)\)", proc.stderr)
    assert rate, proc.stderr
    assert rate.group(1) == "100" and int(rate.group(3)) > 0


def test_oversized_configs_are_invalid_before_gpu_time(tuned):
    _, proc = tuned
    # BLOCK 256x256x256 with 4 stages needs far more than sm80/sm90's shared memory per block.
    assert "shared_memory" in proc.stderr


def test_tuned_tables_launch_correctly_on_this_gpu(tuned):
    project, _ = tuned
    code = textwrap.dedent("""
        import torch, warnings
        warnings.simplefilter("error")  # every launch below must find an exact tuned entry
        from kernels import gemm, vector_add
        from generated import gemm as table
        from aot_tune.runtime import current_device_key
        assert current_device_key() in table.TABLES, table.TABLES.keys()
        for M, N, K in [(512, 512, 512), (1000, 520, 264)]:
            a, b = gemm.make_inputs({"M": M, "N": N, "K": K}, torch.float16, "cuda")
            out, ref = gemm.matmul(a, b), gemm.reference(a, b)
            assert (out.float() - ref.float()).norm() / ref.float().norm() < 1e-2
        x, y = vector_add.make_inputs({"n": 100000}, torch.float16, "cuda")
        assert torch.equal(vector_add.add(x, y), vector_add.reference(x, y))
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True,
                         env=subprocess_env(project))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_baselines_are_measured_on_the_gpu_and_reported(tuned):
    """The default config (outside the space: compiled by the device worker, and not counted in
    the hit rate above) and torch.matmul, in the same bench task; the report shows both."""
    from aot_tune.cache import read_cache

    project, proc = tuned
    assert "baselines: default ok 2, vendor ok 2" in proc.stderr
    for record in read_cache(project / "generated" / "gemm.tuning.pb").records:
        assert record.default_baseline.median_ms > 0 and record.vendor_baseline.median_ms > 0
        assert record.vendor_baseline.method in ("events", "graph")
    report = doit(project, "report")
    assert report.returncode == 0, report.stderr
    assert "TFLOP/s" in (project / "report" / "summary.md").read_text()


def test_each_shapes_finalists_are_timed_again_side_by_side_and_hold_the_pick(tuned):
    """The fastest configs of a shape are timed again, interleaved in rounds, in a batch of their
    own: each finalist's samples come from every round and cover its share of ``rep_ms``, and the pick
    is one of them."""
    from aot_tune.cache import read_record
    from aot_tune.select import FINALS_MAX, FINALS_ROUNDS, FINALS_SHARE

    project, proc = tuned
    assert re.search(r"finals: \d+ configs of \d+ shapes timed again side by side", proc.stderr), proc.stderr
    had_finals = 0
    for path in (project / ".aot_tune" / "bench").rglob("*.pb"):
        record = read_record(path)
        final = [m for m in record.measurements if m.finalist]
        if not final:
            continue
        had_finals += 1
        assert 2 <= len(final) <= FINALS_MAX and record.best.id in {m.config.id for m in final}
        for m in final:
            assert m.status == "ok" and m.runs >= FINALS_ROUNDS
            assert sum(m.times_ms) * m.launches_per_sample >= 0.8 * 5 * FINALS_SHARE, m  # over the rounds
    assert had_finals >= 2


def test_second_run_executes_nothing_and_check_passes(tuned):
    project, _ = tuned
    proc = tune(project, backend="cuda")
    assert not [line for line in proc.stdout.splitlines() if line.startswith(".  ")]
    check = doit(project, "check")
    assert check.returncode == 0, check.stdout + check.stderr


def test_warm_start_launches_without_tritons_installation_hash(tuned, tmp_path):
    """A second process's first launch of a decorated kernel loads it through the warm-start
    index: correct output, and Triton's libtriton hash never runs."""
    project, _ = tuned
    code = textwrap.dedent("""
        import json
        import triton.runtime.cache as triton_cache
        calls = []
        original = triton_cache.triton_key
        triton_cache.triton_key = lambda: calls.append(1) or original()
        import torch
        from kernels import vector_add
        x, y = vector_add.make_inputs({"n": 1048576}, torch.float16, "cuda")
        ok = torch.equal(vector_add.add(x, y), vector_add.reference(x, y))
        print(json.dumps({"ok": ok, "triton_key_calls": len(calls)}))
    """)
    env = {**subprocess_env(project), "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, env=env)
        assert out.returncode == 0, out.stderr
        runs.append(out.stdout.strip().splitlines()[-1])
    assert runs == ['{"ok": true, "triton_key_calls": 1}', '{"ok": true, "triton_key_calls": 0}']


def test_device_workers_are_forks_of_the_fork_server(tmp_path):
    """Importing this CUDA build of torch loads the CUDA driver's library in the fork server
    without initializing it: a GPU worker is still a fork of the server (a spawned one would
    import torch again, seconds), and it opens its GPU."""
    code = textwrap.dedent("""
        from aot_tune.bench.local.pool import DevicePool
        pool = DevicePool("cuda", 1, "triton-cache")
        try:
            worker = pool.worker(0)
            print(type(worker.process).__name__, worker.info.name)
        finally:
            pool.close()
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env=subprocess_env(), timeout=300)
    assert out.returncode == 0, out.stderr
    assert "spawning" not in out.stderr, out.stderr
    assert out.stdout.split()[0] == "ForkServerProcess", out.stdout
    assert torch.cuda.get_device_name(0) in out.stdout


def test_a_device_worker_asked_for_while_the_server_imports_torch_is_spawned_and_opens_its_gpu(tmp_path):
    """A run asks for its GPU workers with its captures, while a fork server started for torch
    still imports: the first is spawned (it imports torch beside the server, not after it), opens
    its GPU, and is up before the server forks anything."""
    code = textwrap.dedent("""
        from aot_tune import forking
        from aot_tune.bench.local.pool import DevicePool
        forking.start_server(torch=True)
        assert forking.importing_torch()
        pool = DevicePool("cuda", 1, "triton-cache")
        try:
            worker = pool.worker(0)
            print(type(worker.process).__name__, worker.info.name, forking.importing_torch())
        finally:
            pool.close()
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env=subprocess_env(), timeout=300)
    assert out.returncode == 0, out.stderr
    kind, *name, still_importing = out.stdout.split()
    assert kind == "SpawnProcess" and " ".join(name) == torch.cuda.get_device_name(0), out.stdout
    assert still_importing == "True"  # nothing was forked from the server meanwhile


def test_the_early_worker_becomes_the_pools_first_gpu_worker_and_measures(tmp_path):
    """The worker a run spawns before its planning (aot_tune.bench.local.early) is the pool's
    first GPU worker: the same process, on this GPU, and it measures a config as any other does;
    a second device index gets a worker of its own kind."""
    code = textwrap.dedent("""
        from aot_tune.bench.local import early
        from aot_tune.bench.local.pool import DevicePool
        early.start()
        pid = early._early[0].pid
        pool = DevicePool("cuda", 1, "triton-cache")
        try:
            worker = pool.worker(0)
            print(worker.process.pid == pid, early.take() is None, worker.info.name)
        finally:
            pool.close()
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env=subprocess_env(), timeout=300)
    assert out.returncode == 0, out.stderr
    same, taken, *name = out.stdout.split()
    assert same == "True" and taken == "True" and " ".join(name) == torch.cuda.get_device_name(0), out.stdout


def test_successive_halving_times_short_then_full_and_picks_a_full_timing(tmp_path):
    manifest = MANIFEST.replace("  bench: {warmup_ms: 2, rep_ms: 5}", "  bench: {warmup_ms: 2, rep_ms: 18}\n"
                                "  search: {strategy: successive_halving, budget: {configs: 9}}")
    project = make_project(tmp_path, manifest)
    proc = tune(project, "gemm", backend="cuda")
    assert "search: successive_halving, 9 configs per shape: 2 shapes" in proc.stderr, proc.stderr
    from aot_tune.bench.engine.timing import min_samples
    from aot_tune.cache import read_record

    for path in (project / ".aot_tune" / "bench").rglob("gemm/*.pb"):
        record = read_record(path)
        short = [m for m in record.measurements if m.status == "ok" and m.short_rep_ms]
        full = [m for m in record.measurements if m.status == "ok" and not m.short_rep_ms]
        assert short and full and record.best.id in {m.config.id for m in full}
        assert {m.short_rep_ms for m in short} <= {2.0, 6.0}  # rep_ms / 9 and rep_ms / 3
        # The samples of a short timing cover about its short rep_ms of GPU time (at least
        # min_samples launches for a slow kernel), a full timing's about rep_ms. (A record keeps
        # each config's latest measurement, so a promoted config shows only its full one.)
        for m in short:
            covered = sum(m.times_ms) * m.launches_per_sample
            fewest = min_samples(m.short_rep_ms / 18)
            assert covered <= 2 * max(m.short_rep_ms, fewest * m.median_ms * m.launches_per_sample), m
        assert all(sum(m.times_ms) * m.launches_per_sample >= 0.8 * 18 for m in full), full
        assert all(m.seconds > 0 for m in short + full)


def test_the_shipped_fp8_table_answers_each_scale_mode_on_this_gpu():
    """generated/fp8_gemm.py, as checked in: on a GPU it has a table for, each tuned shape's launch
    finds its exact entry (fp8_w8a8 from the tensors' dtypes, per_row from the scales), and the
    result matches the reference."""
    from tunerun import REPO

    code = textwrap.dedent("""
        import torch, warnings
        warnings.simplefilter("error")  # a fallback warns: every launch must find its entry
        from kernels import fp8_gemm as k
        from generated import fp8_gemm as table
        from aot_tune.runtime import current_device_key
        device = current_device_key()
        if device not in table.TABLES:
            print("no table for", device)
            raise SystemExit(0)
        entries = table.TABLES[device]
        for per_row in (True, False):
            shape = {"M": 4096, "N": 4096, "K": 4096, "per_row": per_row}
            a, b, sa, sb = k.make_inputs(shape, {"a": torch.float8_e4m3fn, "b": torch.float8_e4m3fn}, "cuda")
            assert k._TABLE.dtype_of(a.dtype, b.dtype, torch.bfloat16) == "fp8_w8a8"
            out, ref = k.fp8_gemm(a, b, sa, sb).float(), k.reference(a, b, sa, sb).float()
            assert (out - ref).norm() / ref.norm() < 2e-2
            assert (4096, 4096, 4096, per_row, "fp8_w8a8") in entries, sorted(entries)
            tuned = entries[(4096, 4096, 4096, per_row, "fp8_w8a8")]
            assert k._TABLE.lookup("fp8_w8a8", M=4096, N=4096, K=4096, per_row=per_row) == tuned
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env=subprocess_env(REPO))
    assert out.returncode == 0, out.stderr
    if out.stdout.startswith("no table"):
        pytest.skip(out.stdout.strip())
    assert out.stdout.strip() == "ok", out.stdout


def test_a_compile_builds_the_launcher_its_first_launch_would_build(tmp_path):
    """Where Triton builds a C launcher per kernel signature (3.6), the compile worker builds it
    into Triton's cache, so the device's first launch of the kernel finds it instead of running
    gcc on the bench's critical path."""
    from aot_tune.triton_compat import builds_launchers

    if not builds_launchers():
        pytest.skip("this Triton launches through one generic launcher: nothing to build ahead")
    cache = tmp_path / "triton-cache"
    code = textwrap.dedent("""
        import sys
        from aot_tune.build.compile import CompileRequest, compile_config

        request = CompileRequest(kernel="vector_add", root=".", kernel_ref="kernels.vector_add:add_kernel",
                                 launch_ref="kernels.vector_add:add", inputs_ref="kernels.vector_add:make_inputs",
                                 config={"BLOCK_SIZE": 1024, "num_warps": 4}, target="sm90",
                                 shapes=({"n": 4096},), dtypes=("float32",))
        print(compile_config(request, "c").status)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**subprocess_env(), "TRITON_CACHE_DIR": str(cache)}, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.split()[-1] == "ok", proc.stderr[-3000:]
    assert list(cache.rglob("__triton_launcher*")), sorted(p.name for p in cache.rglob("*"))


def test_the_checks_kernel_a_compile_worker_precompiled_is_loaded_not_compiled_by_the_device_worker(tmp_path):
    """``norms.precompile`` (what a compile worker runs as a run starts: no GPU, no torch) leaves
    in the Triton cache every kernel the device worker's ``warm`` launches on this GPU, so the
    worker compiles none of them while the benches wait for it."""
    major, minor = torch.cuda.get_device_capability()
    cache = tmp_path / "triton-cache"
    env = {**subprocess_env(), "TRITON_CACHE_DIR": str(cache)}
    precompile = f"from aot_tune.bench.engine import norms; print(norms.precompile({major * 10 + minor}))"
    proc = subprocess.run([sys.executable, "-c", precompile], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.split()[-1] == "3", proc.stderr[-3000:]
    before = sorted(cache.rglob("partial_norms.cubin"))
    warm = "from aot_tune.bench.engine import norms; norms.warm('cuda:0'); print('warmed')"
    proc = subprocess.run([sys.executable, "-c", warm], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.split()[-1] == "warmed", proc.stderr[-3000:]
    assert len(before) == 3 and sorted(cache.rglob("partial_norms.cubin")) == before
