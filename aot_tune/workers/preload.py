"""Imported once by the fork server that compile workers (and GPU device workers) are forked from.

Everything a worker would otherwise pay on its own start and first compile is done here, once:
importing torch, triton and the compile modules, torch's lazy imports on the first meta-tensor
op (torch._dynamo, 1.4 s on a 2-core machine), Triton's hash of its own library for its cache
key (``triton_key()``, lru-cached, 0.4-0.8 s) and the modules Triton's first launch imports.
Then every worker is a ``fork()`` of this process.

For that fork to be safe and to behave like a spawned worker:

* this process is single-threaded in Python (it starts no thread; ``STATE["threads"]`` records
  it) and runs no OpenMP/BLAS work (meta tensors compute nothing). numpy's OpenBLAS starts a
  thread pool when loaded; it shuts it down around ``fork()`` itself (pthread_atfork);
* it never initializes CUDA: no ``torch.cuda`` call, Triton's driver is not created (a compile
  worker installs a stand-in driver; a GPU device worker initializes CUDA in itself after the
  fork, and checks first, aot_tune.forking.cuda_fork_problem). Importing a CUDA build of torch
  loads the CUDA driver's library, which is harmless until it is initialized: the last step here
  records whether it was (``STATE["drivers"]``), since a forked worker cannot tell;
* the environment is pinned before triton is imported: TRITON_INTERPRET is removed (triton
  decides at import time whether its own library functions are interpreted, so interpreter
  device workers are spawned instead) and the cache-key variables are set. TRITON_CACHE_DIR and
  the other knobs triton reads lazily (triton 3.6 and 3.9 read ``knobs.cache.dir`` from the
  environment on each use), so each worker sets its run's cache directory after the fork;
* it imports torch and triton from the tuning process's ``sys.path`` (aot_tune itself was found
  on the server's own path, before this module ran; aot_tune.forking checks that a forked worker
  finds all three where the tuning process does, and spawns workers if not).

Nothing here may raise: a failed step only leaves more for each worker to do, as before.

In a run whose compiles need no torch (every kernel rebuilt from its recorded source:
aot_tune.record.replay), the tuning process starts the server without it (``forking.TORCH_ENV``):
it imports Triton alone, and a GPU device worker imports torch itself, while the compiles run.
Triton 3.6's native specializer imports torch at its first call (``start_specializer`` makes that
call here with torch's import blocked: on an H200 host with the page cache dropped, the import was
3.5-3.8 s of the server's 4.6-5.3 s, against 0.35 s for importing triton and 0.55 s for its hash).
Triton 3.9's imports nothing.

The server exits without tearing its interpreter down (``os._exit`` at its first exit handler):
with torch, torch._dynamo and triton loaded that teardown took 0.9 s on a 2-core CPU and 1.1 s
on a GPU host after the run had ended, with the run's stdout and stderr still open in it, so a
``doit tune | tee log`` waited for it. It holds nothing to flush; the workers it forks leave
through ``os._exit`` themselves (multiprocessing's forkserver), so they are not affected.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time

#: What the preload did; forked workers inherit it (aot_tune.forking.forked_from_server).
STATE: dict = {"preloaded": False, "seconds": 0.0, "threads": 0, "error": "", "drivers": {}, "exits_at_once": False}

_SYS_PATH_ENV = "AOT_TUNE_FORKSERVER_SYS_PATH"  # aot_tune.forking.SYS_PATH_ENV


def _use_the_parents_path() -> None:
    try:
        path = json.loads(os.environ.get(_SYS_PATH_ENV, "null"))
    except ValueError:
        return
    if isinstance(path, list):
        sys.path[:] = [str(entry) for entry in path]


def _preload() -> None:
    start = time.perf_counter()
    _use_the_parents_path()
    os.environ.pop("TRITON_INTERPRET", None)
    from aot_tune import forking, triton_compat

    triton_compat.pin_environment()
    STATE["torch"] = os.environ.get(forking.TORCH_ENV, "1") != "0"
    if STATE["torch"]:
        import torch
        import torch._dynamo  # noqa: F401 - what torch._refs imports on the first meta-tensor op

        # The meta-tensor ops input builders and launch functions use, on meta tensors: nothing runs.
        a = torch.randn((16, 16), dtype=torch.float16, device="meta")
        b = torch.empty((16, 16), dtype=torch.float32, device="meta")
        (a / 2, a * a, a @ a, a.float() + b, torch.zeros_like(a), a.stride(), a.data_ptr())
    import triton  # noqa: F401

    triton_compat.warm_first_lookup()
    import aot_tune.bench.engine.pipeline  # noqa: F401
    import aot_tune.bench.local.worker  # noqa: F401
    import aot_tune.build.compile  # noqa: F401
    import aot_tune.build.specialize  # noqa: F401
    STATE["seconds"] = round(time.perf_counter() - start, 3)
    STATE["threads"] = threading.active_count()
    STATE["preloaded"] = STATE["threads"] == 1  # a thread of ours would not survive a fork: say so


def _in_the_fork_server() -> bool:
    """Whether this import runs in multiprocessing's fork server (its ``main`` is on the stack),
    not in a process that imported this module otherwise (whose exit status must stand)."""
    from multiprocessing import forkserver

    frame = sys._getframe()
    while frame is not None:
        if frame.f_code is forkserver.main.__code__:
            return True
        frame = frame.f_back
    return False


try:
    if _in_the_fork_server():  # first: the exit handlers registered later (by imports) run before it
        atexit.register(os._exit, 0)
        STATE["exits_at_once"] = True
except Exception:  # the server then tears down as any process does
    pass
try:
    _preload()
except Exception as exc:  # the server must start regardless; workers then import what is missing
    STATE["error"] = f"{type(exc).__name__}: {exc}"[:300]
try:  # last: what the imports above loaded (aot_tune.forking.cuda_fork_problem reads it in a GPU worker)
    from aot_tune.forking import driver_states

    STATE["drivers"] = driver_states()
except Exception:  # unread: a GPU worker that finds a driver loaded is spawned instead
    pass
