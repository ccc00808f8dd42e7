"""Config subset selection (greedy set cover) and `doit subset`."""
from __future__ import annotations

import subprocess

from tunerun import REPO, doit, doit_command, make_project, subprocess_env, vector_add_manifest

from aot_tune import cache as cache_io
from aot_tune.space import Config
from aot_tune.reports.subset import render_report, render_triton, select_subset, worst_ratio
from aot_tune.tuning_schema import Measurement, TuningRecord

PARAMS = {"a": {"BLOCK": 64, "num_warps": 4}, "b": {"BLOCK": 128, "num_warps": 4},
          "c": {"BLOCK": 256, "num_warps": 8}, "d": {"BLOCK": 512, "num_warps": 8}}


def record(shape: int, times: dict[str, float], device: str = "h200", short: dict[str, float] = {}) -> TuningRecord:
    r = TuningRecord(kernel="k", shape=[shape], dtype="float16")
    r.device.key = device
    for config_id, ms in {**times, **short}.items():
        m = Measurement(status="ok", median_ms=ms, runs=10, short_rep_ms=2.0 if config_id in short else 0.0)
        cache_io.config_to_proto(config_id, PARAMS[config_id], m.config)
        r.measurements.append(m)
    return r


def test_greedy_cover_takes_the_config_that_covers_most_then_the_rest():
    records = [record(1, {"a": 1.00, "b": 1.03, "c": 1.5}),
               record(2, {"a": 1.20, "b": 1.04, "c": 1.00}),
               record(3, {"a": 1.30, "b": 1.00, "c": 2.0}),
               record(4, {"a": 1.00, "b": 1.50, "d": 1.01})]
    subset = select_subset("k", records, 0.05)
    assert [c.config_id for c in subset.chosen] == ["b", "a"]  # b covers 1-3; a covers 4 (d too, but worse)
    assert [[e.shape for e, _ in c.covers] for c in subset.chosen] == [[(1,), (2,), (3,)], [(4,)]]
    assert max(worst_ratio(subset).values()) <= 1.05
    exact = select_subset("k", records, 0.0)
    assert [c.config_id for c in exact.chosen] == ["a", "b", "c"]  # each entry's own fastest


def test_only_full_measurements_cover_and_unmeasured_configs_cover_nothing():
    records = [record(1, {"a": 1.0}, short={"b": 0.5}), record(2, {"b": 1.0})]  # a budgeted search measured few
    subset = select_subset("k", records, 0.05)
    assert sorted(c.config_id for c in subset.chosen) == ["a", "b"]


def test_renders_a_report_and_a_triton_config_list_that_python_accepts():
    subset = select_subset("k", [record(1, {"a": 1.0, "b": 1.02}), record(2, {"b": 1.0}, device="h100-sxm")],
                           space_size=12)
    report = render_report(subset)
    assert report.splitlines()[0] == ("k on h100-sxm, h200: 1 configs of the 12 in the space keep all 2 tuned "
                                      "entries within 5% of their best (greedy set cover; worst entry 1.020x)")
    text = render_triton(subset, ["BLOCK"])
    assert "triton.Config({'BLOCK': 128}, num_warps=4)," in text

    class Triton:
        @staticmethod
        def Config(kwargs, **options):
            return (kwargs, options)

    scope = {"triton": Triton}
    exec(text, scope)
    assert scope["configs"] == [({"BLOCK": 128}, {"num_warps": 4})]


def test_the_checked_in_gemm_tables_need_few_configs():
    records = [r for r in cache_io.read_cache(REPO / "generated" / "gemm.tuning.pb").records if r.device.key == "h200"]
    subset = select_subset("gemm", records, 0.05)
    assert len(subset.entries) == len(records) and max(worst_ratio(subset).values()) <= 1.05
    assert len(subset.chosen) < len(records)


def test_doit_subset_prints_triton_configs_and_refuses_unknown_devices():
    out = subprocess.run(doit_command("subset", "--triton", "gemm"), cwd=REPO, env=subprocess_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("# gemm: ") and out.stdout.count("triton.Config(") >= 1
    bad = subprocess.run(doit_command("subset", "--device", "h900", "gemm"), cwd=REPO, env=subprocess_env(),
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "no records for device h900" in bad.stderr and "Traceback" not in bad.stderr


def test_doit_subset_skips_a_kernel_without_records_unless_it_is_named(tmp_path):
    project = make_project(tmp_path, vector_add_manifest("""\
    space:
      BLOCK_SIZE: [64, 128]
      num_warps: [4]
    shapes:
      - {n: 1000}
  softmax:
    kernel: kernels.softmax:softmax_kernel
    launch: kernels.softmax:softmax
    inputs: kernels.softmax:make_inputs
    reference: kernels.softmax:reference
    key: [M, N]
    space:
      BLOCK_N: [128]
      num_warps: [4]
    shapes:
      - {M: 4, N: 100}
"""))
    tuned = TuningRecord(kernel="vector_add", key_names=["n"], shape=[1000], dtype="float16", fingerprint="f",
                         measured_at="2026-11-22T01:00:00+00:00")
    tuned.device.key, tuned.device.name, tuned.device.compute_capability = "h200", "NVIDIA H200", "9.0"
    tuned.device.backend = "cuda"
    tuned.toolchain.triton, tuned.toolchain.torch = "3.6.0", "2.11.0"
    for block, ms in ((64, 0.02), (128, 0.01)):
        params = {"BLOCK_SIZE": block, "num_warps": 4}
        m = Measurement(status="ok", median_ms=ms, runs=10)
        cache_io.config_to_proto(Config.from_dict(params).id, params, m.config)
        tuned.measurements.append(m)
    tuned.best.CopyFrom(tuned.measurements[1].config)
    cache_io.write_cache(cache_io.sorted_cache([tuned]), project / "generated" / "vector_add.tuning.pb")

    every = doit(project, "subset")  # softmax has no cache at all: one note, and vector_add's subset
    assert every.returncode == 0, every.stderr
    assert every.stdout.startswith("vector_add on h200: 1 configs of the 2 in the space") and "BLOCK_SIZE=128" in every.stdout
    notes = [line for line in every.stderr.splitlines() if "softmax" in line]
    assert notes == ["skipped: softmax has no tuned records in generated/softmax.tuning.pb; "
                     "fix: run `doit tune softmax` first"]
    named = doit(project, "subset", "softmax")  # asked for by name: an error, as before
    assert named.returncode != 0 and "softmax has no tuned records" in named.stderr
    nothing = doit(project, "subset", "--device", "a100-sxm")  # no kernel has what was asked: an error
    assert nothing.returncode != 0 and "no kernel has tuned records" in nothing.stderr
    assert "Traceback" not in every.stderr + named.stderr + nothing.stderr
