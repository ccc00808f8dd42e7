"""A kernel's Triton source as data (aot_tune.triton_compat.kernel_source): captured where its
library is imported, rebuilt elsewhere with Triton alone from the installed files, to the same
cache key; refused, with the reason, for what data cannot express; and refused once the files
change. Compiled Triton (not the interpreter), in fresh processes: the cache key is the proof."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HELPERS = '''
import triton
import triton.language as tl

SCALE = tl.constexpr(3)


@triton.jit
def scaled(x):
    return x * SCALE
'''

OPS = '''
import triton
import triton.language as tl
from kslib.helpers import scaled

exp = tl.exp
BLOCK_MIN = tl.constexpr(16)


def cpu_only(x):
    return x


@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0, "HALF": lambda args: args["BLOCK"] // 2})
@triton.jit(do_not_specialize=["n"])
def kernel(X, Y, n, BLOCK: tl.constexpr, EVEN: tl.constexpr, HALF: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.static_assert(BLOCK >= BLOCK_MIN)
    tl.store(Y + offs, scaled(exp(tl.load(X + offs, mask=offs < n))), mask=offs < n)


@triton.jit
def reads_python(X):
    tl.store(X, cpu_only(1))
'''

CAPTURE = '''
import json, sys
from aot_tune.triton_compat import kernel_source
from kslib import ops
layers = kernel_source.heuristic_layers(ops.kernel)
print(json.dumps({"source": kernel_source.capture(layers[-1].fn), "key": layers[-1].fn.cache_key,
                  "heuristics": kernel_source.heuristic_values(layers, {"n": 96, "BLOCK": 32})}))
try:
    kernel_source.capture(ops.reads_python)
except kernel_source.SourceUnsupported as exc:
    print(exc)
'''

REBUILD = '''
import json, sys
from aot_tune.triton_compat import kernel_source
source = json.loads(sys.stdin.read())
stale = kernel_source.stale(source)
kernel = None if stale else kernel_source.rebuild(source)
print(json.dumps({"key": kernel.cache_key if kernel else None, "stale": stale,
                  "imported": sorted(m for m in ("kslib", "kslib.ops", "torch") if m in sys.modules)}))
'''


def python(code: str, path: Path, stdin: str = "") -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(path), str(Path(__file__).resolve().parents[2])])
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], input=stdin, capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    (site / "kslib").mkdir()
    (site / "kslib" / "__init__.py").write_text("")
    (site / "kslib" / "helpers.py").write_text(HELPERS)
    (site / "kslib" / "ops.py").write_text(OPS)
    return site


def test_a_kernel_is_rebuilt_with_triton_alone_to_its_cache_key(library: Path) -> None:
    out = python(CAPTURE, library).splitlines()
    captured = json.loads(out[0])
    source = captured["source"]
    assert source["kernel"] == "kslib.ops:kernel" and source["cache_key"] == captured["key"]
    assert set(source["files"]) == {"kslib/ops.py", "kslib/helpers.py"}
    names = source["functions"]["kslib.ops:kernel"]["names"]
    assert names["exp"] == {"object": ["triton.language.math", "exp"]}
    assert names["BLOCK_MIN"] == {"constexpr": 16} and names["tl"] == {"module": "triton.language"}
    assert names["scaled"] == {"function": "kslib.helpers:scaled"}
    assert source["functions"]["kslib.ops:kernel"]["options"] == {"do_not_specialize": ["n"]}
    assert "src" not in json.dumps(source["functions"]), "a recorded source holds no code"
    assert captured["heuristics"] == {"EVEN": True, "HALF": 16}
    assert out[1] == ("kslib.ops:reads_python reads 'cpu_only' (function from kslib.ops), which is not a "
                      "Triton function, a module or a constant")

    rebuilt = json.loads(python(REBUILD, library, json.dumps(source)))
    assert rebuilt == {"key": captured["key"], "stale": None, "imported": []}


def test_a_source_whose_files_changed_is_not_rebuilt(library: Path, tmp_path: Path) -> None:
    source = json.loads(python(CAPTURE, library).splitlines()[0])["source"]
    copy = tmp_path / "site"
    (copy / "kslib").mkdir(parents=True)
    for name in ("__init__.py", "helpers.py"):
        (copy / "kslib" / name).write_text((library / "kslib" / name).read_text())
    (copy / "kslib" / "ops.py").write_text(OPS.replace("exp(", "tl.exp2("))
    out = json.loads(python(REBUILD, copy, json.dumps(source)))
    assert out["key"] is None and out["stale"] == f"{copy / 'kslib' / 'ops.py'} changed since it was recorded"
    (copy / "kslib" / "ops.py").write_text(OPS)
    (copy / "kslib" / "helpers.py").unlink()
    assert json.loads(python(REBUILD, copy, json.dumps(source)))["stale"] == "kslib/helpers.py is not installed"


STAND_INS = '''
import json
from triton.runtime.jit import mangle_type
from aot_tune.triton_compat import StandIn
read = []
for _ in range(200):
    for dtype in ("float16", "float32", "bfloat16", "int32", "float8_e4m3fn"):
        read.append((dtype, mangle_type(StandIn(dtype, (4, 4), (4, 1)))))
print(json.dumps(sorted(set(map(tuple, read)))))
'''


def test_stand_ins_specialize_as_the_tensors_they_stand_for(tmp_path: Path) -> None:
    """What a compile of a rebuilt kernel passes for a tensor: its dtype by name, a 16-byte aligned
    address. Made and dropped again and again, each still reads as its own dtype (Triton caches
    what it read of a dtype object by the object)."""
    assert json.loads(python(STAND_INS, tmp_path)) == [
        ["bfloat16", "*bf16"], ["float16", "*fp16"], ["float32", "*fp32"], ["float8_e4m3fn", "*fp8e4nv"],
        ["int32", "*i32"]]


def test_the_study_tool_counts_what_a_library_can_be_rebuilt_from(library: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "tools.studies.kernel_sources", "kslib", "--path", str(library)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("kslib: 1 of 1 autotuned kernels captured (0 modules did not import here)")
    assert "importing neither torch nor it; cache keys the library's: 1 of 1" in proc.stdout


PATCHED = '''
import json
import triton.language.math
from aot_tune.triton_compat import kernel_source
from kslib import ops
triton.language.math.exp = lambda x: x  # as the interpreter replaces builtins while it runs
layers = kernel_source.heuristic_layers(ops.kernel)
print(json.dumps(kernel_source.capture(layers[-1].fn)["functions"]["kslib.ops:kernel"]["names"]["exp"]))
'''


def test_a_builtin_is_named_by_where_triton_defines_it_while_the_interpreter_replaces_it(library: Path) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(library), str(Path(__file__).resolve().parents[2])])}
    proc = subprocess.run([sys.executable, "-c", PATCHED], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"object": ["triton.language.math", "exp"]}
