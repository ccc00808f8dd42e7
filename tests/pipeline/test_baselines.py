"""Baselines (the default config and the vendor function) through real `doit tune` runs under the
interpreter: declaring them on a tuned project measures them alone, keeping every config's
measurement; a run after that does nothing; editing the vendor function re-measures only it."""
from __future__ import annotations

from pathlib import Path

import pytest
from tunerun import executed, make_project, tune, vector_add_manifest

from aot_tune.cache import config_from_proto, read_cache
from aot_tune.runs.log import read_runs

MANIFEST = vector_add_manifest("""\
    space:
      BLOCK_SIZE: [128, 1024]
      num_warps: [4]
    shapes:
      - {n: 1000}
""")
BASELINES = """\
    default_config: {BLOCK_SIZE: "max(256, next_pow2(n))", num_warps: 4}
    vendor: kernels.vector_add:vendor
"""


def configs_of(project: Path) -> dict:
    (record,) = read_cache(project / "generated" / "vector_add.tuning.pb").records
    return {m.config.id: (m.median_ms, tuple(m.times_ms)) for m in record.measurements}, record


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("baselines"), MANIFEST)
    tune(project, "-n", "2")
    return project


def test_declared_baselines_are_measured_alone_then_kept(project):
    before, old = configs_of(project)
    assert not old.HasField("default_baseline") and old.baselines_fingerprint == ""

    (project / "tuning.yaml").write_text(MANIFEST + BASELINES)
    proc = tune(project, "-n", "2")
    names = executed(proc)
    assert not [n for n in names if n.startswith("compile:")]
    assert "bench:vector_add:interpreter:float16:1000" in names
    assert "baselines: default ok 1, vendor ok 1" in proc.stderr
    assert "bench: " not in proc.stderr  # no config was measured again
    after, record = configs_of(project)
    assert after == before  # the configs' statistics are the ones of the first run
    assert config_from_proto(record.default_baseline.config) == {"BLOCK_SIZE": 1024, "num_warps": 4}
    # a default inside the space is not timed again: its baseline is the config's own measurement
    assert record.default_baseline.median_ms == before[record.default_baseline.config.id][0]
    # the device worker said where its batch's time went: within what the bench held the device
    worker = read_runs(project / ".aot_tune")[-1].worker_seconds
    assert 0 < worker["device batches"] <= worker["device held"]
    assert record.default_baseline.status == record.vendor_baseline.status == "ok"
    assert record.vendor_baseline.config.id == "vendor" and record.vendor == "kernels.vector_add:vendor"
    assert record.default_baseline.median_ms > 0 and record.vendor_baseline.median_ms > 0
    assert not record.vendor_baseline.times_ms  # merged caches keep statistics, not samples
    assert record.bench_seconds > old.bench_seconds  # the first task's time, and the baselines' on top

    assert executed(tune(project, "-n", "2")) == []

    source = project / "kernels" / "vector_add.py"
    source.write_text(source.read_text().replace("return torch.add(x, y)", "return x + y"))
    proc = tune(project, "-n", "2")
    assert [n for n in executed(proc) if n.startswith(("compile:", "bench:"))] == \
        ["bench:vector_add:interpreter:float16:1000"]
    again, changed = configs_of(project)
    assert again == before and changed.baselines_fingerprint != record.baselines_fingerprint
