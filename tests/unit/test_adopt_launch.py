"""``doit adopt``'s launch function for a kernel outside the project: the library's wrapper copied
through ``aot_tune.untuned`` where the copy provably means what the wrapper does (run here under
the interpreter against the wrapper itself), and a reason instead of a copy everywhere else."""
from __future__ import annotations

import re
import sys
import uuid

import pytest
import torch

from aot_tune.adopt import PLACEHOLDER, adopt, write_adoption
from aot_tune.adopt.launch import LaunchFunction, launch_function
from aot_tune.errors import TuneError

LIBRARY = '''\
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

EPS = 0.5
CONFIGS = [triton.Config({"BLOCK": 16}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2)]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.heuristics({"HAS_EPS": lambda args: args["eps"] != 0.0})
@triton.jit
def _shift_kernel(x_ptr, out_ptr, n, eps, BLOCK: tl.constexpr, HAS_EPS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if HAS_EPS:
        x = x + eps
    tl.store(out_ptr + offs, x, mask=offs < n)


def _grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


@functools.lru_cache  # a decorator the copy must not carry
def _unused():
    return None


def shift(x: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """The library's wrapper: out = x + eps."""
    out = torch.empty_like(x)
    n = x.numel()
    _shift_kernel[_grid(n)](x, out, n, eps)  # a comment the copy loses
    return out


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def _peeked_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


def peek(x):
    _peeked_kernel[(1,)](x, x.numel())
    return _peeked_kernel.best_config


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def _relative_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


def relative(x):
    from . import helpers
    _relative_kernel[(1,)](x, helpers.size(x))


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def _lonely_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def _undefined_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


def undefined(x):
    _undefined_kernel[(1,)](x, SIZE)
'''


def cpu_benchmarker(kernel_call, quantiles):
    """Stands in for Triton's benchmarker, which needs a GPU driver: one call, a made-up time."""
    kernel_call()
    return [1.0] * len(quantiles)


@pytest.fixture
def library(tmp_path, monkeypatch):
    """The library as an importable module outside the project folder (``tmp_path / 'project'``)."""
    name = f"adopt_launch_lib_{uuid.uuid4().hex[:8]}"
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / f"{name}.py").write_text(LIBRARY)
    (tmp_path / "project").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    __import__(name)
    yield sys.modules[name]
    sys.modules.pop(name, None)


def test_the_wrapper_is_copied_through_untuned_and_launches_the_config_it_is_given(library):
    found = launch_function(library, "_shift_kernel", "_shift_kernel")
    assert isinstance(found, LaunchFunction), found
    assert (found.ref, found.wrapper, found.arguments) == ("tuning_launch:launch_shift_kernel",
                                                           f"{library.__name__}:shift", ("x", "eps"))
    assert "import triton\n" not in found.source and "import torch\n" in found.source  # what the body reads
    assert f"from {library.__name__} import EPS, _grid, _shift_kernel\n" in found.source
    assert "def launch_shift_kernel(x, eps=EPS, *, config):" in found.source
    assert "lru_cache" not in found.source and "Tensor" not in found.source  # no decorator, no annotations
    assert "aot_tune.untuned(_shift_kernel)[_grid(n)](x, out, n, eps, **config)" in found.source
    library._shift_kernel.do_bench = cpu_benchmarker  # the library's own call, which autotunes, on the CPU
    namespace: dict = {}
    exec(compile(found.source, "tuning_launch.py", "exec"), namespace)
    launch = namespace["launch_shift_kernel"]
    x = torch.arange(100, dtype=torch.float32)
    for config in ({"BLOCK": 16, "num_warps": 1}, {"BLOCK": 64, "num_warps": 2, "num_stages": 3}):
        torch.testing.assert_close(launch(x, 0.25, config=config), library.shift(x, 0.25))
        torch.testing.assert_close(launch(x, config=config), x + 0.5)


@pytest.mark.parametrize("kernel, reason", [
    ("_peeked_kernel", r":peek uses _peeked_kernel otherwise than as _peeked_kernel\[grid\]\(\.\.\.\) \(line \d+\)"),
    ("_relative_kernel", r":relative imports relatively \(line \d+\)"),
    ("_lonely_kernel", r"no top-level function of adopt_launch_lib_\w+ launches it as _lonely_kernel\[grid\]"),
    ("_undefined_kernel", r":undefined uses SIZE, not a global of adopt_launch_lib_\w+"),
])
def test_a_wrapper_whose_copy_could_mean_something_else_is_not_copied(library, kernel, reason):
    found = launch_function(library, kernel, kernel)
    assert isinstance(found, str) and re.search(reason, found), found
    adoption = adopt(f"{library.__name__}:{kernel}", library.__file__.rsplit("/", 2)[0] + "/project")
    assert adoption.launch is None
    assert f"    launch: {PLACEHOLDER}  # module:function(*inputs, config)" in adoption.entry
    assert f"Write one in your project that takes config and launches\n    # aot_tune.untuned({library.__name__}." \
           f"{kernel})[grid](..., **config)" in adoption.entry


def test_the_projects_own_kernel_keeps_its_placeholder_and_writing_twice_is_refused(library, tmp_path):
    own = adopt(f"{library.__name__}:_shift_kernel", tmp_path)  # the library is under this folder
    assert own.launch is None and f"    launch: {PLACEHOLDER}  # module:function(*inputs) -> output" in own.entry
    project = tmp_path / "project"
    adoption = adopt(f"{library.__name__}:_shift_kernel", project)
    assert f"    launch: tuning_launch:launch_shift_kernel  # {library.__name__}:shift through aot_tune.untuned\n" \
           in adoption.entry and "(x, eps), launch_shift_kernel's arguments" in adoption.entry
    assert "    #   def launch_shift_kernel(x, eps=EPS, *, config):\n" in adoption.printed()
    (project / "tuning_launch.py").write_text("import torch\n\nHELPER = 1\n")
    assert write_adoption(project / "tuning.yaml", adoption) == project / "tuning_launch.py"
    written = (project / "tuning_launch.py").read_text()
    assert written.startswith("import torch\n\nHELPER = 1\n\n\n# launch_shift_kernel")
    assert written.count("import torch") == 1
    assert "tuning_launch:launch_shift_kernel" in (project / "tuning.yaml").read_text()
    with pytest.raises(TuneError, match="tuning_launch.py: launch_shift_kernel exists already; fix:"):
        write_adoption(project / "other.yaml", adoption)
    assert not (project / "other.yaml").exists()  # nothing written where either would clash
    compile(written, "tuning_launch.py", "exec")  # the module the tuner imports parses
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "tuning_launch.py").write_text("def half(:\n")
    with pytest.raises(TuneError, match=r"tuning_launch.py:1: does not parse .*; fix: correct it"):
        write_adoption(tmp_path / "broken" / "tuning.yaml", adoption)
