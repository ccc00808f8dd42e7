"""Where a device worker's GPU time goes, batch by batch, for ``AOT_TUNE_GPU_PROFILE=DIR doit tune``.

The run summary splits the device time the benches held from the host's side (timed launches,
checks and warm-ups, input sets, loads, between batches). This says what the GPU itself ran in
each batch: the configs' own kernels outside their timed samples (checks, probes, warm-ups), the
spinning queued before checks and probes, torch's kernels (comparisons, references, input sets),
copies, and how long it idled inside the batch. Each batch runs under ``torch.profiler`` (CUDA
activity), which slows the host: a tune of fla-core's row kernels took 126 s profiled against
44 s, so read the device-side shares, not the run's wall time. Each worker appends one JSON line
per batch to ``DIR/gpu-device<N>-<pid>.jsonl``; ``python -m tools.bench.gpu_split DIR`` adds them up.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence

from aot_tune.bench.runner import BenchRequest, ConfigMeasurement

GPU_PROFILE_ENV = "AOT_TUNE_GPU_PROFILE"

#: Kernel-name markers of what is not a config's own kernel: ``torch.cuda._sleep``'s spin, copies
#: and fills, and torch's own kernels (ATen, cub).
_KINDS = (("spin", ("spin_kernel",)), ("copies", ("memcpy", "memset", "Memcpy", "Memset")),
          ("torch", ("at::", "at_cuda_detail", "cub::", "CatArrayBatchedCopy")))


def kind_of(name: str) -> str:
    """What a GPU kernel of a batch is: one of ``_KINDS``, else a config's own ("own")."""
    for kind, markers in _KINDS:
        if any(marker in name for marker in markers):
            return kind
    return "own"


def split(kernels: Sequence[tuple[str, float, float]], timed_s: float) -> dict[str, float]:
    """A batch's GPU time from its kernels (name, start s, end s): the window from the first
    kernel's start to the last one's end, the time any kernel ran in it (``busy``) and the rest
    (``idle``; short kernels replayed in a graph leave microsecond gaps inside their timed samples
    too), the seconds of each kind of kernel, and of the configs' own those outside the timed
    samples (``own untimed``: checks, probes, warm-ups)."""
    spans = sorted((start, end) for _, start, end in kernels)
    out = {"window": 0.0, "busy": 0.0, "idle": 0.0, "timed": timed_s, "own": 0.0, "own untimed": 0.0}
    out.update({kind: 0.0 for kind, _ in _KINDS})
    if not spans:
        return out
    busy, reach = 0.0, spans[0][0]
    for start, end in spans:
        busy += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    out["window"] = reach - spans[0][0]
    out["busy"], out["idle"] = busy, out["window"] - busy
    for name, start, end in kernels:
        out[kind_of(name)] += end - start
    out["own untimed"] = max(0.0, out["own"] - timed_s)
    return out


class BatchProfile:
    """One batch under torch.profiler where ``AOT_TUNE_GPU_PROFILE`` names a folder and the
    worker measures on a GPU (else nothing): ``add`` each result, and its line is written when
    the block ends cleanly."""

    def __init__(self, device_index: int, batch: list[BenchRequest], backend: str) -> None:
        self.folder = os.environ.get(GPU_PROFILE_ENV, "") if backend == "cuda" else ""
        self.device_index, self.batch = device_index, batch
        self.results: list[ConfigMeasurement] = []
        self._profiler = None

    def __enter__(self) -> "BatchProfile":
        if self.folder:
            from torch.profiler import ProfilerActivity, profile

            self._profiler = profile(activities=[ProfilerActivity.CUDA])
            self._profiler.__enter__()
        return self

    def add(self, result: ConfigMeasurement) -> None:
        if self._profiler is not None:
            self.results.append(result)

    def __exit__(self, kind, exc, traceback) -> bool:
        if self._profiler is None:
            return False
        import torch

        clean = kind is None
        try:
            if clean:
                torch.cuda.synchronize()  # the batch's last kernels, into the trace
            self._profiler.__exit__(kind, exc, traceback)
        except Exception:  # noqa: BLE001 - the context did not survive the batch: nothing to write
            clean = False
        if clean:
            self._write(torch)
        return False

    def _write(self, torch) -> None:
        cuda = torch.autograd.DeviceType.CUDA
        kernels = [(e.name, e.time_range.start / 1e6, e.time_range.end / 1e6)
                   for e in self._profiler.events() if e.device_type == cuda]
        timed = sum(sum(r.times_ms) * (r.launches_per_sample or 1) for r in self.results if r.ok) / 1e3
        first = self.batch[0]
        line = {"kernel": first.kernel, "shape": repr(first.shape), "dtype": first.dtype, "configs": len(self.results),
                "finals": bool(first.final_rounds), "ok": sum(r.ok for r in self.results),
                **{name: round(value, 6) for name, value in split(kernels, timed).items()}}
        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, f"gpu-device{self.device_index}-{os.getpid()}.jsonl")
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
