"""Editing a kernel's key or space in tuning.yaml: its records are stale, not corrupt. `doit tune`
retunes this machine's device and says in one line what changed; another device's stale table
is never dropped unasked (`doit check` names it, `doit drop-device` drops it)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tunerun import doit, executed, make_project, tune, vector_add_manifest

from aot_tune import cache as cache_io
from aot_tune.codegen import module_literals

MANIFEST = vector_add_manifest("""\
    space: {BLOCK_SIZE: [256, 1024], num_warps: [4], num_stages: [1]}
    shapes: [{n: 4096}]
    dtypes: [float32]
""")
KEY_LINE = MANIFEST.splitlines().index("    key: [n]") + 1
SPACE_LINE = KEY_LINE + 1


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """The project tuned once under the interpreter (each test edits a copy of it)."""
    root = make_project(tmp_path_factory.mktemp("tuned"), MANIFEST)
    tune(root)
    return root


@pytest.fixture
def project(tuned, tmp_path) -> Path:
    return Path(shutil.copytree(tuned, tmp_path / "project"))


def edit(root: Path, old: str, new: str) -> None:
    path = root / "tuning.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def edit_key(root: Path) -> None:
    edit(root, "key: [n]", "key: [n, m]")
    edit(root, "{n: 4096}", "{n: 4096, m: 1}")


def module(root: Path) -> dict:
    return module_literals(root / "generated" / "vector_add.py")


def notes(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("aot_tune: vector_add:")]


def test_a_key_edit_retunes_and_says_what_changed(project):
    edit_key(project)
    check = doit(project, "check")
    assert check.returncode == 1
    assert f"the key changed from [n] to [n, m] (tuning.yaml:{KEY_LINE})" in check.stdout
    assert "restore" not in check.stdout + check.stderr

    proc = tune(project)
    assert notes(proc) == [f"aot_tune: vector_add: the key changed from [n] to [n, m] (tuning.yaml:{KEY_LINE}): "
                           f"the tables of interpreter are stale; doit tune retunes this machine's device "
                           f"(interpreter)"]
    assert "bench:vector_add:interpreter:float32:4096x1" in executed(proc)
    assert module(project)["KEY"] == ("n", "m")
    assert list(module(project)["TABLES"]["interpreter"]) == [(4096, 1, "float32")]
    records = cache_io.read_cache(project / "generated" / "vector_add.tuning.pb").records
    assert [tuple(r.key_names) for r in records] == [("n", "m")]  # the old-key record was replaced
    assert doit(project, "check").returncode == 0
    assert "nothing to do" in tune(project).stdout


def test_a_space_edit_retunes_and_says_what_changed(project):
    edit(project, ", num_stages: [1]}", "}")
    proc = tune(project)
    assert notes(proc) == [f"aot_tune: vector_add: param num_stages removed from the space (tuning.yaml:"
                           f"{SPACE_LINE}): the tables of interpreter are stale; doit tune retunes this machine's "
                           f"device (interpreter)"]
    (config,) = module(project)["TABLES"]["interpreter"].values()
    assert "num_stages" not in config
    assert doit(project, "check").returncode == 0


def with_h200_table(root: Path) -> None:
    """Give the project an H200 table: a copy of its record on an H200, merged in as from another machine."""
    (record,) = cache_io.read_cache(root / "generated" / "vector_add.tuning.pb").records
    record.device.key, record.device.name, record.device.compute_capability = "h200", "NVIDIA H200", "9.0"
    record.device.backend = "cuda"
    theirs = root.parent / "h200.tuning.pb"
    cache_io.write_cache(cache_io.sorted_cache([record]), theirs)
    assert doit(root, "merge-caches", str(theirs)).returncode == 0
    assert set(module(root)["TABLES"]) == {"h200", "interpreter"}


def test_another_devices_stale_table_is_never_dropped_unasked(project):
    with_h200_table(project)
    edit_key(project)
    shipped = (project / "generated" / "vector_add.py").read_bytes()

    proc = tune(project, check=False)
    assert proc.returncode != 0
    assert notes(proc) == [f"aot_tune: vector_add: the key changed from [n] to [n, m] (tuning.yaml:{KEY_LINE}): "
                           f"the tables of h200, interpreter are stale; doit tune retunes this machine's device "
                           f"(interpreter); retune the others there, or drop them with doit drop-device --kernel "
                           f"vector_add h200"]
    refusal = [line for line in proc.stdout.splitlines() if "made stale" in line]
    assert len(refusal) == 1 and "retune vector_add on h200" in refusal[0]
    assert "`doit drop-device --kernel vector_add h200`" in refusal[0] and "git checkout" not in refusal[0]
    assert (project / "generated" / "vector_add.py").read_bytes() == shipped  # both tables, as shipped
    # the interpreter's retune is kept in the cache; the H200's stale record stays until asked
    records = cache_io.read_cache(project / "generated" / "vector_add.tuning.pb").records
    assert sorted((r.device.key, tuple(r.key_names)) for r in records) == [("h200", ("n",)),
                                                                           ("interpreter", ("n", "m"))]

    again = tune(project, check=False)  # the same answer, and no bench reruns
    assert again.returncode != 0 and not any(n.startswith("bench:") for n in executed(again))
    assert [line for line in again.stdout.splitlines() if "made stale" in line] == refusal

    check = doit(project, "check")
    assert check.returncode == 1
    assert (f"stale: vector_add: the key changed from [n] to [n, m] (tuning.yaml:{KEY_LINE}): the tables of h200 "
            f"are stale; fix: retune vector_add on h200") in check.stdout
    assert "doit drop-device --kernel vector_add h200" in check.stdout

    dropped = doit(project, "drop-device", "--kernel", "vector_add", "h200")
    assert dropped.returncode == 0, dropped.stderr
    assert set(module(project)["TABLES"]) == {"interpreter"} and module(project)["KEY"] == ("n", "m")
    check = doit(project, "check")
    assert check.returncode == 0, check.stdout


def test_every_command_reads_a_stale_cache_and_says_the_same(project):
    """Before any retune: check, report, subset, merge-caches and drop-device all read the cache
    (none calls it corrupt) and name the same change."""
    edit(project, ", num_stages: [1]}", "}")
    what = f"param num_stages removed from the space (tuning.yaml:{SPACE_LINE}): the tables of interpreter are stale"
    outputs = {}
    for command in (["check"], ["report", "--output", "out"], ["subset", "vector_add"]):
        proc = doit(project, *command)
        outputs[command[0]] = proc
        assert "restore" not in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert outputs["check"].returncode == 1 and what in outputs["check"].stdout
    assert outputs["report"].returncode == 0 and what in (project / "out" / "summary.md").read_text()
    assert outputs["subset"].returncode != 0 and what in outputs["subset"].stderr
    assert "vector_add has no current tuned records" in outputs["subset"].stderr

    theirs = project.parent / "theirs.tuning.pb"
    shutil.copy(project / "generated" / "vector_add.tuning.pb", theirs)
    merged = doit(project, "merge-caches", str(theirs))
    assert merged.returncode == 0, merged.stderr
    assert "skipped stale records of vector_add on interpreter (param num_stages removed from the space)" \
        in merged.stdout
    dropped = doit(project, "drop-device", "interpreter")
    assert dropped.returncode == 0, dropped.stderr
    assert not cache_io.read_cache(project / "generated" / "vector_add.tuning.pb").records
