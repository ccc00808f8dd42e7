"""tools.bench.compare_triton_autotune on the CPU: its samples and generated manifest (exactly the
sampled configs, for the paper-size run the lead makes on a GPU), its budget cut, and one whole
run of every phase under the Triton interpreter on tiny shapes."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time

import pytest
from tunerun import REPO, subprocess_env

from aot_tune.manifest import load_manifest

TOOL = "tools.bench.compare_triton_autotune"


@pytest.fixture(scope="module")
def tool():
    return importlib.import_module(TOOL)


def test_samples_are_seeded_subsets_of_the_paper(tool):
    configs = tool.sample_configs(60, 0, None)
    assert len(configs) == 60 == len({c.id for c in configs})
    assert configs == tool.sample_configs(60, 0, None) != tool.sample_configs(60, 1, None)
    assert len(tool.sample_configs(1000, 0, None)) == tool.PAPER_SPACE.size() == 576
    small = tool.sample_configs(100, 0, 32)
    assert len(small) == 9 and all(dict(c.params)["BLOCK_K"] == 32 for c in small)
    shapes = tool.sample_shapes(8, 0, tool.PAPER_SIZES)
    assert shapes[0] == (4096, 4096, 4096) and len(set(shapes)) == 8
    assert len(tool.sample_shapes(64, 0, tool.PAPER_SIZES)) == 64


@pytest.mark.parametrize("count", [60, 576])
def test_the_generated_manifest_holds_exactly_the_sampled_configs(tool, tmp_path, count):
    configs = tool.sample_configs(count, 0, None)
    shapes = tool.sample_shapes(8, 0, tool.PAPER_SIZES)
    (tmp_path / "tuning.yaml").write_text(tool.manifest_text(configs, shapes, "sm90"))
    began = time.perf_counter()
    spec = load_manifest(tmp_path / "tuning.yaml").kernel("gemm")
    assert {c.id for c in spec.space.configs_for(spec.shape_dict(shapes[0]))} == {c.id for c in configs}
    assert time.perf_counter() - began < 5.0  # a membership constraint of 576 clauses stays cheap
    assert spec.shapes == tuple(shapes) and spec.targets == ("sm90",) and spec.dtypes == ("float16",)


def test_phase_three_is_cut_at_its_limit_and_skipped_without_budget(tool, tmp_path):
    class Args:
        interpreter = True

    configs = tool.sample_configs(1, 0, 32)
    skipped = tool.run_triton(tmp_path, configs, [(16, 16, 16)], Args, limit=1.0)
    assert skipped["error"].startswith("skipped") and not skipped["finished"]
    cut = tool.run_triton(tmp_path, configs, [(16, 16, 16)], Args, limit=tool.MIN_TRITON_S)
    if not cut["finished"]:  # importing torch alone can take that long on a busy machine
        assert cut["wall_s"] >= tool.MIN_TRITON_S - 0.5
        assert "cut at its" in "\n".join(tool.triton_lines({**cut, "speedup": 1.0}, {"wall_s": 1.0}, 1))


def test_summary_ratios_and_targets(tool):
    retimed = {"shapes": [
        {"shape": [4096, 4096, 4096], "configs": {"ours": {"a": 1}, "triton": {"a": 2}},
         "errors": {}, "ms": {"ours": 0.2, "triton": 0.25, "torch.matmul": 0.19, "default": 0.4}},
        {"shape": [256, 256, 256], "configs": {"ours": {"a": 1}, "triton": {"a": 1}},
         "errors": {}, "ms": {"ours": 0.01, "triton": 0.01, "torch.matmul": 0.008}},
    ]}
    summary = tool.summarize_retime(retimed, "NVIDIA H200")
    big, small = summary["rows"]
    assert big["quality"] == pytest.approx(0.8) and not big["same_config"] and small["same_config"]
    assert summary["quality_geomean"] == pytest.approx(0.8 ** 0.5)
    assert big["vs_torch"] == pytest.approx(0.95)
    assert big["tflops"]["ours"] == pytest.approx(2 * 4096**3 / 0.2e-3 / 1e12)
    assert big["floor_ms"] == pytest.approx(2 * 4096**3 / 989.5e12 * 1e3)
    data = {"header": {"shapes": [(4096, 4096, 4096)]}, "retime": summary, "ours_noop": {"wall_s": 0.5},
            "triton": {"speedup": 6.0, "finished": True}}
    assert tool.targets(data) == {"speedup": 6.0, "speedup_is_lower_bound": False,
                                  "quality_geomean": pytest.approx(0.8 ** 0.5), "noop_s": 0.5,
                                  "tuned_vs_torch_at_largest": pytest.approx(0.95)}
    assert all("NOT" not in line for line in tool.target_lines(data))


def test_every_phase_runs_under_the_interpreter(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", TOOL, "--interpreter", "--configs", "2", "--shapes", "2", "--sizes", "16,32",
         "--max-block", "32", "--repeats", "2", "--out", str(tmp_path)],
        cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "compare_triton_autotune.json").read_text())
    assert data["ours_clean"]["ok"] and len(data["ours_clean"]["tasks_run"]) > 0
    assert set(data["ours_clean"]["split"]) >= {"compile", "bench", "other"}
    assert any(line.startswith("end to end:") and "the floor" in line for line in data["ours_clean"]["summary"])
    assert data["ours_noop"]["ok"] and data["ours_noop"]["tasks_run"] == []
    assert data["triton"]["finished"] and len(data["triton"]["shapes"]) == 2
    rows = data["retime"]["rows"]
    assert len(rows) == 2 and all(r["quality"] > 0 and len(r["samples"]["ours"]) == 2 for r in rows)
    assert all(r["errors"]["ours"] < 1e-2 and r["errors"]["triton"] < 1e-2 for r in rows)
    assert {"ours", "triton", "default", "torch.matmul"} <= set(rows[0]["ms"])
    assert set(data["targets"]) == {"speedup", "speedup_is_lower_bound", "quality_geomean", "noop_s",
                                    "tuned_vs_torch_at_largest"}
    for heading in ("## 1. doit tune, clean tree", "## 2. doit tune again", "## 3. @triton.autotune",
                    "## 4. picks re-timed", "## targets"):
        assert heading in proc.stdout


def test_a_pick_both_sides_share_is_timed_as_one_kernel(tmp_path):
    """Two timings of one kernel differ by noise (10% on a 7 µs GEMM on an H200): a shared pick
    is timed once and its ratio is exactly 1, a different pick is timed beside it."""
    same = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    other = {**same, "BLOCK_K": 32}
    spec = {"cache_dir": str(tmp_path / "cache"), "interpreter": True, "repeats": 2,
            "result": str(tmp_path / "retime.json"),
            "shapes": [{"shape": [16, 16, 32], "ours": same, "triton": dict(same), "default": other,
                        "repo_table": None},
                       {"shape": [16, 16, 32], "ours": same, "triton": other, "default": other,
                        "repo_table": None}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, "-m", TOOL, "--internal-retime", str(tmp_path / "spec.json")],
                          cwd=REPO, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shared, differs = json.loads((tmp_path / "retime.json").read_text())["shapes"]
    assert shared["ms"]["ours"] == shared["ms"]["triton"] and shared["samples"]["triton"] == shared["samples"]["ours"]
    assert len(shared["samples"]["ours"]) == 2 and shared["configs"]["triton"] == same
    assert len(differs["samples"]["ours"]) == len(differs["samples"]["triton"]) == 2
    assert differs["configs"]["triton"] == other
    summary = importlib.import_module(TOOL).summarize_retime({"shapes": [shared, differs]}, "NVIDIA H200")
    assert summary["rows"][0]["quality"] == 1.0 and summary["rows"][0]["same_config"]
    assert not summary["rows"][1]["same_config"]
