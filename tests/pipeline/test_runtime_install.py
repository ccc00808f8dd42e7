"""A library that ships aot_tune tables, installed as its users install it: in a fresh virtual
environment holding the library's wheel, the aot-tune wheel (the runtime, no extra), torch and
triton, and nothing of the pipeline; its kernel launches its shipped table's config under the
Triton interpreter, with the newest triton (this environment's) and with the oldest the runtime
claims (3.0, from PyPI).

The rule for what is installed, so that the check is honest about who pulled what:

* the library's and aot-tune's wheels are installed by pip with their declared requirements,
  offline (``--no-index``, only the two wheels to pick from): a requirement of aot-tune's on
  pyyaml, say, fails the install instead of being fetched;
* torch is the library's requirement, not aot-tune's, and its metadata requires jinja2 (and
  sympy, networkx, ...) that it does not import: it is lent from this environment as its import
  packages alone (symlinks, no metadata), with typing_extensions, which importing it needs; the
  newest triton and numpy (its interpreter's) are lent the same way; the oldest triton is
  installed from PyPI with its own requirements, and what it imports without declaring it:
  numpy<2 (its interpreter) and setuptools (its backends);
* then neither doit, jinja2, protobuf nor pyyaml may be installed (``importlib.metadata``) or
  importable in the environment, and none may be imported by the launch.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import urllib.request
from importlib import metadata
from pathlib import Path

import pytest
from test_stranger_project import PACKAGE, run
from tunerun import REPO

#: The tune extra's distributions and the modules they provide.
PIPELINE = {"doit": "doit", "jinja2": "jinja2", "protobuf": "google.protobuf", "pyyaml": "yaml"}
OLDEST_TRITON = "3.0.0"

#: Runs in the environment: the pipeline is absent, the shipped table answers the launch.
PROBE = textwrap.dedent(f"""\
    import json, sys, warnings
    from importlib import metadata, util

    def importable(name):
        try:
            return util.find_spec(name) is not None
        except ImportError:
            return False

    pipeline = {PIPELINE!r}
    installed = sorted(d.metadata["Name"].lower() for d in metadata.distributions())
    present = [m for m in pipeline.values() if importable(m)]
    import torch, triton
    from aot_tune.runtime import TuningWarning
    from {PACKAGE}.rms import _rms_scale_kernel, rms_scale
    from {PACKAGE}.tuned._rms_scale_kernel import TABLES
    x, w = torch.randn(4, 200, dtype=torch.float16), torch.rand(200, dtype=torch.float16) + 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error", TuningWarning)  # the shipped table answers: no fallback
        y = rms_scale(x, w)
    expected = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    print(json.dumps({{"installed": installed, "importable": present, "triton": triton.__version__,
                      "imported": sorted(m for m in pipeline.values() if m in sys.modules),
                      "used": _rms_scale_kernel.best_config.all_kwargs(),
                      "tuned": TABLES["interpreter"][(200, "float16")],
                      "error": (y.float() - expected).abs().max().item()}}))
    """)


@pytest.fixture(scope="module")
def wheels(tuned_library, tmp_path_factory) -> Path:
    """The library, tuned on the interpreter with its tables in the package, and aot-tune, as wheels."""
    tmp = tmp_path_factory.mktemp("wheels")
    root = Path(shutil.copytree(tuned_library.root, tmp / "lib"))  # the build leaves build/ behind
    source = tmp / "aot-tune"  # built from a copy: the build leaves build/ and *.egg-info behind
    ignore = shutil.ignore_patterns("__pycache__")
    for part in ("aot_tune", "rules"):
        shutil.copytree(REPO / part, source / part, ignore=ignore)
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / part, source / part)
    out = tmp / "dist"
    for project in (root, source):
        run(tmp, sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
            str(project))
    return out


def lend(site: Path, into: Path, *distributions: str) -> None:
    """This environment's distributions as import packages alone: symlinks, and a .pth naming them."""
    into.mkdir(exist_ok=True)
    for name in distributions:
        dist = metadata.distribution(name)
        tops = {f.parts[0] for f in dist.files if f.parts[0] not in ("..", "__pycache__")
                and not f.parts[0].endswith((".dist-info", ".pth"))}
        for top in tops:
            (into / top).symlink_to(Path(dist.locate_file(top)))
    (site / "lent.pth").write_text(f"{into}\n")


def environment(tmp: Path, wheels: Path, lent: tuple[str, ...]) -> tuple[Path, dict[str, str]]:
    """A fresh environment with the library installed from its wheel, resolving offline, and
    ``lent`` distributions; its python, and an environment without this checkout's paths."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(tmp),
           "PYTHONNOUSERSITE": "1", "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp / "triton-cache")}
    pip(tmp, python, "--isolated", "--no-index", "--find-links", str(wheels), PACKAGE)
    lend(site, tmp / "lent", *lent)
    return python, env


def pip(cwd: Path, python: Path, *args: str) -> None:
    """This pip installing into ``python``'s environment, with no PYTHONPATH: pip would take a
    checkout's aot_tune.egg-info on it for an installed aot-tune."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run(cwd, sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args, env=env)


def launched(python: Path, env: dict[str, str], cwd: Path) -> dict:
    proc = run(cwd, str(python), "-c", PROBE, env=env)
    return json.loads(proc.stdout.splitlines()[-1])


def check_runtime_alone(found: dict, triton: str) -> None:
    assert found["triton"] == triton
    assert not set(PIPELINE) & set(found["installed"]), found["installed"]
    assert found["importable"] == [] and found["imported"] == [], found
    assert {k: v for k, v in found["used"].items() if k in found["tuned"]} == found["tuned"]
    assert found["error"] < 0.05, found


def test_the_runtime_alone_launches_a_shipped_table_with_the_newest_triton(wheels, tmp_path):
    python, env = environment(tmp_path, wheels, ("torch", "typing_extensions", "triton", "numpy"))
    found = launched(python, env, tmp_path)
    check_runtime_alone(found, metadata.version("triton"))
    assert set(found["installed"]) == {"aot-tune", PACKAGE}, found["installed"]
    for command in ([str(python.parent / "aot_tune"), "tune"], [str(python), "-m", "aot_tune", "check"]):
        proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
        line, = proc.stderr.splitlines()
        assert "needs aot_tune's tuning pipeline" in line and line.endswith("fix: pip install 'aot-tune[tune]'")


def pypi_unreachable() -> str | None:
    """Why PyPI cannot be reached from here, or None when it can."""
    try:
        urllib.request.urlopen("https://pypi.org/simple/triton/", timeout=15).close()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def test_the_runtime_alone_launches_a_shipped_table_with_the_oldest_triton_it_claims(wheels, tmp_path):
    """Downloads triton 3.0.0 (about 210 MB) from PyPI, where pip's cache does not hold it."""
    unreachable = pypi_unreachable()
    if unreachable:
        pytest.skip(f"PyPI is unreachable ({unreachable}), so triton {OLDEST_TRITON}, the oldest the runtime "
                    f"claims, cannot be installed to launch under it")
    python, env = environment(tmp_path, wheels, ("torch", "typing_extensions"))
    # numpy<2 for its interpreter, setuptools which its backends import: triton 3.0 declares neither
    pip(tmp_path, python, "--retries", "2", f"triton=={OLDEST_TRITON}", "numpy<2", "setuptools")
    found = launched(python, env, tmp_path)
    check_runtime_alone(found, OLDEST_TRITON)
    assert {"aot-tune", PACKAGE, "triton", "numpy", "setuptools"} <= set(found["installed"]), found["installed"]
