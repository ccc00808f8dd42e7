"""Messages stay one readable line whatever the user wrote: long values are shortened with a
marker, and errors about the manifest found after it loaded (a reference to a module that is
not there, an alias bomb) name its line as every other manifest error does."""
from __future__ import annotations

import dataclasses
import re

import pytest
from tunerun import alias_bomb

from aot_tune.errors import ManifestError, quoted, shorten
from aot_tune.fingerprint import measured_dependencies
from aot_tune.sources import SourceIndex
from aot_tune.manifest import load_manifest
from aot_tune.pipeline.plan import build_plan
from aot_tune.bench.runner import INTERPRETER_DEVICE

MANIFEST = """\
version: 1
kernels:
  vector_add:
    kernel: kernels.vector_add:add_kernel
    launch: kernels.vector_add:add
    inputs: kernels.vector_add:make_inputs
    key: [n]
    space: {BLOCK_SIZE: [256]}
    shapes: [{n: 4096}]
"""


def test_a_long_value_keeps_its_start_and_says_how_long_it_was():
    assert shorten("short") == "short" and quoted("short") == "'short'"
    shown = shorten("a" * 10_000_000)
    assert len(shown) < 130 and shown.startswith("aaaa") and shown.endswith("…(10,000,000 characters)")
    assert quoted("b" * 500).endswith("…(502 characters)")  # the quotes count


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the manifest as users name it: tuning.yaml


def manifest(tmp_path, text: str = MANIFEST):
    (tmp_path / "tuning.yaml").write_text(text)
    return load_manifest("tuning.yaml")


def test_a_10_mb_attribute_name_is_a_short_line_at_its_manifest_line(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "vector_add.py").write_text("def add_kernel():\n    pass\n")
    spec = manifest(tmp_path).kernels[0]
    spec = dataclasses.replace(spec, kernel="kernels.vector_add:" + "a" * 10_000_000)  # as the manifest reads it
    with pytest.raises(ManifestError) as info:
        measured_dependencies(SourceIndex(tmp_path), spec)
    message = str(info.value)
    assert "\n" not in message and len(message) < 500, len(message)
    assert message.startswith("tuning.yaml:4: kernels.vector_add.kernel: ") and "…(10,000,000 characters)" in message


def test_a_module_that_is_not_there_is_an_error_at_its_manifest_line(tmp_path):
    broken = manifest(tmp_path, MANIFEST.replace("inputs: kernels.vector_add:", "inputs: kernels.does_not_exist:"))
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "vector_add.py").write_text("def add_kernel():\n    pass\n\n\ndef add():\n    pass\n")
    with pytest.raises(ManifestError, match=r"^tuning.yaml:6: kernels.vector_add.inputs: cannot find module "
                                            r"'kernels.does_not_exist' under .*; fix: check the module path"):
        build_plan(broken, INTERPRETER_DEVICE, broken.kernels)


def test_an_alias_bomb_is_refused_at_the_line_where_it_goes_off(tmp_path):
    text = alias_bomb() + MANIFEST
    with pytest.raises(ManifestError) as info:
        manifest(tmp_path, text)
    line = int(re.match(r"tuning.yaml:(\d+): ", str(info.value)).group(1))
    assert text.splitlines()[line - 1].startswith("  f: &f [*e")  # about 9**6 values: the first over 200,000
    assert "expands to more than 200,000 values" in str(info.value)
    with pytest.raises(ManifestError, match=r"^tuning.yaml:2: .*expands to more than"):
        manifest(tmp_path, "x_anchors:\n  a: &a [1, *a]\n" + MANIFEST)  # a node that contains itself
