"""`doit report` on the CPU, from caches: this repository's checked-in ones, and a synthetic cache
with the awkward cases (failures by reason, records older than the baselines, a failed default
baseline, a record with no passing config, a kernel never tuned), with and without matplotlib."""
from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from tunerun import REPO, doit, gemm_manifest, make_project, tune, vector_add_manifest

from aot_tune import cache as cache_io
from aot_tune.manifest import load_manifest
from aot_tune.reports import plots
from aot_tune.reports.report import build_report, write_report
from aot_tune.reports.rows import ShapeRow, Timed
from aot_tune.build.compile import CompileRecord, CompileResult
from aot_tune.runs.log import RunRecord, append_run, read_runs, time_split
from aot_tune.space import Config
from aot_tune.tuning_schema import Measurement, TuningRecord

H200 = "NVIDIA H200"


class _Structure(HTMLParser):
    """Collects unbalanced tags and every external reference of a page."""

    VOID = {"meta", "img", "br", "hr", "link", "input"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.external: list[str] = []
        self.images = 0

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href") and value and not value.startswith(("data:", "#")):
                self.external.append(value)
        self.images += tag == "img"
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()


def structure(html: str) -> _Structure:
    parser = _Structure()
    parser.feed(html)
    assert not parser.problems and not parser.stack, (parser.problems, parser.stack)
    assert parser.external == [], "the page must be self-contained"
    return parser


def test_renders_this_repositorys_caches_with_plots(tmp_path):
    # a fresh copy of the checkout's manifest and tables: no run logged, whatever ran in this one
    tree = tmp_path / "tree"
    for part in ("kernels", "generated"):
        shutil.copytree(REPO / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "tuning.yaml", tree / "tuning.yaml")
    manifest = load_manifest(tree / "tuning.yaml")
    paths = write_report(manifest, tmp_path / "report")
    html, markdown = paths.html.read_text(), paths.markdown.read_text()
    page = structure(html)
    for spec in manifest.kernels:
        assert f'id="k-{spec.name}"' in html and f"## {spec.name}" in markdown
    # per kernel and GPU a comparison and a heatmap, all embedded PNGs that decode; none for the interpreter
    report = build_report(manifest)
    gpus = [d for k in report.kernels for d in k.devices if d.gpu]
    assert gpus and page.images == 2 * len(gpus)
    for blob in re.findall(r'src="data:image/png;base64,([^"]+)"', html):
        assert base64.b64decode(blob).startswith(b"\x89PNG")
    # the interpreter tables carry their baselines (every row has all three times), yet their section
    # shows the picked configs and no time, rate or ratio of them (Python wall clock, not a GPU's)
    interpreter = [d for k in report.kernels for d in k.devices if d.key == "interpreter"]
    assert interpreter and all(row.default.ms and row.vendor.ms and row.tuned.ms for d in interpreter for row in d.rows)
    assert all(d.plot is d.heatmap_plot is None for d in interpreter)
    assert all(row.vs_default is row.vs_vendor is row.of_floor is None for d in interpreter for row in d.rows)
    assert "| gemm | interpreter | 1 | 0 | 0 |" in markdown
    section = markdown.split("### gemm on interpreter", 1)[1].split("\n## ", 1)[0]
    assert "| 64x64x64 | float16 | BLOCK_K=64 BLOCK_M=64 BLOCK_N=64 GROUP_M=8 num_warps=2 num_stages=3 | 48 of 48 | " \
           "passed | passed |" in section
    assert not re.search(r"\d\.\d\dx|TFLOP/s|GB/s|µs|peak", section), section
    html_section = html.split("<h3>gemm on interpreter</h3>", 1)[1].split("<h2", 1)[0]
    assert "Configs picked under the interpreter" in html_section
    assert not re.search(r"\d\.\d\dx|<img|TFLOP/s|over default|heatmap", html_section), html_section
    # the copy logged no run: the report says why, and shows the bench time the caches keep
    assert "No run log here" in markdown and "tuned on another machine" in markdown
    assert re.search(r"\| gemm \| h200 \| 8 \| [\d.]+ (s|min) \| 2026-", markdown)
    assert "No runs logged in this tree" not in html and "No run log here" in html


def test_a_plot_with_nothing_to_draw_is_skipped():
    failed = Timed(None, "no config passed")
    row = ShapeRow("float16", "64", tuned=failed, default=Timed(None, "no default_config in the manifest"),
                   vendor=Timed(0.5, "vendor"), floor_ms=None)
    assert plots.comparison("k", "h200", "TFLOP/s", [row], None, ["float16"]) is None  # no side has a rate
    assert plots.comparison("k", "h200", None, [], None, ["float16"]) is None
    assert plots.comparison("k", "h200", None, [row], None, ["float16"]) is not None  # the vendor's time
    assert plots.time_split([]) is None
    assert plots.time_split([("an empty run", {"bench": 0.0, "other": 0.0})]) is None


def test_a_records_bench_seconds_count_no_wait_for_its_device(tmp_path):
    """Bench tasks run on several threads and queue for the interpreter's one device worker: each
    record counts only the time it held the device, so the records add up to no more than the
    bench stage's wall time (counting the queue, three records added up to about twice it)."""
    project = make_project(tmp_path / "project", vector_add_manifest("""\
    space:
      BLOCK_SIZE: [128, 1024]
      num_warps: [4]
    shapes:
      - {n: 1000}
      - {n: 2000}
      - {n: 3000}
"""))
    tune(project, "-n", "4")
    records = cache_io.read_cache(project / "generated" / "vector_add.tuning.pb").records
    (run,) = read_runs(project / ".aot_tune")
    start, end = run.stages["bench"]
    assert len(records) == 3 and all(r.bench_seconds > 0 for r in records)
    assert sum(r.bench_seconds for r in records) <= end - start + 0.01, (
        [r.bench_seconds for r in records], run.stages)


# -- a synthetic cache ---------------------------------------------------------------------

MANIFEST = gemm_manifest("""\
    space:
      BLOCK_M: [64, 128]
      BLOCK_N: [64, 256]
      num_warps: [4]
    shapes:
      - {M: 4096, N: 4096, K: 4096}
      - {M: 256, N: 256, K: 256}
    dtypes: [float16, bfloat16]
    default_config: {BLOCK_M: 64, BLOCK_N: 64, num_warps: 4}
    vendor: kernels.gemm:vendor
    cost: {flops: "2 * M * N * K", bytes: "(M * K + K * N + M * N) * dtype_bytes"}
  softmax:
    kernel: kernels.softmax:softmax_kernel
    launch: kernels.softmax:softmax
    inputs: kernels.softmax:make_inputs
    reference: kernels.softmax:reference
    key: [M, N]
    space:
      BLOCK_N: [1024]
      num_warps: [4]
    shapes:
      - {M: 8, N: 1000}
  rmsnorm:
    kernel: kernels.rmsnorm:rmsnorm_kernel
    launch: kernels.rmsnorm:rmsnorm
    inputs: kernels.rmsnorm:make_inputs
    reference: kernels.rmsnorm:reference
    key: [M, N]
    space:
      BLOCK_N: [1024]
      num_warps: [4]
    shapes:
      - {M: 8, N: 1000}
""")


def measurement(params: dict, status: str = "ok", median: float = 0.0, reason: str = "") -> Measurement:
    m = Measurement(status=status, median_ms=median, reason=reason, runs=100 if status == "ok" else 0)
    cache_io.config_to_proto(Config.from_dict(params).id if params else "vendor", params, m.config)
    return m


def record(shape, dtype: str, measurements: list[Measurement], *, default=None, vendor=None,
           kernel: str = "gemm", key=("M", "N", "K")) -> TuningRecord:
    r = TuningRecord(kernel=kernel, key_names=list(key), shape=list(shape), dtype=dtype, bench_seconds=2.5,
                     fingerprint="not-current", measured_at="2026-11-22T01:00:00+00:00")
    r.device.key, r.device.name, r.device.compute_capability, r.device.backend = "h200", H200, "9.0", "cuda"
    r.toolchain.triton, r.toolchain.torch = "3.6.0", "2.11.0"
    r.measurements.extend(sorted(measurements, key=lambda m: m.config.id))
    passing = [m for m in measurements if m.status == "ok"]
    if passing:
        r.best.CopyFrom(min(passing, key=lambda m: m.median_ms).config)
    if default is not None:
        r.default_baseline.CopyFrom(default)
    if vendor is not None:
        r.vendor_baseline.CopyFrom(vendor)
    if default is not None or vendor is not None:
        r.vendor, r.baselines_fingerprint = "kernels.gemm:vendor", "some-fingerprint"
    return r


def config(bm: int, bn: int) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": 4}


@pytest.fixture
def synthetic(tmp_path) -> Path:
    project = make_project(tmp_path / "project", MANIFEST)
    records = [
        # 4096^3 fp16: everything measured; 0.2 ms is 687 TFLOP/s, 69% of the H200's 989.5
        record((4096, 4096, 4096), "float16", [
            measurement(config(128, 256), median=0.2), measurement(config(64, 64), median=0.5),
            measurement(config(128, 64), median=0.3),
            measurement(config(64, 256), "invalid", reason="shared_memory: needs 300000 bytes, sm90 allows 232448"),
        ], default=measurement(config(64, 64), median=0.5), vendor=measurement({}, median=0.18)),
        # made before baselines existed
        record((256, 256, 256), "float16", [measurement(config(64, 64), median=0.01),
                                            measurement(config(128, 64), "wrong_result", reason="relative error 0.5"),
                                            measurement(config(128, 256), "crashed", reason="illegal memory access")]),
        # a failed default baseline, and no passing config at all
        record((4096, 4096, 4096), "bfloat16", [measurement(config(64, 64), "timeout", reason="no result in 120 s")],
               default=measurement(config(64, 64), "runtime_error", reason="OutOfResources: shared memory"),
               vendor=measurement({}, median=0.19)),
    ]
    cache_io.write_cache(cache_io.sorted_cache(records), project / "generated" / "gemm.tuning.pb")
    # softmax: tuned, but declares no cost and no baselines; rmsnorm: never tuned
    softmax = record((8, 1000), "float16", [measurement({"BLOCK_N": 1024, "num_warps": 4}, median=0.004)],
                     kernel="softmax", key=("M", "N"))
    cache_io.write_cache(cache_io.sorted_cache([softmax]), project / "generated" / "softmax.tuning.pb")
    work = project / ".aot_tune"
    append_run(work, RunRecord(started_at="2026-11-22T01:00:00+00:00", wall_s=10.0, ok=True, device="h200",
                               backend="cuda", kernels=["gemm"],
                               stages={"specialize": [0.5, 1.0], "compile": [1.0, 6.0], "bench": [5.0, 9.5]}))
    for target, status, seconds in (("sm90", "ok", 2.0), ("sm90", "shared_memory", 1.5), ("sm80", "ok", 3.0)):
        out = work / "compile" / "gemm" / target / "spec0" / f"{target}-{status}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        result = CompileResult("gemm", f"{target}-{status}", target, status=status, seconds=seconds,
                               message="needs more shared memory")
        out.write_text(CompileRecord("fp", {}, "spec0", [], result).to_json())
    return project


def test_synthetic_cache_rates_floors_failures_and_missing_baselines(synthetic, tmp_path):
    manifest = load_manifest(synthetic / "tuning.yaml")
    report = build_report(manifest)
    gemm = next(k for k in report.kernels if k.name == "gemm")
    (device,) = gemm.devices
    rows = {(r.dtype, r.shape): r for r in device.rows}
    big = rows[("float16", "4096x4096x4096")]
    assert big.tuned.ms == 0.2 and big.tuned.rate.unit == "TFLOP/s"
    assert big.tuned.rate.value == pytest.approx(2 * 4096**3 / 0.2e-3 / 1e12)
    assert big.tuned.rate.peak == 989.5 and big.of_floor == pytest.approx(2 * 4096**3 / 989.5e12 / 0.2e-3)
    assert big.vs_default == pytest.approx(2.5) and big.vs_vendor == pytest.approx(0.9)
    old = rows[("float16", "256x256x256")]
    assert old.default.ms is None and "predates the baselines" in old.default.note
    broken = rows[("bfloat16", "4096x4096x4096")]
    assert broken.tuned.ms is None and broken.tuned.note == "no config passed"
    assert broken.default.ms is None and broken.default.note.startswith("runtime_error: OutOfResources")
    assert {f.reason: f.count for f in device.failures} == {
        "crashed": 1, "default baseline runtime_error": 1, "invalid: shared_memory": 1, "timeout": 1,
        "wrong_result": 1}
    # the heatmap: BLOCK_N=256 is in the fastest config of the one shape where it passed
    heat = device.heatmap
    assert heat.params == ["BLOCK_M", "BLOCK_N"]
    assert heat.scores[1][heat.values[1].index(256)] == pytest.approx(1.0)
    assert heat.scores[0][heat.values[0].index(64)] == pytest.approx((0.2 / 0.5 * 1.0) ** 0.5)
    # coverage: the records' fingerprints are not current, and no bf16 256^3 record exists
    assert sorted(device.coverage_grid) == [["256x256x256", "stale", "missing"],
                                            ["4096x4096x4096", "stale", "stale"]]
    # compile outputs of the tree, and the run log split into disjoint parts
    assert gemm.compile_time.compiles == 3 and gemm.compile_time.by_target["sm90"] == (2, 3.5)
    assert [f.reason for f in gemm.compile_time.failures] == ["sm90 shared_memory"]
    assert report.runs[0].split == time_split(read_runs(synthetic / ".aot_tune")[0])
    assert report.runs[0].split == {"specialize": 0.5, "compile": 4.0, "bench": 4.5, "other": 1.0}
    softmax = next(k for k in report.kernels if k.name == "softmax")
    (row,) = softmax.devices[0].rows
    assert softmax.unit is None and row.tuned.ms == 0.004 and row.tuned.rate is None and row.floor_ms is None
    assert row.default.note == "no default_config in the manifest" and row.vendor.note == "no vendor in the manifest"
    assert next(k for k in report.kernels if k.name == "rmsnorm").devices == []

    paths = write_report(manifest, tmp_path / "out")
    html, markdown = paths.html.read_text(), paths.markdown.read_text()
    page = structure(html)
    assert page.images == 5  # comparison and heatmap of gemm and softmax on h200, and the run split
    for text in ("687", "69%", "2.50x", "0.90x", "invalid: shared_memory", "predates the baselines",
                 "No records for rmsnorm", "sm90 shared_memory", "add cost to the manifest"):
        assert text in html, text
    assert "| 4096x4096x4096 | float16 | 200 | 500 | 180 | 2.50x | 0.90x | 687 | 989.5 | 69% |" in markdown


def test_without_matplotlib_the_report_has_tables_and_says_how_to_get_plots(synthetic, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    paths = write_report(load_manifest(synthetic / "tuning.yaml"), tmp_path / "out")
    html = paths.html.read_text()
    assert structure(html).images == 0
    assert "Plots need matplotlib" in html and "aot-tune[report]" in html
    assert "687" in html and "invalid: shared_memory" in html


def test_doit_report_command(synthetic):
    proc = doit(synthetic, "report", "--output", "out", "gemm")
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and (synthetic / "out" / "index.html").exists()
    assert "softmax" not in (synthetic / "out" / "summary.md").read_text()
    assert "## gemm" in (synthetic / "out" / "summary.md").read_text()
    bad = doit(synthetic, "report", "nosuchkernel")
    assert bad.returncode != 0 and "unknown kernel 'nosuchkernel'" in bad.stderr
    assert len([line for line in bad.stderr.splitlines() if "nosuchkernel" in line]) == 1


def test_declared_devices_without_a_table_are_in_the_coverage_table(synthetic, tmp_path):
    manifest_path = synthetic / "tuning.yaml"
    manifest_path.write_text(manifest_path.read_text().replace("defaults:\n", "defaults:\n  devices: [h200, h100-sxm]\n"))
    paths = write_report(load_manifest(manifest_path), tmp_path / "out")
    markdown, html = paths.markdown.read_text(), paths.html.read_text()
    structure(html)
    assert "| gemm | h100-sxm (declared, no table) | 0 | 0 | 4 |" in markdown  # 2 shapes x 2 dtypes
    assert "| gemm | h200 (declared" not in markdown  # it has a table
    assert "| rmsnorm | h200 (declared, no table) | 0 | 0 | 1 |" in markdown
    assert "| rmsnorm | none |" not in markdown
    assert "h100-sxm <span class=\"muted\">(declared, no table)</span>" in html


def test_each_logged_run_shows_what_it_predicted_against_its_wall_time(synthetic, tmp_path):
    append_run(synthetic / ".aot_tune", RunRecord(
        started_at="2026-11-25T21:00:00+00:00", wall_s=30.0, ok=True, device="h200", backend="cuda",
        kernels=["gemm"], stages={"compile": [2.0, 12.0], "bench": [3.0, 28.0]}, predicted_s=24.5,
        predicted={"start-up": 2.0, "compile": 10.0, "bench": 12.0, "rest": 0.5}))
    paths = write_report(load_manifest(synthetic / "tuning.yaml"), tmp_path / "out")
    markdown, html = paths.markdown.read_text(), paths.html.read_text()
    structure(html)
    assert "| wall | predicted | specialize |" in markdown
    assert "| 2026-11-22T01:00:00+00:00 | gemm | h200 | 10.0 s | — |" in markdown  # logged before predictions
    assert "| 2026-11-25T21:00:00+00:00 | gemm | h200 | 30.0 s | 24.5 s |" in markdown
    assert "<td>30.0 s</td><td>24.5 s</td>" in html
