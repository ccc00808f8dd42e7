"""The static estimate of a kernel library's import (aot_tune.build.imports): which modules the
walk follows, and what it counts in them. A scratch package, read and never imported."""
from __future__ import annotations

import py_compile
import sys
import textwrap
from importlib.util import cache_from_source
from pathlib import Path

import pytest

from aot_tune.build import imports
from aot_tune.build.imports import ImportCost, import_cost

KERNEL_1 = '''\
@triton.jit
def k1(x_ptr, n, BLOCK: tl.constexpr):
    """A kernel."""
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2, mask=offs < n)
'''
KERNEL_2 = '''\
@triton.autotune(configs=[triton.Config({"B": 16})],
                 key=["n"])
@triton.jit
def k2(x_ptr,
       n):
    tl.store(x_ptr, n)
'''
TILES = '''\
import triton
import triton.language as tl


@triton.jit
def helper(x):
    # a comment
    return x * 2


@triton.jit
def unused(x):
    return x + 1


def plain(x):
    return x


@triton.heuristics({"EVEN": lambda args: args["n"] % 2 == 0})
@triton.jit(do_not_specialize=["n"])
def tile(x_ptr, n, EVEN: tl.constexpr):
    """Its docstring is no code."""

    x = tl.load(x_ptr)
    tl.store(x_ptr, helper(x) + plain(n))
'''
MODULES = {
    "lib/__init__.py": '"""A library.\n\nimport lib.fromdoc   (a docstring, not an import)\n"""\nfrom . import kernels\nimport json\n',
    "lib/kernels.py": "import triton\nimport triton.language as tl\nimport torch\n"
                      "from .helpers import (\n    scale,\n    shift,\n)\nfrom lib import extra\n\n\n"
                      "def lazy():\n    import lib.never\n    return lib.never\n\n\n"
                      + KERNEL_1 + "\n\n" + KERNEL_2 + "\n\n"
                      "class Holder:\n    import lib.inclass\n\n\nfast = torch.compile(lazy)\n"
                      "from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    import lib.typed\n    from lib import typed2\nelse:\n    import lib.atrun\n",
    "lib/helpers.py": "scale = shift = 1\n",
    "lib/extra.py": "X = 1\n",
    "lib/inclass.py": "Y = 2\n",
    "lib/never.py": "import lib.nevernever\n",
    "lib/nevernever.py": "Z = 3\n",
    "lib/fromdoc.py": "W = 4\n",
    "lib/typed.py": "T = 5\n",
    "lib/typed2.py": "T = 6\n",
    "lib/atrun.py": "R = 7\n",
    "lib/tiles.py": TILES,
}


@pytest.fixture
def library(tmp_path) -> Path:
    for name, text in MODULES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def size(root: Path, *names: str) -> int:
    return sum(len((root / name).read_bytes()) for name in names)


def test_the_walk_follows_imports_outside_functions_and_counts_jitted_functions(library):
    cost = import_cost(library, ["lib.kernels"], path=[])
    walked = ("lib/__init__.py", "lib/kernels.py", "lib/helpers.py", "lib/extra.py", "lib/inclass.py", "lib/atrun.py")
    # not never.py (imported in a function), fromdoc.py (named in a docstring), nor typed.py and
    # typed2.py (for type checkers only: never run)
    assert cost.modules == 6
    assert cost.source_bytes == size(library, *walked) and cost.cached_bytes == 0
    assert cost.jit_functions == 2
    # from each @triton.jit to the end of its body (and the blank lines after it)
    jitted = len(KERNEL_1) + len(KERNEL_2[KERNEL_2.index("@triton.jit"):])
    assert jitted <= cost.jit_bytes <= jitted + 4
    assert cost.torch_compile and cost.toolchain  # torch is named, not walked: workers hold it
    assert "lib.kernels" not in sys.modules  # read, never imported
    assert cost.seconds() == pytest.approx(
        cost.source_bytes / 1e6 * imports.SOURCE_S_PER_MB + 2 * imports.JIT_S + cost.jit_bytes / 1e6 * imports.JIT_S_PER_MB
        + imports.TORCH_COMPILE_S + 6 * imports.MODULE_S)


def test_a_fresh_bytecode_cache_is_counted_as_cheaper_bytes(library):
    helper = library / "lib" / "helpers.py"
    py_compile.compile(str(helper), cfile=cache_from_source(str(helper)))
    cost = import_cost(library, ["lib.helpers"], path=[])
    assert cost.cached_bytes == size(library, "lib/helpers.py")
    assert cost.source_bytes == size(library, "lib/__init__.py", "lib/kernels.py", "lib/extra.py", "lib/inclass.py",
                                     "lib/atrun.py")


def test_what_cannot_be_found_counts_nothing(library):
    assert import_cost(library, ["nowhere.at_all", "json", "torch.nn"], path=[]) == ImportCost(toolchain=True)


def test_namespace_packages_are_walked_without_importing_them(tmp_path):
    """A namespace package inside another (no __init__.py in either, as some of fla-core's
    dependencies ship): importlib's dotted lookup would read the parent from sys.modules and fail
    the whole forecast; each part is found in its parent's folders instead, in every folder that
    holds it."""
    for where, text in (("a/outer/inner/mod.py", "from outer.inner import other\nx = 1\n"),
                        ("b/outer/inner/other.py", "y = 2\n")):
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / where).write_text(text)
    cost = import_cost(tmp_path / "a", ["outer.inner.mod"], path=[str(tmp_path / "b")])
    assert cost.modules == 2 and "outer" not in sys.modules
    assert cost.source_bytes == len("from outer.inner import other\nx = 1\n") + len("y = 2\n")


def test_the_estimate_of_a_kernel_module_of_this_repository_is_small():
    """kernels/rmsnorm.py: one jitted function, a few KB: milliseconds, where fla-core's l2norm
    reaches hundreds of jitted functions and a torch.compile."""
    root = Path(__file__).resolve().parents[2]
    cost = import_cost(root, ["kernels.rmsnorm"])
    assert cost.jit_functions >= 1 and not cost.torch_compile and cost.seconds() < 0.05


def test_a_kernels_code_is_its_jitted_function_and_the_jitted_functions_it_calls(library):
    code = {"helper": "def helper(x):\n    return x * 2",
            "tile": "def tile(x_ptr, n, EVEN: tl.constexpr):\n    x = tl.load(x_ptr)\n"
                    "    tl.store(x_ptr, helper(x) + plain(n))"}
    assert imports.kernel_bytes(library, "lib.tiles:tile", path=[]) == len(code["tile"]) + len(code["helper"])
    assert imports.kernel_bytes(library, "lib.tiles:helper", path=[]) == len(code["helper"])
    assert imports.kernel_bytes(library, "lib.tiles:plain", path=[]) == 0  # not jitted
    assert imports.kernel_bytes(library, "lib.nowhere:tile", path=[]) == 0
    root = Path(__file__).resolve().parents[2]
    sizes = [imports.kernel_bytes(root, f"kernels.{ref}") for ref in ("vector_add:add_kernel", "gemm:matmul_kernel")]
    assert 0 < sizes[0] < sizes[1]  # a GEMM lowers more than an add
