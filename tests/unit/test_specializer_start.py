"""The specializer's first call in a process without torch (the fork server of a run of recorded
kernels, aot_tune.triton_compat.start_specializer): it imports no torch, and once a worker
imports torch after it, the specializer answers for torch tensors as it would had torch been
imported first (on Triton 3.6 through its generic path instead of its torch fast path).

Each side runs in a fresh process: the specializer's set-up happens once per process."""
from __future__ import annotations

import json
import subprocess
import sys

from tunerun import subprocess_env

ANSWERS = r'''
import json, sys
from aot_tune.triton_compat.warm import start_specializer
if sys.argv[1] == "torch first":
    import torch
start_specializer()
started_without_torch = "torch" not in sys.modules
import torch
from triton._C.libtriton import native_specialize_impl
from triton.backends.nvidia.compiler import CUDABackend

x = torch.empty(64, dtype=torch.float16)
values = [x, x[1:], torch.empty(8, dtype=torch.bfloat16), torch.empty(3, dtype=torch.int8)[1:],
          1, 16, 17, 2**40, 1.5, True, None, (x, 16, x[3:])]
answers = [repr(native_specialize_impl(CUDABackend, v, const, specialize, align))
           for v in values for const in (False, True) for specialize in (False, True) for align in (False, True)]
print(json.dumps({"started_without_torch": started_without_torch, "answers": answers}))
'''


def _answers(order: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", ANSWERS, order], capture_output=True, text=True,
                          env=subprocess_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_first_call_without_torch_imports_none_and_answers_for_tensors_alike():
    light, usual = _answers("torch later"), _answers("torch first")
    assert light["started_without_torch"]
    assert not usual["started_without_torch"]
    assert light["answers"] == usual["answers"]
    assert "'D'" in " ".join(light["answers"]) and "''" in " ".join(light["answers"])  # both alignments seen
