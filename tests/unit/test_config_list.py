"""``configs:``: an explicit list of configs instead of a ``space`` grid, inline or ``module:attr``."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aot_tune.errors import ManifestError
from aot_tune.manifest import load_manifest
from aot_tune.space import Config

REPO = Path(__file__).resolve().parents[2]

KERNEL_MODULE = '''\
import triton
import triton.language as tl

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (64, 128) for w in (2, 4)]


@triton.jit
def row_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


def launch(x):
    return x


def make_inputs(shape, dtype, device):
    return ()
'''

ENTRY = """\
version: 1
kernels:
  rows:
    kernel: rowlib.ops:row_kernel
    launch: rowlib.ops:launch
    inputs: rowlib.ops:make_inputs
    key: [n]
{configs}    shapes:
      - {{n: 100}}
      - {{n: 1000}}
"""


def project(tmp_path: Path, configs: str, module: str = KERNEL_MODULE) -> Path:
    """A project whose package has a name of its own (lists are imported in this process)."""
    package = "rowlib_" + re.sub(r"\W", "_", f"{tmp_path.parent.name}_{tmp_path.name}")
    (tmp_path / package).mkdir(parents=True)
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "ops.py").write_text(module)
    (tmp_path / "tuning.yaml").write_text(ENTRY.format(configs=configs).replace("rowlib.", f"{package}."))
    return tmp_path / "tuning.yaml"


INLINE = """\
    configs:
      - {BLOCK: 64, num_warps: 2, num_stages: 3}
      - {BLOCK: 64, num_warps: 4, num_stages: 3}
      - {BLOCK: 128, num_warps: 2, num_stages: 3}
      - {BLOCK: 128, num_warps: 4, num_stages: 3}
"""


def test_a_decorators_list_is_the_space_with_the_ids_of_the_same_inline_list(tmp_path):
    listed = load_manifest(project(tmp_path / "a", "    configs: rowlib.ops:CONFIGS\n")).kernels[0]
    inline = load_manifest(project(tmp_path / "b", INLINE)).kernels[0]
    assert [c.as_dict() for c in listed.space.configs()] == [
        {"BLOCK": b, "num_warps": w, "num_stages": 3} for b in (64, 128) for w in (2, 4)]
    assert [c.id for c in listed.space.configs()] == [c.id for c in inline.space.configs()]
    assert listed.space.configs()[0].id == Config.from_dict({"BLOCK": 64, "num_stages": 3, "num_warps": 2}).id
    assert dict(listed.space.params) == {"BLOCK": (64, 128), "num_warps": (2, 4), "num_stages": (3,)}
    assert listed.space.canonical() == inline.space.canonical()


def test_a_module_list_is_imported_once_per_change_of_its_source(tmp_path):
    manifest = project(tmp_path, "    configs: rowlib.ops:CONFIGS\n")
    probe = ("import sys; from aot_tune.manifest import load_manifest; "
             f"spec = load_manifest({str(manifest)!r}).kernels[0]; "
             "print(len(spec.space.configs()), 'triton' in sys.modules)")

    def load() -> str:
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                              cwd=REPO).stdout.split()

    assert load() == ["4", "True"]  # first load: imported, expanded, kept
    kept = [json.loads(p.read_text()) for p in (tmp_path / ".aot_tune" / "configs").glob("rowlib_*.ops.CONFIGS.json")]
    assert len(kept) == 1 and kept[0]["ref"].endswith(".ops:CONFIGS") and len(kept[0]["configs"]) == 4
    assert load() == ["4", "False"]  # unchanged source: read back, nothing imported
    ops = next(tmp_path.glob("rowlib_*/ops.py"))
    ops.write_text(ops.read_text().replace("(64, 128)", "(64, 128, 256)"))
    assert load() == ["6", "True"]


def test_constraints_filter_a_list_per_shape(tmp_path):
    spec = load_manifest(project(tmp_path, INLINE + '    constraints: ["BLOCK <= max(64, n // 4)"]\n')).kernels[0]
    assert len(spec.space.configs_for({"n": 100})) == 2
    assert len(spec.space.configs_for({"n": 1000})) == 4


@pytest.mark.parametrize("configs, module, needles", [
    pytest.param("    configs: rowlib.ops:CONFIGS\n",
                 KERNEL_MODULE.replace("num_warps=w)", "num_warps=w, pre_hook=print)"),
                 ["tuning.yaml:", "kernels.rows.configs[0]", "pre_hook", "fix: drop the pre_hook"], id="pre_hook"),
    pytest.param("    configs: rowlib.ops:NOPE\n", KERNEL_MODULE, ["kernels.rows.configs", "no top-level 'NOPE'"],
                 id="missing_attr"),
    pytest.param("    configs: rowlib.ops:launch\n", KERNEL_MODULE, ["not a list of configs"], id="not_a_list"),
    pytest.param(INLINE.replace("{BLOCK: 128, num_warps: 4, num_stages: 3}", "{BLOCK: 128, num_warps: 4}"),
                 KERNEL_MODULE, ["kernels.rows.configs[3]", "differ from the first config's"], id="other_params"),
    pytest.param(INLINE.replace("{BLOCK: 128, num_warps: 4, num_stages: 3}", "{BLOCK: 64, num_warps: 2, "
                                "num_stages: 3}"), KERNEL_MODULE, ["configs[3]", "duplicate of config [0]"],
                 id="duplicate"),
    pytest.param(INLINE.replace("num_warps: 2,", "num_warps: 3,", 1), KERNEL_MODULE,
                 ["configs[0].num_warps", "a power of two"], id="bad_launch_option"),
    pytest.param("    configs: [64, 128]\n", KERNEL_MODULE, ["configs[0]", "expected a mapping"], id="not_mappings"),
    pytest.param(INLINE + "    space: {BLOCK: [64]}\n", KERNEL_MODULE, ["both 'space' and 'configs'"], id="both"),
    pytest.param("", KERNEL_MODULE, ["kernels.rows.space: ", "missing required key 'space' (or 'configs')", "add space: (or configs:)"], id="neither"),
    pytest.param(INLINE + '    constraints: ["BLOCK > 1000"]\n', KERNEL_MODULE,
                 ["kernels.rows.constraints", "reject"], id="all_rejected"),
])
def test_a_bad_list_is_one_line(tmp_path, configs, module, needles):
    with pytest.raises(ManifestError) as err:
        load_manifest(project(tmp_path, configs, module))
    text = str(err.value)
    assert "\n" not in text and all(n in text for n in needles), text
