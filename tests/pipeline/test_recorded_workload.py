"""``aot_tune record`` end to end, in a project outside this checkout, on a library installed with
pip and never edited (tests/fixtures/reclib: an index-tensor gather, an in-place scale with
``restore_value``, a row sum into a zeroed output with ``reset_to_zero``):

the user's workload is recorded (never benchmarking), ``doit tune`` tunes every recorded kernel
on the interpreter, and the workload run again with ``aot_tune.use_tables("generated")``
makes zero autotuner benchmarks and computes what the library's own autotuned run computes.
Recording the same workload again changes no byte and leaves ``doit tune`` nothing to do.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from tunerun import REPO, doit_command, executed, pip_installed, subprocess_env

FIXTURE = REPO / "tests" / "fixtures" / "reclib"
TUNE = doit_command("tune", "-n", "2", "--bench-backend", "interpreter")


def run(cwd: Path, *args: str, env: dict, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if ok:
        assert proc.returncode == 0, f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


#: A module of the library that notes each process importing it (the library's ops import it).
AUDIT = ("import os\n"
         "if os.environ.get('RECLIB_IMPORTS'):\n"
         "    with open(os.environ['RECLIB_IMPORTS'], 'a') as log:\n"
         "        log.write(f'{os.getpid()}\\n')\n")
OPS = "from reclib import _audit  # noqa: F401\n" + (FIXTURE / "ops.py").read_text()


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """reclib built and installed with pip into a folder of its own; its ops import ``_audit``,
    which notes each process that imports the library in the file ``RECLIB_IMPORTS`` names."""
    return pip_installed(tmp_path_factory.mktemp("reclib"), "reclib", {"ops.py": OPS, "_audit.py": AUDIT})


@pytest.fixture(scope="module")
def tuned(installed: Path, tmp_path_factory) -> SimpleNamespace:
    """A project whose workload (tests/fixtures/reclib/workload.py) was recorded with
    ``aot_tune record``, then tuned with ``doit tune`` on the interpreter, noting the processes
    of the tune that imported the library: the project, both runs, the notes' file and the
    library's files as installed, before either run."""
    project = tmp_path_factory.mktemp("recorded") / "project"
    project.mkdir()
    shutil.copy(FIXTURE / "workload.py", project)
    env = subprocess_env(installed)
    site_files = digests(installed)
    recorded = run(project, sys.executable, "-m", "aot_tune", "record", "--", sys.executable, "workload.py",
                   env={**env, "TRITON_INTERPRET": "1"})
    imports = project.parent / "imports.log"
    proc = run(project, *TUNE, env={**env, "RECLIB_IMPORTS": str(imports)})
    return SimpleNamespace(project=project, recorded=recorded, tune=proc, imports=imports, site_files=site_files)


def workload(project: Path, env: dict, **extra: str) -> dict:
    proc = run(project, sys.executable, "workload.py", env={**env, "TRITON_INTERPRET": "1", **extra})
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_recorded_workload_is_tuned_and_runs_with_zero_autotuning(installed: Path, tuned) -> None:
    project, recorded = tuned.project, tuned.recorded
    env = subprocess_env(installed)

    own = workload(project, env, WORKLOAD_CPU_BENCH="1")  # the library autotuning at run time
    assert own["benchmarks"] == 18  # 3 kernels x 2 keys x 3 configs

    assert json.loads(recorded.stdout.splitlines()[0])["benchmarks"] == 0  # recording never benchmarks
    assert "6 distinct launches of 3 autotuned kernels" in recorded.stdout, recorded.stdout
    manifest = (project / "tuning.yaml").read_text()
    for kernel in ("_gather_kernel", "_scale_inplace_kernel", "_row_sum_kernel"):
        assert f"    kernel: reclib.ops:{kernel}\n" in manifest
        assert (project / "recordings" / f"{kernel}.json").is_file()
    assert "key: [n, arg_dtypes]" in manifest and 'arg_dtypes: "f32.i32.f32"' in manifest
    index = json.loads((project / "recordings" / "_gather_kernel.json").read_text())
    kept = [arg for launch in index["launches"].values() for arg in launch["arguments"] if arg[0] == "IDX"]
    assert all(arg[1]["tensor"]["values"] is not None for arg in kept)  # the index tensor, by value
    inplace = json.loads((project / "recordings" / "_scale_inplace_kernel.json").read_text())
    assert inplace["restore_value"] == ["X"]
    assert all(launch["written"] == ["X"] for launch in inplace["launches"].values())

    proc = tuned.tune
    assert "bench: 18 config measurements, 18 ok" in proc.stdout + proc.stderr, proc.stderr
    for kernel in ("_gather_kernel", "_scale_inplace_kernel", "_row_sum_kernel"):
        module = (project / "generated" / f"{kernel}.py").read_text()
        assert f"AUTOTUNER = {{'dtypes_dim': 'arg_dtypes', 'kernel': 'reclib.ops:{kernel}'}}" in module

    assert_references_compile_first(project, installed)

    tabled = workload(project, env, WORKLOAD_TABLES="generated")
    assert tabled["benchmarks"] == 0
    for mine, theirs in zip(tabled["outputs"], own["outputs"]):
        assert mine[0] == theirs[0] and mine[1] == theirs[1]  # gather, in-place scale: exact
        assert all(abs(a - b) < 1e-5 for a, b in zip(mine[2], theirs[2]))  # atomics: summation order

    before = {p: p.read_bytes() for p in [project / "tuning.yaml", *sorted((project / "recordings").iterdir())]}
    again = run(project, sys.executable, "-m", "aot_tune", "record", "--", sys.executable, "workload.py",
                env={**env, "TRITON_INTERPRET": "1"})
    assert "nothing new" in again.stdout, again.stdout
    assert {p: p.read_bytes() for p in before} == before
    assert executed(run(project, *TUNE, env=env)) == []
    assert digests(installed) == tuned.site_files, "the installed library was modified"


def assert_references_compile_first(project: Path, installed: Path) -> None:
    """Each recorded shape's reference is the library's own config, and the compile tasks start
    with its compiles: every check of the shape compares with it."""
    from aot_tune.bench.runner import INTERPRETER_DEVICE
    from aot_tune.manifest import load_manifest
    from aot_tune.pipeline.compiling import Compiles
    from aot_tune.pipeline.plan import build_plan
    from aot_tune.pipeline.staleness import Staleness
    from rules import compile as compile_rule

    sys.path.insert(0, str(installed))
    try:
        manifest = load_manifest(project / "tuning.yaml")
        plan = build_plan(manifest, INTERPRETER_DEVICE, manifest.kernels)
    finally:
        sys.path.remove(str(installed))
    references = set()
    for kp in plan.kernels:
        recording = json.loads((project / "recordings" / f"{kp.spec.name}.json").read_text())
        for unit in kp.bench_units:
            launch = recording["launches"][str(kp.spec.shape_dict(unit.shape)["recorded"])]
            assert unit.reference_config is not None and unit.reference_config.as_dict() == launch["library_config"]
            references.update(cu.name for cu in kp.compiles_for(unit, unit.reference_config, kp.spec.targets))
    staleness = Staleness(plan)
    session = SimpleNamespace(plan=plan, staleness=staleness, start_stage=lambda *args: None, queue_compile=None,
                              compiles=Compiles(plan, None, staleness, None))  # its references: no worker needed
    order = [f"compile:{task['name']}" for task in compile_rule.tasks(session) if task["name"]]
    assert references and set(order[:len(references)]) == references, (order, references)


def test_recording_adds_new_launches_and_keeps_edits(installed: Path, tmp_path: Path) -> None:
    """A second workload's new launches are appended to the entries (an edit made by hand stays),
    and a command that fails keeps what it recorded and passes its exit status on."""
    project = tmp_path / "project"
    project.mkdir()
    env = {**subprocess_env(installed), "TRITON_INTERPRET": "1"}
    first = "import torch\nfrom reclib import ops\nops.scale_(torch.randn(64), 2.0)\n"
    (project / "first.py").write_text(first)
    run(project, *doit_command("record", "--", sys.executable, "first.py"), env=env)
    manifest = project / "tuning.yaml"
    edited = manifest.read_text().replace("    dtypes: [float32]\n", "    dtypes: [float32]\n    bench: {rep_ms: 5}\n")
    manifest.write_text(edited)

    second = first.replace("64", "256") + "ops.gather(torch.randn(8), torch.arange(8))\nraise SystemExit(4)\n"
    (project / "second.py").write_text(second)
    proc = run(project, sys.executable, "-m", "aot_tune", "record", "--", sys.executable, "second.py", env=env,
               ok=False)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "the command exited 4" in proc.stdout
    text = manifest.read_text()
    assert text.startswith(edited.split("    shapes:\n")[0])  # the edit stays
    assert "bench: {rep_ms: 5}" in text
    assert text.count("recorded: ") == 3 and "_gather_kernel:" in text
    assert "{n: 256, arg_dtypes: \"f32\"" in text
    assert 'arg_dtypes: "f32.i64.f32"' in text  # an int64 index tensor is another key than int32

    broken = text.replace("version: 1", "version: 2")
    manifest.write_text(broken)
    proc = run(project, sys.executable, "-m", "aot_tune", "record", "--", sys.executable, "first.py", env=env,
               ok=False)
    assert proc.returncode != 0 and "version" in proc.stderr, proc.stderr
    assert manifest.read_text() == broken  # a recording never writes over a manifest it cannot read


#: Many small autotuned kernels, as a library has them: each scales its input by its own factor.
MANY_KERNELS = 8
MANY_OPS = '''\
import torch
import triton
import triton.language as tl

CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=1)]
'''
MANY_KERNEL = '''

@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def scale_{i}_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=mask) * {i}.0, mask=mask)


def scale_{i}(x):
    y = torch.empty_like(x)
    n = x.numel()
    scale_{i}_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    return y
'''
MANY_WORKLOAD = f'''\
import os, torch
if os.environ.get("WORKLOAD_TABLES"):
    import aot_tune
    aot_tune.use_tables(os.environ["WORKLOAD_TABLES"], verbose=True)
from manylib import ops
for n in (64, 96):
    x = torch.randn(n)
    for i in range({MANY_KERNELS}):
        assert torch.allclose(getattr(ops, f"scale_{{i}}")(x), x * i)
'''


def test_a_workload_of_many_small_kernels_is_recorded_and_tuned_incrementally(tmp_path: Path) -> None:
    """8 autotuned kernels, 2 keys each: one entry each, every shape benched once, a second
    recording and a second tune change nothing, and a new launch of one kernel retunes only it."""
    site = tmp_path / "site"
    (site / "manylib").mkdir(parents=True)
    (site / "manylib" / "__init__.py").write_text("")
    (site / "manylib" / "ops.py").write_text(MANY_OPS + "".join(MANY_KERNEL.format(i=i) for i in range(MANY_KERNELS)))
    project = tmp_path / "project"
    project.mkdir()
    (project / "workload.py").write_text(MANY_WORKLOAD)
    env = subprocess_env(site)
    record = (sys.executable, "-m", "aot_tune", "record", "--", sys.executable, "workload.py")
    proc = run(project, *record, env={**env, "TRITON_INTERPRET": "1"})
    assert f"{2 * MANY_KERNELS} distinct launches of {MANY_KERNELS} autotuned kernels" in proc.stdout, proc.stdout
    manifest = project / "tuning.yaml"
    manifest.write_text(manifest.read_text().replace("version: 1\n", "version: 1\ndefaults:\n  targets: [sm90]\n"))

    tune = doit_command("tune", "--bench-backend", "interpreter")
    first = run(project, *tune, env=env)
    benched = [name for name in executed(first) if name.startswith("bench:")]
    assert len(benched) == 2 * MANY_KERNELS
    assert len(list((project / "generated").glob("scale_*_kernel.py"))) == MANY_KERNELS
    again = run(project, *record, env={**env, "TRITON_INTERPRET": "1"})
    assert "nothing new" in again.stdout
    assert executed(run(project, *tune, env=env)) == []

    (project / "more.py").write_text("import torch\nfrom manylib import ops\nops.scale_3(torch.randn(128))\n")
    run(project, sys.executable, "-m", "aot_tune", "record", "--", sys.executable, "more.py",
        env={**env, "TRITON_INTERPRET": "1"})
    rerun = [name for name in executed(run(project, *tune, env=env)) if name.startswith(("bench:", "generate:"))]
    assert rerun == [n for n in rerun if "scale_3_kernel" in n] and len(rerun) == 2, rerun
    tabled = run(project, sys.executable, "workload.py", env={**env, "TRITON_INTERPRET": "1",
                                                              "WORKLOAD_TABLES": "generated"})
    assert f"{2 * MANY_KERNELS + 1} tuned keys installed in {MANY_KERNELS} autotuners" in tabled.stderr, tabled.stderr


def test_the_stages_rebuild_recorded_kernels_from_their_source_without_importing_the_library(
        installed: Path, tuned, tmp_path: Path) -> None:
    """A recorded kernel's Triton source is rebuilt with Triton alone in every stage: no compile,
    specialize or bench worker imports the library. Once the installed file no longer matches the
    recording, the run says so and the stages import the library, and still tune it."""
    for kernel in ("_gather_kernel", "_scale_inplace_kernel", "_row_sum_kernel"):
        recording = json.loads((tuned.project / "recordings" / f"{kernel}.json").read_text())
        assert recording["source"]["kernel"] == f"reclib.ops:{kernel}", recording.get("source_refused")
        assert set(recording["source"]["files"]) == {"reclib/ops.py"}
        assert all(len(launch["heuristics_of_config"]) == 3 for launch in recording["launches"].values())
    row_sum = json.loads((tuned.project / "recordings" / "_row_sum_kernel.json").read_text())
    assert any(values for launch in row_sum["launches"].values() for values in launch["heuristics"])

    proc = tuned.tune
    assert "bench: 18 config measurements, 18 ok" in proc.stdout + proc.stderr, proc.stderr
    imports = tuned.imports
    assert not imports.exists(), f"{len(imports.read_text().split())} processes of the tune imported the library"
    assert "of it the workers' start-up (triton imports" in proc.stderr  # no compile needs torch

    # a copy of the library and of the project, tuned again from nothing, as on a new machine
    library = Path(shutil.copytree(installed, tmp_path / "lib"))
    project = Path(shutil.copytree(tuned.project, tmp_path / "project",
                                   ignore=shutil.ignore_patterns(".aot_tune", "generated")))
    (library / "reclib" / "ops.py").write_text(OPS + "# patched in place\n")  # same version: nothing is stale
    imports = tmp_path / "imports.log"
    proc = run(project, *TUNE, env={**subprocess_env(library), "RECLIB_IMPORTS": str(imports)})
    output = proc.stdout + proc.stderr
    assert "_gather_kernel: the stages import reclib.ops: its recorded source is stale" in output, output
    assert "changed since it was recorded); fix: record the workload again" in output
    assert "bench: 18 config measurements, 18 ok" in output
    assert imports.exists()
