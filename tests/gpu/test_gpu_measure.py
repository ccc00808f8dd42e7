"""On a CUDA GPU: the measurement engine itself, a device worker's passes and graphs (faults
pinned on their config, configs joining a running pass, short kernels read by their GPU time,
screening graphs, the pools of finished graphs). Run with `python -m pytest -m gpu`."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from tunerun import REPO, subprocess_env

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def measured(tmp_path, *batches, timeout_s: float = 60.0) -> list[dict]:
    """Each batch measured in turn on one lease of a fresh one-GPU pool: config id -> result."""
    from aot_tune.bench.local.pool import DevicePool

    pool = DevicePool("cuda", 1, str(tmp_path / "triton-cache"))
    try:
        with pool.lease() as lease:
            return [{r.config_id: r for r in lease.measure_all(batch, timeout_s)} for batch in batches]
    finally:
        pool.close()


def in_fresh_process(code: str, *args: str) -> str:
    """The last line ``code`` prints, run in a fresh process from the repository root: this one
    runs kernels under the interpreter."""
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=subprocess_env(), cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


#: One GEMM's request and workload, set up as a device worker does (``{m}``, ``{rep_ms}`` and the
#: tile ``{tile}``: BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps), for code run in a fresh process.
GEMM_WORKLOAD = """
    from aot_tune.bench.engine.pipeline import _Check
    from aot_tune.bench.engine.workload import Workload
    from aot_tune.bench.runner import BenchRequest
    from aot_tune.manifest import BenchSettings

    settings = BenchSettings(warmup_ms=2.0, rep_ms={rep_ms}, l2_flush=True, l2_flush_bytes=None)
    block_m, block_n, block_k, stages, warps = {tile}
    request = BenchRequest(kernel="gemm", root=".", launch_ref="kernels.gemm:matmul",
                           inputs_ref="kernels.gemm:make_inputs", reference_ref="kernels.gemm:reference",
                           shape=(("M", {m}), ("N", 512), ("K", 512)), dtype="float16", config_id="c",
                           config=(("BLOCK_M", block_m), ("BLOCK_N", block_n), ("BLOCK_K", block_k),
                                   ("GROUP_M", 8), ("num_stages", stages), ("num_warps", warps)),
                           settings=settings)
    workload = Workload(request, "cuda")
    workload.rotation_for(settings, 50 * 2**20)
"""


def test_a_fault_in_a_pipelined_pass_is_pinned_on_its_config(tmp_path):
    """A pass queues several configs' work on the GPU at once; an illegal memory access among
    them kills the context with all of them suspect. Each suspect is measured again alone, so
    only the faulty config is recorded as crashed and the good ones around it are timed."""
    from tunerun import planted

    from aot_tune.manifest import BenchSettings

    settings = BenchSettings(warmup_ms=1.0, rep_ms=5.0, l2_flush=True, l2_flush_bytes=None)
    batch = [planted(fault, block, n=1 << 20, settings=settings)
             for fault, block in ((0, 256), (1, 256), (0, 512), (3, 256), (0, 1024), (0, 2048))]
    (results,) = measured(tmp_path, batch)
    assert {config_id: r.status for config_id, r in results.items()} == {
        "fault0-block256": "ok", "fault1-block256": "wrong_result", "fault0-block512": "ok",
        "fault3-block256": "crashed", "fault0-block1024": "ok", "fault0-block2048": "ok"}, results
    assert all(len(r.times_ms) >= 10 for r in results.values() if r.ok)


def test_configs_that_join_a_running_pass_are_timed_and_a_fault_among_them_is_pinned(tmp_path):
    """Configs a bench adds while its batch runs (their compiles landed meanwhile) join the GPU
    pass before its next config, their kernels found and loaded in the pass; each is timed as a
    config of the batch would be, and an illegal memory access among them is blamed on its config
    alone, the configs with work on the device beside it measured again. The fault joins last:
    the lease asks for more after each result, and the four results before it (one a wrong
    result) ask four times, an empty answer among them; after the fault the configs beside it
    are measured alone, which asks for nothing."""
    from tunerun import planted

    from aot_tune.bench.local.pool import DevicePool
    from aot_tune.manifest import BenchSettings

    settings = BenchSettings(warmup_ms=1.0, rep_ms=5.0, l2_flush=True, l2_flush_bytes=None)
    batch = [planted(0, block, n=1 << 20, settings=settings) for block in (256, 512)]
    joining = [[planted(0, 1024, n=1 << 20, settings=settings)], [planted(1, 256, n=1 << 20, settings=settings)], [],
               [planted(0, 2048, n=1 << 20, settings=settings), planted(3, 256, n=1 << 20, settings=settings)]]

    def more():
        return joining.pop(0) if joining else []

    pool = DevicePool("cuda", 1, str(tmp_path / "triton-cache"))
    try:
        with pool.lease() as lease:
            results = {r.config_id: r for r in lease.measure_all(batch, 60.0, more=more)}
    finally:
        pool.close()
    assert {config_id: r.status for config_id, r in results.items()} == {
        "fault0-block256": "ok", "fault0-block512": "ok", "fault0-block1024": "ok", "fault3-block256": "crashed",
        "fault1-block256": "wrong_result", "fault0-block2048": "ok"}, {c: (r.status, r.message) for c, r in results.items()}
    assert not joining, f"{len(joining)} answers of more() never asked for"
    assert all(len(r.times_ms) >= 10 for r in results.values() if r.ok)


def test_a_workers_first_graph_timed_configs_read_like_its_later_ones(tmp_path):
    """The first CUDA graphs a process replays run a tiny kernel faster than all later ones
    (1.4 against 1.8 us on the H200): a fresh worker's first pass over graph-timed configs must
    read as its second does, or the pass's first configs look faster than they are."""
    import statistics

    from tunerun import REPO

    from aot_tune.bench.runner import BenchRequest
    from aot_tune.manifest import BenchSettings

    settings = BenchSettings(warmup_ms=2.0, rep_ms=20.0, l2_flush=True, l2_flush_bytes=None)
    batch = [BenchRequest(kernel="vector_add", root=str(REPO), launch_ref="kernels.vector_add:add",
                          inputs_ref="kernels.vector_add:make_inputs", reference_ref="kernels.vector_add:reference",
                          shape=(("n", 65536),), dtype="float16", config_id=f"block{block}-warps{warps}",
                          config=(("BLOCK_SIZE", block), ("num_warps", warps), ("num_stages", 1)), settings=settings)
             for block, warps in ((256, 2), (512, 4), (1024, 4), (2048, 8), (4096, 8))]
    passes = measured(tmp_path, batch, batch)
    first, second = ({i: statistics.median(r.times_ms) for i, r in p.items() if r.ok} for p in passes)
    assert len(first) == len(second) == len(batch), passes
    assert all(passes[0][i].method == "graph" for i in first), passes[0]
    assert all(abs(first[i] / second[i] - 1) < 0.05 for i in first), (first, second)


def test_kernels_about_as_short_as_their_launch_read_the_same_from_first_sample_to_last(tmp_path):
    """GEMMs of 20-40 us on the H100 are close to what one events-timed sample costs the host:
    timed with events, the host falls behind within the timed launches and the later samples also
    hold the wait for their launch (0.022 ms read 0.046 from the middle on, a median 1.9x slow).
    Whatever method times them, the last quarter of the samples must read as the first does."""
    import statistics

    from tunerun import REPO

    from aot_tune.bench.runner import BenchRequest
    from aot_tune.manifest import BenchSettings

    settings = BenchSettings(warmup_ms=2.0, rep_ms=20.0, l2_flush=True, l2_flush_bytes=None)
    tiles = ((64, 256, 32, 4), (128, 64, 32, 2), (32, 256, 32, 2), (32, 128, 32, 2))
    batch = [BenchRequest(kernel="gemm", root=str(REPO), launch_ref="kernels.gemm:matmul",
                          inputs_ref="kernels.gemm:make_inputs", reference_ref="kernels.gemm:reference",
                          shape=(("M", 4096), ("N", 1024), ("K", 1024)), dtype="float16",
                          config_id=f"{m}x{n}x{k}-w{w}",
                          config=(("BLOCK_M", m), ("BLOCK_N", n), ("BLOCK_K", k), ("GROUP_M", 8),
                                  ("num_stages", 3), ("num_warps", w)), settings=settings)
             for m, n, k, w in tiles]
    (results,) = measured(tmp_path, batch, timeout_s=120.0)
    assert all(r.ok for r in results.values()), results
    for config_id, r in results.items():
        quarter = len(r.times_ms) // 4
        first, last = statistics.median(r.times_ms[:quarter]), statistics.median(r.times_ms[-quarter:])
        assert last < 1.1 * first, (config_id, r.method, first, last)


def test_a_short_kernel_reads_its_gpu_time_not_its_host_launch(tmp_path):
    """Kernels of 7-45 us were read as what the host took to issue them: a probe that found the
    GPU idle timed the launch (0.04 ms for a 0.007 ms 4096x512x512 GEMM), or events around each
    launch let the host fall behind (a 0.035 ms 4096x4096x512 GEMM read 0.042). Each config's
    median must stay near the kernel's own time, measured in a fresh process as the mean of 100
    launches queued behind GPU spinning (warm L2, so the bench's cold-L2 median may be somewhat
    higher, never 1.5x)."""
    import json
    import statistics

    from tunerun import REPO

    from aot_tune.bench.runner import BenchRequest
    from aot_tune.manifest import BenchSettings

    settings = BenchSettings(warmup_ms=2.0, rep_ms=20.0, l2_flush=True, l2_flush_bytes=None)
    cases = [((4096, 512, 512), tile) for tile in ((128, 128, 64, 4, 8), (64, 256, 32, 5, 4), (32, 128, 64, 3, 2))]
    cases += [((4096, 4096, 512), tile) for tile in ((128, 256, 32, 4, 8), (128, 128, 32, 3, 4))]
    configs = {f"{'x'.join(map(str, shape))}-{m}x{n}x{k}-s{st}-w{w}": (shape, {
        "BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8, "num_stages": st, "num_warps": w})
        for shape, (m, n, k, st, w) in cases}
    batches = [[BenchRequest(kernel="gemm", root=str(REPO), launch_ref="kernels.gemm:matmul",
                             inputs_ref="kernels.gemm:make_inputs", reference_ref="kernels.gemm:reference",
                             shape=tuple(zip("MNK", shape)), dtype="float16", config_id=config_id,
                             config=tuple(config.items()), settings=settings)
                for config_id, (s, config) in configs.items() if s == shape]
               for shape in sorted({shape for shape, _ in configs.values()})]
    results = {k: r for batch in measured(tmp_path, *batches, timeout_s=120.0) for k, r in batch.items()}
    code = textwrap.dedent("""
        import json, sys, torch
        from kernels import gemm
        own = {}
        for config_id, (shape, config) in json.loads(sys.argv[1]).items():
            a, b = gemm.make_inputs(dict(zip("MNK", shape)), torch.float16, "cuda")
            for _ in range(3):
                gemm.matmul(a, b, config)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            torch.cuda._sleep(20_000_000)  # about 10 ms of spinning: the launches below queue behind it
            start.record()
            for _ in range(100):
                gemm.matmul(a, b, config)
            end.record()
            end.synchronize()
            own[config_id] = start.elapsed_time(end) / 100
        print(json.dumps(own))
    """)
    own = json.loads(in_fresh_process(code, json.dumps(configs)))
    for config_id, r in results.items():
        assert r.ok, r
        median = statistics.median(r.times_ms)
        assert median < 1.5 * own[config_id], (config_id, r.method, median, own[config_id])


def test_a_screening_graph_over_half_the_input_sets_reads_a_small_gemm_as_a_full_timing_does(tmp_path):
    """A screening timing's graph cycles through half of the shape's input sets (one L2's bytes of
    other inputs between two reads of a set, against two), which halves its capture's host time.
    Its reading must still be a cold one: for a 512^3 fp16 GEMM of a few microseconds, over 70
    sets, interleaved with full timings of the same config in one batch, the screening medians
    stay within 10% of the full ones, and every timing is recorded cold."""
    import statistics
    from dataclasses import replace

    from tunerun import REPO

    from aot_tune.bench.runner import BenchRequest
    from aot_tune.manifest import BenchSettings

    settings = BenchSettings(warmup_ms=2.0, rep_ms=20.0, l2_flush=True, l2_flush_bytes=None)
    share = 1 / 9
    batch = []
    for round_ in range(3):
        for name, (m, n, k, stages, warps) in {"small": (32, 64, 64, 3, 4), "large": (128, 128, 64, 3, 8)}.items():
            full = BenchRequest(kernel="gemm", root=str(REPO), launch_ref="kernels.gemm:matmul",
                                inputs_ref="kernels.gemm:make_inputs", reference_ref="kernels.gemm:reference",
                                shape=(("M", 512), ("N", 512), ("K", 512)), dtype="float16",
                                config_id=f"full-{name}-{round_}",
                                config=(("BLOCK_M", m), ("BLOCK_N", n), ("BLOCK_K", k), ("GROUP_M", 8),
                                        ("num_stages", stages), ("num_warps", warps)), settings=settings)
            batch += [full, replace(full, config_id=f"screen-{name}-{round_}", settings=settings.screening(share),
                                    share=share)]
    (results,) = measured(tmp_path, batch, timeout_s=120.0)
    assert all(r.ok and r.method == "graph" and r.cold_l2 for r in results.values()), results
    for name in ("small", "large"):
        medians = {kind: statistics.median(statistics.median(results[f"{kind}-{name}-{i}"].times_ms) for i in range(3))
                   for kind in ("full", "screen")}
        launches = {kind: results[f"{kind}-{name}-0"].launches_per_sample for kind in ("full", "screen")}
        assert launches["screen"] < launches["full"], launches
        assert abs(medians["screen"] / medians["full"] - 1) < 0.10, (name, medians, launches)


def test_an_events_timed_config_whose_samples_read_short_is_timed_again_as_graph_replays():
    """A host stall before both the check and the probe of a 0.035 ms GEMM once sent it to events
    timing, host-bound, where it read 0.090 ms. Here a short GEMM's check and probe are read as
    0.5 ms: its events samples say it is short, so it must be timed again as graph replays and
    read about what graph replays read for it with honest check and probe times."""
    import json

    code = textwrap.dedent(GEMM_WORKLOAD.format(m=1024, rep_ms=20.0, tile=(64, 64, 64, 3, 4)) + """
    import json, statistics
    from aot_tune.bench.engine.timing import ConfigTiming

    out = {}
    for case, inflated_ms in (("honest", None), ("stalled", 0.5)):
        timing = _Check(request, workload, gpu_busy=False).read(None)
        assert isinstance(timing, ConfigTiming), timing
        if inflated_ms is not None:  # as if a host stall had held both launches back
            timing = ConfigTiming(request, None, 0.0, {}, launch=timing._launch, workload=workload,
                                  gpu_ms=inflated_ms, host_ms=0.01, check_ms=inflated_ms)
        method = timing.method
        timing.capture()
        timing.start()
        result = timing.finish()
        out[case] = [method, result.status, result.method, timing.retimed, statistics.median(result.times_ms)]
    print(json.dumps(out))
    """)
    out = json.loads(in_fresh_process(code))
    assert out["honest"][:3] == ["graph", "ok", "graph"], out
    assert out["stalled"][:4] == ["events", "ok", "graph", True], out
    assert abs(out["stalled"][4] / out["honest"][4] - 1) < 0.15, out


def test_the_pools_of_finished_graphs_do_not_fill_the_device_and_fail_later_captures():
    """Each graph-timed config's graph keeps a memory pool, reserved after the graph is gone
    (about 20 MiB a config for a 4096x512x512 GEMM on the H100). On the H100 host they filled the
    device within a worker's lifetime, every later capture failed, and a whole shape was timed
    with events, host-bound (a 0.007 ms GEMM read 0.038 ms). With the process's share of the
    device capped 1.5 GiB above what may be left unused, 260 configs timed one after another
    must all be timed as graph replays (without the release, the 173rd failed on the H100)."""
    code = textwrap.dedent(GEMM_WORKLOAD.format(m=4096, rep_ms=5.0, tile=(128, 128, 64, 4, 8)) + """
    import torch
    from aot_tune.bench.engine.timing import UNUSED_RESERVED_BYTES

    cap = torch.cuda.memory_reserved() + UNUSED_RESERVED_BYTES + 1.5 * 2**30
    torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.mem_get_info()[1])
    methods = []
    for _ in range(260):
        timing = _Check(request, workload, gpu_busy=False).read(None)
        timing.capture()
        timing.start()
        methods.append(timing.finish().method)
    print(methods.count("graph"), methods.index("events") if "events" in methods else -1)
    """)
    graphs, first_events = map(int, in_fresh_process(code).split())
    assert (graphs, first_events) == (260, -1)
