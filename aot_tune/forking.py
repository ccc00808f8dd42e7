"""How worker processes start: forked from a fork server that did the imports once, or spawned.

A spawned worker is a fresh interpreter that imports torch and triton itself (1.5 s alone on a
2-core machine, 9-11 s for 16 workers importing side by side on a 16-core host) and then pays
one-time set-up on its first compile (torch's lazy imports on the first meta-tensor op, Triton
hashing its 500 MB library for its cache key: 2 s more here). Instead, one *fork server*
(multiprocessing's ``forkserver``) imports torch, triton and the compile modules and does that
set-up once (``aot_tune.workers.preload``); each worker is then a ``fork()`` of it, up in
milliseconds. The server is a fresh interpreter started by the tuning process, not a fork of it:
it has none of the tuning process's threads, and it never touches CUDA, so a GPU device worker
forked from it initializes CUDA in itself first (``cuda_fork_problem`` checks that before it does).

The server is started once per process with the tuning process's environment and ``sys.path``
(passed in ``SYS_PATH_ENV``: multiprocessing does not give the server the parent's path, and it
imports aot_tune itself before it can read it); each worker then takes the environment its pool
was created with (``adopt_environment``), as a spawned worker would have. Before the first
worker is used, one forked worker checks that it finds aot_tune, torch and triton where the
tuning process does (a server that found another aot_tune first, e.g. in another checkout,
would run that code). Where that fails, where ``forkserver`` is unavailable (Windows), or with
``AOT_TUNE_FORKSERVER=0``, workers are spawned as before.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import threading
import time

from aot_tune import triton_compat

#: The module the fork server imports before it forks any worker.
PRELOAD_MODULE = "aot_tune.workers.preload"
#: The tuning process's ``sys.path``, for the fork server (JSON).
SYS_PATH_ENV = "AOT_TUNE_FORKSERVER_SYS_PATH"
#: ``0`` spawns every worker (no fork server).
SWITCH_ENV = "AOT_TUNE_FORKSERVER"
#: ``0``: the fork server imports Triton alone, not torch (no worker compiles through torch).
TORCH_ENV = "AOT_TUNE_FORKSERVER_TORCH"

#: Modules a forked worker must find where this process finds them: the server imported them.
CHECKED_MODULES = ("aot_tune", "torch", "triton")
#: Seconds to wait for the fork server's first worker (its imports) before spawning instead.
SERVER_TIMEOUT_S = 300.0

_lock = threading.Lock()
_check_lock = threading.Lock()
_server_started = False
_method: str | None = None  # "forkserver" once a forked worker was checked, "spawn" if it failed
#: Why workers are spawned although the fork server is available ("" if they are not).
fallback_reason = ""
#: time.time() when the first worker forked from the server was checked (its imports were done).
ready_at: float | None = None


def available() -> bool:
    return "forkserver" in multiprocessing.get_all_start_methods() and os.environ.get(SWITCH_ENV, "1") != "0"


def start_server(torch: bool = True) -> bool:
    """Start the fork server now, without waiting for it: it imports while the caller goes on, and
    the first worker started from it waits only for what is left. False if workers are spawned.
    ``torch=False``: it imports Triton alone (torch and torch._dynamo, 8-14 s on a fresh GPU host,
    are left to the workers that use them), for a run whose compiles need no torch."""
    global _server_started
    if not available() or _method == "spawn":
        return False
    from multiprocessing import forkserver

    with _lock:
        if not _server_started:
            _server_started = True
            os.environ[SYS_PATH_ENV] = json.dumps(_parent_path())
            os.environ[TORCH_ENV] = "1" if torch else "0"
            # One fork server per process: the preload applies when it starts (now, or after it died).
            multiprocessing.get_context("forkserver").set_forkserver_preload([PRELOAD_MODULE])
        forkserver.ensure_running()
    return True


def importing_torch() -> bool:
    """Whether the fork server was started to import torch and no worker was forked from it yet:
    it may be seconds from its first fork (torch, torch._dynamo and sympy: 8-13 s on H200 hosts,
    warm or cold)."""
    return _server_started and _method is None and os.environ.get(TORCH_ENV, "1") != "0"


def stop_server() -> None:
    """Stop a fork server that no worker has used yet, at once (a run that found nothing to do
    after starting it early, or whose planning failed): its imports would otherwise go on for
    seconds after the command, holding its output open (a ``doit tune | tee log`` waits for it).
    A server a worker was forked from is left alone."""
    global _server_started
    from multiprocessing import forkserver

    with _check_lock, _lock:  # context()'s order: a check under way ends first, and then it stays
        if not _server_started or _method is not None:
            return
        _server_started = False
        # multiprocessing keeps the process's one server here and has no public way to stop it
        # (its own tests use ``_stop``); another Python without them leaves the server running
        server = getattr(forkserver, "_forkserver", None)
        pid = getattr(server, "_forkserver_pid", None)
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL)  # mid-import: nothing to flush, nothing forked from it
        except ProcessLookupError:
            pass
        try:
            server._stop()  # closes its pipe, reaps it, removes its socket: a later start is a fresh one
        except (OSError, AttributeError):
            pass


def context() -> multiprocessing.context.BaseContext:
    """The context worker processes start in: the preloading fork server, or spawn. The first call
    checks that a worker forked from the server finds aot_tune, torch and triton where this
    process does (it waits for the server's imports, as any first worker would): the server
    imports from its own path, and a different aot_tune there (another checkout found first)
    must not do the work. If it does not, or the server fails, workers are spawned from then on."""
    global _method, fallback_reason, ready_at
    if not available():
        return multiprocessing.get_context("spawn")
    if _method is None:
        with _check_lock:
            if _method is None:
                start_server()
                problem = _check_a_forked_worker()
                ready_at = time.time()
                _method = "spawn" if problem else "forkserver"
                if problem:
                    fallback_reason = problem
                    print(f"aot_tune: starting workers the slow way (spawn): {problem}", file=sys.__stderr__, flush=True)
    return multiprocessing.get_context(_method)


#: Where each of ``names`` is found: the module's file if imported, else the file the path gives.
_FIND = """
import importlib.machinery, os, sys
found = {}
for name in names:
    module = sys.modules.get(name)
    if module is not None:
        origin = getattr(module, "__file__", None)
    else:
        origin = getattr(importlib.machinery.PathFinder.find_spec(name, sys.path), "origin", None)
    found[name] = os.path.realpath(origin) if origin else None
"""


def _check_a_forked_worker() -> str:
    """Fork one worker and compare where it finds the checked modules; "" when they match."""
    ctx = multiprocessing.get_context("forkserver")
    parent, child = ctx.Pipe(duplex=False)
    # The target is ``exec`` (a builtin), so nothing of aot_tune is unpickled before the check.
    process = ctx.Process(target=exec, args=(_FIND + "conn.send(found)\n", {"conn": child, "names": CHECKED_MODULES}),
                          name="aot_tune-forkserver-check", daemon=True)
    # start() returns once the server has forked, i.e. after its imports: bounded on a thread, so
    # that a server stuck importing sends the workers to spawn instead of stopping the run.
    failed: list[BaseException] = []

    def start() -> None:
        try:
            process.start()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    starter = threading.Thread(target=start, name="aot_tune-forkserver-check", daemon=True)
    starter.start()
    try:
        starter.join(SERVER_TIMEOUT_S)
        if starter.is_alive():
            return f"the fork server gave no worker within {SERVER_TIMEOUT_S:.0f} s"
        if failed:
            return f"the fork server failed ({type(failed[0]).__name__}: {failed[0]})"
        child.close()
        if not parent.poll(SERVER_TIMEOUT_S):
            process.kill()
            return f"a worker forked from the fork server did not answer within {SERVER_TIMEOUT_S:.0f} s"
        try:
            found = parent.recv()
        except EOFError:  # it died first: e.g. on importing the main script, with the server's modules
            process.join(5)
            return f"a worker forked from the fork server died at its start (exit code {process.exitcode})"
        process.join(5)
    finally:
        parent.close()
    here = {"names": CHECKED_MODULES}
    exec(_FIND, here)
    expected = here["found"]
    for name in CHECKED_MODULES:
        if found.get(name) != expected[name]:
            return (f"a worker forked from the fork server finds {name} at {found.get(name)}, this process at "
                    f"{expected[name]}")
    return ""


def _parent_path() -> list[str]:
    """``sys.path`` as a child resolves it (multiprocessing.spawn does the same with '')."""
    from multiprocessing import process

    return [(process.ORIGINAL_DIR or os.getcwd()) if entry == "" else entry for entry in sys.path]


def environment() -> dict[str, str]:
    """The environment a worker of a pool created now should see (a spawned one inherits it), with
    this process named as the owner the worker exits with (``exit_with_owner``)."""
    return {**os.environ, OWNER_ENV: str(os.getpid())}


def adopt_environment(environ: dict[str, str] | None) -> None:
    """In a worker: take the environment its pool was created with. A worker forked from the
    server starts with the server's, which the tuning process had when the server started."""
    if environ is None:
        return
    for name in [name for name in os.environ if name not in environ]:
        del os.environ[name]
    os.environ.update(environ)


def forked_from_server() -> bool:
    """Whether this process is a fork of the fork server (only the server imports
    ``aot_tune.workers.preload``; its ``STATE`` says what the preload did)."""
    return PRELOAD_MODULE in sys.modules


#: The driver libraries a GPU worker uses, each with a call that, before the library is
#: initialized, does nothing but fail with a known code (CUDA_ERROR_NOT_INITIALIZED,
#: NVML_ERROR_UNINITIALIZED).
DRIVER_PROBES = {"libcuda.so": ("cuDeviceGetCount", 3), "libnvidia-ml.so": ("nvmlDeviceGetCount_v2", 1)}
#: A driver library's state when it is loaded but was never initialized: safe to fork.
NOT_INITIALIZED = "loaded, not initialized"


def driver_states() -> dict[str, str]:
    """In the fork server, after its imports: each driver library of ``DRIVER_PROBES`` it has
    loaded, and whether it was initialized (``NOT_INITIALIZED``, ``"initialized"``, or why that
    cannot be read). Loading a driver is harmless and common (a CUDA build of torch loads libcuda
    when imported); initializing it is not. Read in the server itself, because a child of a process
    that initialized CUDA cannot trust what the driver's calls return there. Reads only libraries
    already loaded, and initializes nothing."""
    states = {}
    for path in sorted(_loaded_libraries()):
        for library, (call, before_init) in DRIVER_PROBES.items():
            if os.path.basename(path).startswith(library):
                states[library] = _driver_state(path, call, before_init)
    return states


def _driver_state(path: str, call: str, before_init: int) -> str:
    import ctypes

    try:
        driver = ctypes.CDLL(path, mode=os.RTLD_NOLOAD)  # the loaded library; never loads another
        code = getattr(driver, call)(ctypes.byref(ctypes.c_uint()))
    except (OSError, AttributeError) as exc:
        return f"loaded, its state unreadable ({type(exc).__name__}: {exc})"[:200]
    return NOT_INITIALIZED if code == before_init else "initialized"


def cuda_fork_problem() -> str | None:
    """In a GPU worker forked from the server, before it initializes CUDA: why it must not (the
    CUDA driver is not fork-safe: the child of a process that initialized it cannot use it), or
    None. The server never initializes CUDA; this checks that no import did it as a side effect:
    each driver library loaded was found uninitialized by the server (``driver_states``, read
    there), torch's CUDA not initialized, Triton's driver not created."""
    found = sys.modules[PRELOAD_MODULE].STATE.get("drivers") or {}
    for path in sorted(_loaded_libraries()):
        for library in DRIVER_PROBES:
            if os.path.basename(path).startswith(library) and found.get(library) != NOT_INITIALIZED:
                return f"{library} in the fork server: {found.get(library, 'loaded, its state not read')}"
    torch = sys.modules.get("torch")
    if torch is not None and (torch.cuda.is_initialized() or torch.cuda._is_in_bad_fork()):
        return "torch initialized CUDA in the fork server"
    if triton_compat.triton_driver_created():
        return "Triton created its driver in the fork server"
    return None


def _loaded_libraries() -> set[str]:
    try:
        with open("/proc/self/maps") as maps:
            return {line.split()[-1] for line in maps if "/" in line}
    except OSError:  # no /proc (macOS): the other checks still apply
        return set()


#: How often a worker looks whether the process that owns its pool is still there (seconds).
PARENT_POLL_S = 0.5
#: The pid of the process that created a worker's pool (set in the environment workers get).
OWNER_ENV = "AOT_TUNE_OWNER_PID"


def exit_with_owner(environ: dict[str, str] | None) -> None:
    """In a worker: exit as soon as the process that owns its pool is gone.

    The owner is named in the pool's environment (``OWNER_ENV``), not taken as the parent: a
    worker forked from the fork server has the server as its parent, and the server does not exit
    while its children live (each child holds the pipe whose end tells the server its owner is
    gone). Without this, a SIGKILL or SIGTERM to the tuning process alone would leave every
    worker, the fork server and the resource tracker running. A polling thread, not
    PR_SET_PDEATHSIG: that signal follows the parent *thread*, and pools start workers from
    short-lived threads."""
    owner = (environ or {}).get(OWNER_ENV)
    pid = int(owner) if owner and owner.isdigit() else os.getppid()

    def alive() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # it exists, as another user's process
            return True
        return True

    def watch() -> None:
        import time

        while alive():
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="aot_tune-exit-with-owner", daemon=True).start()
