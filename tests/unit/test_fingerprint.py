"""Tests for aot_tune.sources.SourceIndex.closure: which source edits invalidate which kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from aot_tune.errors import TuneError
from aot_tune.sources import SourceIndex, digest

KERNELS = '''"""Two kernels in one file."""
import triton
import triton.language as tl

from .common import load_tile

SCALE = 2


@triton.jit
def helper(x):
    return x + 1


@triton.jit
def a_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = load_tile(x_ptr, offs, n)
    tl.store(x_ptr + offs, helper(x), mask=offs < n)


@triton.jit
def b_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * SCALE, mask=offs < n)
'''

COMMON = '''import triton
import triton.language as tl


@triton.jit
def load_tile(ptr, offs, n):
    return tl.load(ptr + offs, mask=offs < n)


@triton.jit
def unused(ptr):
    return ptr
'''


def write_package(root: Path, kernels: str = KERNELS, common: str = COMMON) -> None:
    package = root / "pkg"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "kernels.py").write_text(kernels)
    (package / "common.py").write_text(common)


def closures(root: Path, with_lines: bool = False) -> tuple[str, str]:
    index = SourceIndex(root)  # a fresh index: it caches parsed modules
    return (index.closure(["pkg.kernels:a_kernel"], with_lines=with_lines),
            index.closure(["pkg.kernels:b_kernel"], with_lines=with_lines))


@pytest.fixture
def base(tmp_path) -> tuple[str, str]:
    write_package(tmp_path)
    return closures(tmp_path)


def test_closure_is_stable(tmp_path, base) -> None:
    assert closures(tmp_path) == base
    assert base[0] != base[1]


def test_helper_edit_changes_a_only(tmp_path, base) -> None:
    write_package(tmp_path, KERNELS.replace("return x + 1", "return x + 2"))
    a, b = closures(tmp_path)
    assert a != base[0]
    assert b == base[1]


def test_imported_function_edit_changes_a_only(tmp_path, base) -> None:
    write_package(tmp_path, common=COMMON.replace("mask=offs < n)", "mask=offs < n, other=0)"))
    a, b = closures(tmp_path)
    assert a != base[0]
    assert b == base[1]


def test_unused_function_in_the_imported_module_changes_nothing(tmp_path, base) -> None:
    write_package(tmp_path, common=COMMON.replace("return ptr", "return ptr + 1"))
    assert closures(tmp_path) == base


def test_b_kernel_edit_does_not_change_a(tmp_path, base) -> None:
    write_package(tmp_path, KERNELS.replace("x * SCALE", "x * SCALE + 0"))
    a, b = closures(tmp_path)
    assert a == base[0]
    assert b != base[1]


def test_constant_edit_changes_b_only(tmp_path, base) -> None:
    write_package(tmp_path, KERNELS.replace("SCALE = 2", "SCALE = 3"))
    a, b = closures(tmp_path)
    assert a == base[0]
    assert b != base[1]


def test_decorator_edit_changes_the_closure(tmp_path, base) -> None:
    edited = KERNELS.replace("@triton.jit\ndef a_kernel", "@triton.jit(do_not_specialize=['n'])\ndef a_kernel")
    assert edited != KERNELS
    write_package(tmp_path, edited)
    a, b = closures(tmp_path)
    assert a != base[0]
    assert b == base[1]


def test_line_numbers_only_count_with_lines(tmp_path) -> None:
    write_package(tmp_path)
    plain, lined = closures(tmp_path)[0], closures(tmp_path, with_lines=True)[0]
    assert plain != lined
    moved = KERNELS.replace("\n\n@triton.jit\ndef a_kernel", "\n\n\n@triton.jit\ndef a_kernel")
    assert moved != KERNELS
    write_package(tmp_path, moved)
    assert closures(tmp_path)[0] == plain
    assert closures(tmp_path, with_lines=True)[0] != lined
    # b_kernel moved down too: its line-aware closure changes, its plain one does not
    write_package(tmp_path)
    b_plain, b_lined = closures(tmp_path)[1], closures(tmp_path, with_lines=True)[1]
    write_package(tmp_path, moved)
    assert closures(tmp_path)[1] == b_plain
    assert closures(tmp_path, with_lines=True)[1] != b_lined


def test_several_refs_combine(tmp_path, base) -> None:
    index = SourceIndex(tmp_path)
    both = index.closure(["pkg.kernels:a_kernel", "pkg.kernels:b_kernel"])
    assert both not in base
    assert index.closure(["pkg.kernels:b_kernel", "pkg.kernels:a_kernel"]) == both


def test_missing_module_raises(tmp_path) -> None:
    write_package(tmp_path)
    with pytest.raises(TuneError) as info:
        SourceIndex(tmp_path).closure(["pkg.nope:a_kernel"])
    assert "pkg.nope" in str(info.value)
    assert "fix:" in str(info.value)


def test_missing_module_raises_for_any_ref(tmp_path) -> None:
    write_package(tmp_path)
    with pytest.raises(TuneError):
        SourceIndex(tmp_path).closure(["pkg.nope:a_kernel", "pkg.kernels:b_kernel"])


def test_digest_is_short_stable_and_order_sensitive() -> None:
    assert digest("a", 1, {"y": 2, "x": 1}) == digest("a", 1, {"x": 1, "y": 2})
    assert len(digest("a")) == 20
    assert digest("a", "b") != digest("b", "a")


def test_imports_are_followed_only_inside_the_project(tmp_path) -> None:
    """The standard library and aot_tune's runtime are the toolchain's business, not the kernel's:
    following them would make a Python upgrade or a runtime edit retune every kernel."""
    write_package(tmp_path, KERNELS.replace("SCALE = 2", "from typing import Any\n"
                                            "from aot_tune.runtime import TunedTable\n\nSCALE = 2")
                  .replace("def a_kernel(", "def a_kernel(q: Any = TunedTable, *, "))
    index = SourceIndex(tmp_path)
    index.closure(["pkg.kernels:a_kernel"])
    followed = {name for name, module in index._modules.items() if module is not None}
    assert followed == {"pkg.kernels", "pkg.common"}
