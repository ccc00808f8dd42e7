"""What a device worker does besides measuring: profiling its batches where asked."""
from __future__ import annotations


def test_a_device_worker_profiles_its_batches_where_asked(tmp_path, monkeypatch):
    import pstats

    from aot_tune.bench.local.worker import PROFILE_ENV, profiled

    with profiled("device0"):  # not asked: nothing written
        sum(range(1000))
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "prof"))
    with profiled("device0"):
        sorted(range(1000), key=lambda n: -n)
    (written,) = (tmp_path / "prof").iterdir()
    assert written.name.startswith("device0-") and written.suffix == ".pstats"
    assert any("sorted" in str(func) for func in pstats.Stats(str(written)).stats)


def test_a_batchs_gpu_time_is_split_by_what_ran_and_what_idled():
    from aot_tune.bench.local.gpu_profile import kind_of, split

    assert kind_of("at::cuda::(anonymous namespace)::spin_kernel(long)") == "spin"
    assert kind_of("void at::native::reduce_kernel<512, 1>(...)") == "torch"
    assert kind_of("Memcpy HtoD (Pageable -> Device)") == "copies"
    assert kind_of("layer_norm_fwd_kernel_row") == "own"
    kernels = [("at::cuda::spin_kernel", 0.0, 0.2), ("matmul_kernel", 0.2, 0.5),  # a check after a spin
               ("void at::native::reduce_kernel", 0.5, 0.6),  # its comparison
               ("matmul_kernel", 1.0, 3.0), ("matmul_kernel", 2.5, 3.5)]  # timed, overlapping
    parts = split(kernels, timed_s=2.5)
    assert parts["window"] == 3.5 and abs(parts["busy"] - 3.1) < 1e-9 and abs(parts["idle"] - 0.4) < 1e-9
    assert abs(parts["own"] - 3.3) < 1e-9 and abs(parts["own untimed"] - 0.8) < 1e-9
    assert parts["spin"] == 0.2 and abs(parts["torch"] - 0.1) < 1e-9
    assert split([], 0.0)["window"] == 0.0


def test_batches_are_profiled_on_the_gpu_only_where_asked(tmp_path, monkeypatch):
    from aot_tune.bench.local.gpu_profile import GPU_PROFILE_ENV, BatchProfile
    from aot_tune.bench.runner import ConfigMeasurement

    monkeypatch.delenv(GPU_PROFILE_ENV, raising=False)
    with BatchProfile(0, [], "cuda") as profile:
        profile.add(ConfigMeasurement("c", "ok", times_ms=[1.0]))
    assert profile.results == [] and profile._profiler is None  # not asked: no profiler, nothing kept
    monkeypatch.setenv(GPU_PROFILE_ENV, str(tmp_path / "gpu"))
    with BatchProfile(0, [], "interpreter") as profile:  # asked, but no GPU to profile
        profile.add(ConfigMeasurement("c", "ok", times_ms=[1.0]))
    assert profile.results == [] and profile._profiler is None and not (tmp_path / "gpu").exists()


def test_the_gpu_split_tool_adds_up_the_workers_lines(tmp_path, capsys):
    import json

    from tools.bench import gpu_split

    line = {"kernel": "k", "shape": "(('M', 1),)", "dtype": "float16", "configs": 4, "finals": False, "ok": 4,
            "window": 0.1, "busy": 0.09, "idle": 0.01, "timed": 0.08, "own untimed": 0.006, "spin": 0.001,
            "torch": 0.002, "copies": 0.0, "own": 0.086}
    (tmp_path / "gpu-device0-1.jsonl").write_text(json.dumps(line) + "\n" + json.dumps({**line, "finals": True}) + "\n")
    assert gpu_split.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "all: 2 batches, 8 measurements, window 0.20s" in out and "timed 0.16s (80%)" in out
    assert "finals' batches: 1 batches" in out and "outside their samples 1.50 ms a measurement" in out
    assert gpu_split.main([str(tmp_path / "empty")]) == 1 and "no gpu-device*.jsonl" in capsys.readouterr().err
