"""A GPU device worker started with the run, before its planning, so that torch's import (the
longest step of its start-up: 5-6 s on an H200 host with a cold page cache) runs beside the
planning instead of after it.

The pool's workers are asked for only once the planning knows the devices and that a bench is
stale (1.8-2.5 s into a cold run of fla-core's recorded workloads on an H200 host), and a worker
forked from a fork server of Triton alone (a run of recorded kernels) imported torch only then:
its start-up then held the first bench for 6-7 s. The early worker is spawned by the command as
it starts the fork server, imports torch and Triton, does Triton's one-time set-up, and waits
for the pool of the run to hand it a device index, a cache folder and an environment
(``worker_main``'s arguments); the pool's first GPU worker is that one. A run that has no local
GPU bench for it stops it (``stop``), as does the command's exit.
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import threading
from multiprocessing.connection import Connection

_lock = threading.Lock()
_early: tuple[multiprocessing.process.BaseProcess, Connection] | None = None


def likely_needed(bench_backend: str, executor: str) -> bool:
    """Whether a run may bench on a local GPU: cuda or auto with nvidia-smi on the path (which
    the planning asks), local executor. Guessing wrong costs an import stopped at the run's end."""
    return bench_backend in ("auto", "cuda") and executor == "local" and shutil.which("nvidia-smi") is not None


def start() -> None:
    """Spawn the early worker now, without waiting for it."""
    global _early
    with _lock:
        if _early is not None:
            return
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(target=early_main, args=(child,), name="aot_tune-cuda-early", daemon=True)
        process.start()
        child.close()
        _early = (process, parent)


def take() -> tuple[multiprocessing.process.BaseProcess, Connection] | None:
    """The early worker, for the pool to send its ``worker_main`` arguments to; None if there is
    none, or it died (the pool then starts a worker as it would have)."""
    global _early
    with _lock:
        early, _early = _early, None
    if early is not None and not early[0].is_alive():
        early[1].close()
        return None
    return early


def stop() -> None:
    """Stop an early worker no pool took (nothing to bench locally, or the planning failed)."""
    early = take()
    if early is not None:
        early[0].kill()
        early[0].join(5)
        early[1].close()


def early_main(conn: Connection) -> None:
    """Import what every GPU worker imports, then become the worker the pool asks for."""
    os.environ.pop("TRITON_INTERPRET", None)  # as any GPU worker: triton reads it when imported
    from aot_tune import triton_compat

    triton_compat.pin_environment()  # before triton is imported, as worker_main would
    import torch  # noqa: F401 - the point of starting early

    import aot_tune.bench.engine.pipeline  # noqa: F401
    from aot_tune.bench.local.worker import worker_main

    triton_compat.warm_first_lookup()
    try:
        args = conn.recv()
    except (EOFError, OSError):  # no pool took it: the run ended, or stopped it
        return
    worker_main(conn, *args)
