"""A device worker that names every config of its batch as on the device at every step, as a GPU
pass with several configs queued may: when it dies, hangs or loses its context, the pool cannot
tell whose fault it was from the worker's last word and must find the culprit itself.

Started by tests/test_bench.py in place of aot_tune.bench.local.worker.worker_main (the interpreter
backend measures one config at a time, so its own announcements never leave a doubt)."""
from __future__ import annotations

from aot_tune.bench.engine import pipeline
from aot_tune.bench.local import worker


def main(conn, backend, device_index, triton_cache_dir, environ=None) -> None:
    measure_one_by_one = pipeline.measure_configs

    def measure_all_named(requests, workload, backend, l2_bytes=0, clocks=None, announce=None):
        everyone = tuple(r.config_id for r in requests)
        return measure_one_by_one(requests, workload, backend, l2_bytes, clocks,
                                  announce=lambda config_ids, phase: announce(everyone, phase))

    pipeline.measure_configs = measure_all_named
    worker.worker_main(conn, backend, device_index, triton_cache_dir, environ)
