"""Which local backend and GPU model this run tunes for, found without importing torch (it is slow).

``cuda`` when ``nvidia-smi`` lists a GPU, else ``interpreter`` (the CPU runs each config under
``TRITON_INTERPRET=1``). With several GPU models on one host, the first visible model is tuned
and its GPUs are used; the others are named in a notice. A run on a cluster
(``aot_tune.bench.dask``) tunes one ``DeviceModel`` per GPU model its workers have.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from aot_tune.bench.runner import INTERPRETER_DEVICE, DeviceModel
from aot_tune.runtime.devices import device_key
from aot_tune.errors import TuneError

BACKENDS = ("auto", "cuda", "interpreter")


def detect(requested: str = "auto") -> DeviceModel:
    if requested not in BACKENDS:
        raise TuneError(f"unknown bench backend '{requested}'; fix: use --bench-backend with one of {', '.join(BACKENDS)}")
    if requested == "interpreter":
        return INTERPRETER_DEVICE
    gpus = [(gpu.name, gpu.compute_capability) for gpu in visible_gpus()]
    if not gpus:
        if requested == "cuda":
            raise TuneError("--bench-backend cuda: no CUDA GPU is visible (nvidia-smi lists none); "
                            "fix: run on a GPU machine or use --bench-backend interpreter")
        return DeviceModel(**{**INTERPRETER_DEVICE.__dict__,
                              "notice": "no CUDA GPU visible: tuning under the Triton interpreter on the CPU"})
    name, capability = gpus[0]
    same = [g for g in gpus if g[0] == name]
    others = sorted({g[0] for g in gpus if g[0] != name})
    notice = f"also visible but not used in this run: {', '.join(others)}" if others else ""
    return DeviceModel("cuda", device_key(name), name, capability, len(same), notice)


@dataclass(frozen=True)
class VisibleGpu:
    index: str  # nvidia-smi's index, what CUDA_VISIBLE_DEVICES takes
    name: str
    compute_capability: str


def visible_gpus() -> list[VisibleGpu]:
    """The GPUs this process may use (``CUDA_VISIBLE_DEVICES`` order), from nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    rows = [[part.strip() for part in line.split(",")] for line in out.stdout.strip().splitlines()]
    gpus = {row[0]: VisibleGpu(*row) for row in rows if len(row) == 3}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(gpus.values())
    return [gpus[i.strip()] for i in visible.split(",") if i.strip() in gpus]
