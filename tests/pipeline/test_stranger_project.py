"""docs/adopting.md end to end, as a stranger does it: a kernel library of someone else's, in a
folder outside this checkout with no [tool.doit] settings, migrated with ``doit adopt``, tuned
with its tables inside the package, built into a wheel and installed the way a user installs it,
then launched from another folder with only the installed wheel and aot_tune on the path."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from test_adopt import INPUTS_BUILDER, KERNEL_FILE, fill, migrate
from tunerun import doit_command, executed, subprocess_env

PACKAGE = "strangerlib"

PYPROJECT = f"""\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{PACKAGE}"
version = "1.0"
dependencies = ["aot-tune"]  # the runtime: what docs/adopting.md says a library declares

[tool.setuptools]
packages = ["{PACKAGE}", "{PACKAGE}.tuned"]
"""

#: Where the tables go so that the wheel carries them, and the decorator that reads them there.
DEFAULTS = f"""\
defaults:
  generated: "{PACKAGE}/tuned/{{kernel}}.py"
  cache: "tuning/{{kernel}}.tuning.pb"
"""


def run(cwd: Path, *args: str, env=None) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, env=env or subprocess_env(cwd), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def library(root: Path) -> Path:
    """The library's checkout: its package, an inputs builder beside it, and no tuning settings."""
    (root / PACKAGE / "tuned").mkdir(parents=True)
    (root / PACKAGE / "__init__.py").write_text("")
    (root / PACKAGE / "tuned" / "__init__.py").write_text("")
    kernel = migrate(KERNEL_FILE).replace('key=["n_cols"])', f'key=["n_cols"], module="{PACKAGE}.tuned._rms_scale_kernel")')
    (root / PACKAGE / "rms.py").write_text(kernel)
    (root / "tuning_inputs.py").write_text(INPUTS_BUILDER)
    (root / "pyproject.toml").write_text(PYPROJECT)
    return root


def adopted(root: Path) -> Path:
    """The library with its tuning.yaml: ``doit adopt``'s entry, the tables in the package, filled in."""
    library(root)
    run(root, *doit_command(), "adopt", "--write", f"{PACKAGE}.rms:_rms_scale_kernel")
    entry = (root / "tuning.yaml").read_text()
    (root / "tuning.yaml").write_text(entry.replace("kernels:\n", DEFAULTS + "kernels:\n", 1))
    (root / "tuning.yaml").write_text(fill((root / "tuning.yaml").read_text(), PACKAGE))
    return root


def test_a_library_adopts_tunes_ships_its_tables_in_a_wheel_and_launches_them_installed(tuned_library, tmp_path):
    """The library adopted, listed and tuned (the tuned_library fixture), then checked, reported,
    installed and launched from a copy of it."""
    root = Path(shutil.copytree(tuned_library.root, tmp_path / "lib"))
    doit = doit_command()

    listed = tuned_library.listed  # before the tune, with no dodo.py and no settings: the manifest's stages
    assert "bench " in listed.stdout and "generate " in listed.stdout, listed.stdout
    table = root / PACKAGE / "tuned" / "_rms_scale_kernel.py"
    assert table.is_file()
    again = run(root, *doit, "tune", "-n", "2", "--bench-backend", "interpreter")
    assert executed(again) == [] and "nothing to do" in again.stdout + again.stderr
    assert "in sync" in run(root, *doit, "check").stdout
    run(root, *doit, "report", "-o", "report")
    assert (root / "report" / "summary.md").is_file()
    assert not list(root.glob(".doit*")), "doit's state belongs under .aot_tune/"

    site = tmp_path / "site"  # pip builds the wheel and installs it, as a user's pip would
    run(tmp_path, sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
        "--target", str(site), str(root))
    assert (site / PACKAGE / "tuned" / "_rms_scale_kernel.py").is_file()

    user = tmp_path / "user"
    user.mkdir()
    probe = textwrap.dedent(f"""\
        import json, warnings
        import torch
        import {PACKAGE}
        from aot_tune.runtime import current_device_key
        from {PACKAGE}.rms import _rms_scale_kernel, rms_scale
        from {PACKAGE}.tuned._rms_scale_kernel import TABLES
        x, w = torch.randn(4, 200), torch.rand(200) + 0.5
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the shipped table answers: no fallback, no warning
            rms_scale(x.half(), w.half())
        print(json.dumps([{PACKAGE}.__file__, _rms_scale_kernel.best_config.all_kwargs(),
                          TABLES[current_device_key()][(200, "float16")]]))
        """)
    env = {**subprocess_env(site), "TRITON_INTERPRET": "1"}
    env["PYTHONPATH"] = env["PYTHONPATH"].replace(str(root), "")  # only the installed copy
    launched = run(user, sys.executable, "-c", probe, env=env)
    where, used, tuned = json.loads(launched.stdout.splitlines()[-1])
    assert Path(where).is_relative_to(site)
    assert {k: v for k, v in used.items() if k in tuned} == tuned


def test_doit_list_stays_doits_own_in_a_dodo_project(tmp_path):
    (tmp_path / "dodo.py").write_text("def task_hello():\n    return {'actions': ['echo hi']}\n")
    listed = run(tmp_path, *doit_command(), "list")
    assert listed.stdout.split() == ["hello"]
