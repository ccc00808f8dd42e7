"""Warm start: a fresh process finds an already compiled kernel without Triton's installation hash.

Each step runs in its own process (as a user's program would), compiling for sm90 through the
real launch path under the compile stage's stand-in driver, into one Triton cache. Whether
``triton_key()`` (the 0.4-0.8 s hash of libtriton) ran is counted by wrapping it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tunerun import subprocess_env

KERNEL = '''
import triton
import triton.language as tl

import aot_tune


@aot_tune.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"], table="scale")
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * {factor}, mask=mask)
'''

PROBE = '''
import json
import triton.runtime.cache as triton_cache

calls = []
original = triton_cache.triton_key
triton_cache.triton_key = lambda: calls.append(1) or original()

import torch
from aot_tune import triton_compat
from scalemod import scale_kernel

x = torch.empty(4096, dtype=torch.float16, device="meta")
out = torch.empty_like(x)
with triton_compat.target_driver(90):
    compiled = scale_kernel.fn.run(x, out, 4096, grid=(32,), warmup=True, BLOCK=128, num_warps=4)
print(json.dumps({"hash": compiled.hash, "triton_key_calls": len(calls)}))
'''


def _first_compile(tmp_path: Path, factor: str = "2.0", **env: str) -> dict:
    (tmp_path / "scalemod.py").write_text(textwrap.dedent(KERNEL.replace("{factor}", factor)))
    run_env = {**subprocess_env(tmp_path), "TRITON_CACHE_DIR": str(tmp_path / "cache"), **env}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=run_env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[Path, dict]:
    """A folder whose Triton cache holds the kernel's first compile, and that compile. The tests
    that share it only add to the cache and its index (the torn-index test, which damages them,
    compiles into a folder of its own)."""
    folder = tmp_path_factory.mktemp("warm-start")
    return folder, _first_compile(folder)


def test_second_process_skips_triton_key_and_loads_the_same_kernel(compiled):
    folder, cold = compiled
    assert cold["triton_key_calls"] == 1  # compiled for real, and the index entry written
    assert list((folder / "cache" / "aot_tune-warm-start").glob("*.json"))
    warm = _first_compile(folder)
    assert warm == {"hash": cold["hash"], "triton_key_calls": 0}


def test_changed_source_environment_or_switch_take_tritons_path(compiled):
    folder, cold = compiled
    # the kernel's source changed: another key, compiled and keyed by Triton as usual
    edited = _first_compile(folder, factor="3.0")
    assert edited["triton_key_calls"] == 1 and edited["hash"] != cold["hash"]
    # switched off: Triton's own lookup, which finds the same cache entry
    off = _first_compile(folder, AOT_TUNE_WARM_START="0")
    assert off == {"hash": cold["hash"], "triton_key_calls": 1}


def test_deleted_cache_entry_or_torn_index_falls_back(tmp_path):
    cold = _first_compile(tmp_path)
    for index in (tmp_path / "cache" / "aot_tune-warm-start").glob("*.json"):
        index.write_text("{ torn")
    torn = _first_compile(tmp_path)
    assert torn == {"hash": cold["hash"], "triton_key_calls": 1}  # and the index is rewritten
    assert _first_compile(tmp_path)["triton_key_calls"] == 0
    for entry in (tmp_path / "cache").iterdir():
        if entry.name != "aot_tune-warm-start":
            for file in entry.iterdir():
                file.unlink()
    rebuilt = _first_compile(tmp_path)
    assert rebuilt == {"hash": cold["hash"], "triton_key_calls": 1}


def test_runtime_preparation_waits_for_a_stand_in_driver_block():
    """The background set-up creates Triton's driver under the lock the compile stage's stand-in
    driver holds, so it can never replace the stand-in in the middle of a cross-compile."""
    import threading

    from triton.runtime import driver

    from aot_tune import triton_compat

    finished = threading.Event()

    def prepare() -> None:
        try:
            triton_compat.prepare_runtime()
        except Exception:  # no GPU here: creating the real driver fails, after the block
            pass
        finished.set()

    with triton_compat.target_driver(80):
        stand_in = driver._active
        thread = threading.Thread(target=prepare, daemon=True)
        thread.start()
        thread.join(2.0)
        assert not finished.is_set() and driver._active is stand_in
    thread.join(60)
    assert finished.is_set()
