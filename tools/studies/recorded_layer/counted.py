"""The library's own autotuner benchmarks, counted: imported first by the study's workloads, so
that a first step with tables can show it ran none (the scripts run as files: this sits beside them)."""
from __future__ import annotations

import triton.runtime.autotuner as autotuner

#: The kernel of each benchmark the library's autotuners ran in this process, in order.
benchmarks: list[str] = []
_bench = autotuner.Autotuner._bench


def _counted(self, *args, **kwargs):
    benchmarks.append(self.base_fn.__name__)
    return _bench(self, *args, **kwargs)


autotuner.Autotuner._bench = _counted
