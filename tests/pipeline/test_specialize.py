"""The specialization step: launches that specialize alike share one compile task, and that one
compile is what Triton's cache serves to each of them (real captures and cross-compiles, CPU)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from tunerun import gemm_manifest, make_project

from aot_tune.build.compile import CompileRecord, CompileRequest, CompileResult
from aot_tune.workers.pools import Executors
from aot_tune.bench.runner import INTERPRETER_DEVICE
from aot_tune.manifest import load_manifest
from aot_tune.pipeline.plan import build_plan
from aot_tune.pipeline.staleness import Staleness
from aot_tune.build.specialize import UNBOUND, read_table
from aot_tune.pipeline.session import TuneSession

pytest.importorskip("triton")

ALIGNED, ALSO_ALIGNED, UNALIGNED = (64, 64, 64), (128, 64, 96), (33, 65, 47)  # (M, N, K)

MANIFEST = gemm_manifest("""\
    space: {BLOCK_M: [32], BLOCK_N: [32], BLOCK_K: [32, 64], GROUP_M: [8], num_warps: [2], num_stages: [3]}
    shapes:
      - {M: 64, N: 64, K: 64}
      - {M: 128, N: 64, K: 96}
      - {M: 33, N: 65, K: 47}
""")


def plan_for(project):
    manifest = load_manifest(project / "tuning.yaml")
    return build_plan(manifest, INTERPRETER_DEVICE, manifest.kernels)


@pytest.fixture(scope="module")
def specialized(tmp_path_factory, compile_executors):
    """A project whose specialization step ran once, through the session as `doit tune` runs it."""
    project = make_project(tmp_path_factory.mktemp("specialize"), MANIFEST)
    plan = plan_for(project)
    kp = plan.kernels[0]
    assert kp.compile_units == [] and len(Staleness(plan).launches_to_specialize(kp)) == 6  # 2 configs x 3 shapes
    session = TuneSession(plan, compile_executors)
    session.specialize()
    return project, session, kp


def test_shapes_sharing_a_specialization_share_one_compile_task(specialized):
    _, _, kp = specialized
    units = {(u.config.id, u.specialization): u for u in kp.compile_units}
    assert len(units) == 4  # 2 configs x 2 specializations (divisible by 16 or not), not 2 x 3 shapes
    by_launch = {launch: u for u in kp.compile_units for launch in u.launches}
    for config in kp.bench_units[0].configs:
        aligned, also, unaligned = (kp.compiles_for(b, config, ("sm90",)) for b in kp.bench_units)
        assert aligned == also and aligned != unaligned
    shared = by_launch[(ALIGNED, "float16")]
    assert shared.launches == ((ALIGNED, "float16"), (ALSO_ALIGNED, "float16"))
    assert by_launch[(UNALIGNED, "float16")].launches == ((UNALIGNED, "float16"),)
    described = kp.specializations.described
    assert described[shared.specialization].startswith("a_ptr:*fp16/16 b_ptr:*fp16/16 c_ptr:*fp16/16 M:i32/16")
    assert "M:i32 N:i32 K:i32" in described[by_launch[(UNALIGNED, "float16")].specialization]


def test_the_table_is_durable_and_a_second_plan_captures_nothing(specialized):
    project, session, kp = specialized
    again = plan_for(project)
    assert again.kernels[0].unspecialized == []
    assert [u.name for u in again.kernels[0].compile_units] == [u.name for u in kp.compile_units]
    stored = json.loads(kp.specializations_path.read_text())
    assert set(stored["launches"]["sm90"]) == {"float16:64x64x64", "float16:128x64x96", "float16:33x65x47"}
    assert read_table(kp.specializations_path, "another fingerprint").by_target == {}  # edited kernel: recapture


def test_an_edit_of_the_kernel_body_keeps_the_specializations_and_one_of_its_parameters_does_not(
        specialized, tmp_path):
    """A retune after a kernel edit compiles again but captures nothing: the arguments'
    specializations are read off the launch, the inputs and the kernel's parameters alone."""
    import shutil

    project, _, kp = specialized
    copy = tmp_path / "edited"
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns("__pycache__"))
    kernel = copy / "kernels" / "gemm.py"
    source = kernel.read_text()
    body_edit = source.replace("    pid = tl.program_id(0)\n", "    pid = tl.program_id(0)  # edited\n", 1)
    assert body_edit != source
    kernel.write_text(body_edit)
    edited = plan_for(copy).kernels[0]
    assert edited.unspecialized == []  # nothing to capture again
    assert {u.fingerprint for u in edited.compile_units}.isdisjoint(u.fingerprint for u in kp.compile_units)  # compiled again
    kernel.write_text(source.replace("def matmul_kernel(", "def matmul_kernel(unused_flag, ", 1))
    assert len(plan_for(copy).kernels[0].unspecialized) == 6  # a parameter more: every launch captured again


def test_one_compile_serves_every_launch_of_its_specialization(specialized, compile_executors):
    """The bench stage's cache hits depend on it: compile the representative, then, in a fresh
    process as the bench stage is, launch the other shape of the specialization through the launch
    path: Triton finds it in its on-disk cache."""
    _, session, kp = specialized
    unit = next(u for u in kp.compile_units if len(u.launches) == 2)
    session.start_stage("compile", 1)
    session.compile(kp, unit)
    first = json.loads(unit.output.read_text())
    assert first["status"] == "ok" and first["cache_misses"] == 1 and first["specialization"] == unit.specialization

    def launch(shape):
        request = CompileRequest(
            kernel="gemm", root=str(session.plan.manifest.root), kernel_ref=kp.spec.kernel,
            launch_ref=kp.spec.launch, inputs_ref=kp.spec.inputs, config=unit.config.as_dict(), target="sm90",
            shapes=(kp.spec.shape_dict(shape),), dtypes=("float16",))
        return fresh.compile(request, unit.config.id)

    fresh = Executors(INTERPRETER_DEVICE, Path(compile_executors.triton_cache_dir), compile_jobs=1)
    try:
        other = launch(unit.launches[1][0])
        unaligned = launch(UNALIGNED)
    finally:
        fresh.close()
    assert (other.cache_hits, other.cache_misses) == (1, 0)
    assert other.specializations == first["specializations"]
    assert (unaligned.cache_hits, unaligned.cache_misses) == (0, 1)  # another specialization, another compile


def test_a_launch_that_fails_is_captured_as_unbound_and_compiled_to_a_typed_error(tmp_path, compile_executors):
    project = make_project(tmp_path, MANIFEST.replace("GROUP_M: [8]", "GROUP_M: [8], BLOCK_Q: [1]"))
    plan = plan_for(project)
    session = TuneSession(plan, compile_executors)
    session.specialize()
    kp = plan.kernels[0]
    assert {u.specialization for u in kp.compile_units} == {UNBOUND}
    assert len(kp.compile_units) == 2  # one per config: the failing launches are not told apart
    session.start_stage("compile", 1)
    session.compile(kp, kp.compile_units[0])
    result = json.loads(kp.compile_units[0].output.read_text())
    assert result["status"] == "launch_error" and "BLOCK_Q" in result["message"]


def test_the_compile_queue_starts_with_what_took_longest_last_time(specialized):
    """After an edit to the kernel every config compiles again; the one whose last compile took
    longest goes first, whatever its estimate (here the generic one ranks BLOCK_K 64 first)."""
    from aot_tune.rules import compile as compile_rule

    _, session, kp = specialized
    saved = {u.output: u.output.read_text() if u.output.exists() else None for u in kp.compile_units}

    def queue() -> list[str]:
        return [t["name"] for t in compile_rule.tasks(session) if t.get("name")]

    try:
        for unit in kp.compile_units:
            unit.output.unlink(missing_ok=True)
        by_name = {u.name.partition(":")[2]: u for u in kp.compile_units}
        assert by_name[queue()[0]].config.as_dict()["BLOCK_K"] == 64
        slow = next(u for u in kp.compile_units if u.config.as_dict()["BLOCK_K"] == 32)
        for unit in kp.compile_units:
            unit.output.parent.mkdir(parents=True, exist_ok=True)
            result = CompileResult(unit.kernel, unit.config.id, unit.target, seconds=9.0 if unit is slow else 1.0)
            unit.output.write_text(CompileRecord("an older kernel", unit.config.as_dict(), unit.specialization, [],
                                                 result).to_json())
        assert queue()[0] == slow.name.partition(":")[2]
    finally:
        for path, text in saved.items():
            path.unlink(missing_ok=True) if text is None else path.write_text(text)


def test_a_kernels_launches_are_captured_in_parts_over_the_workers():
    from aot_tune.build.specialize import SpecializeRequest, split_request

    launches = tuple(((m,), {"M": m}, dtype, tuple((f"c{i}", {"B": i}) for i in range(30)))
                     for m in (64, 128, 256) for dtype in ("float16", "bfloat16"))  # 180 launches
    request = SpecializeRequest("gemm", "/p", "k:k", "k:l", "k:i", "sm90", launches)
    parts = split_request(request, 4)
    counts = [sum(len(configs) for *_, configs in part.launches) for part in parts]
    assert counts == [45, 45, 45, 45]
    flat = sorted((shape, dtype, config_id) for part in parts for shape, _, dtype, configs in part.launches
                  for config_id, _ in configs)
    assert flat == sorted((shape, dtype, config_id) for shape, _, dtype, configs in launches for config_id, _ in configs)
    assert len(split_request(request, 16)) == 6  # at least 32 launches a part
    assert split_request(request, 1) == [request]
