"""Start aot_tune bench workers for a Dask scheduler: one Dask worker process per local GPU.

    TLS="--tls-ca-file ca.pem --tls-cert gpu-host.pem --tls-key gpu-host.key"  # signed by the cluster's CA
    python -m aot_tune.bench.dask worker tls://head:8786 --host 10.0.0.5 $TLS   # every visible GPU
    python -m aot_tune.bench.dask worker tls://127.0.0.1:8786 --gpus 0 1 $TLS  # a scheduler on this host
    python -m aot_tune.bench.dask worker scheduler.json --interpreter 2 $TLS   # CPU workers (tests, trials)

Each worker sees one GPU (``CUDA_VISIBLE_DEVICES``), runs one thread, and declares its device
model as the resource ``aot_tune:<device key>=1``. Workers run without a nanny, so they can
start their device process; stop them all with Ctrl-C or SIGTERM to this launcher.

Anyone who reaches a worker can run code in it: workers listen on loopback unless ``--host``
names another address (required when the scheduler is on another host), have no dashboard
(their HTTP endpoint is on loopback), and refuse plain TCP to a scheduler, loopback included,
unless ``--insecure-tcp`` is given (aot_tune.bench.dask.security).
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

from aot_tune.runtime.devices import INTERPRETER, device_key
from aot_tune.bench.local.detect import visible_gpus
from aot_tune.bench.dask import resource_name
from aot_tune.bench.dask.security import (TLS_OPTIONS, TlsFiles, check_transport, is_loopback, split_address,
                                         warn_if_plain)
from aot_tune.errors import TuneError

LOOPBACK = "127.0.0.1"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aot_tune.bench.dask", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker", help="start bench workers on this host (one per GPU)")
    worker.add_argument("scheduler", help="the scheduler's address (tls://host:8786) or its scheduler file")
    worker.add_argument("--gpus", nargs="+", metavar="INDEX", help="nvidia-smi indices of the GPUs to serve "
                        "[default: every visible GPU]")
    worker.add_argument("--interpreter", type=int, default=0, metavar="N",
                        help="start N CPU workers running the Triton interpreter instead of GPU workers")
    worker.add_argument("--name", default=socket.gethostname(), help="prefix of the worker names [default: host name]")
    worker.add_argument("--death-timeout", type=float, default=600.0,
                        help="seconds a worker keeps trying to reach a lost scheduler before it exits [default: 600]")
    worker.add_argument("--host", default="", help="the address the workers listen on and the scheduler "
                        "reaches them at [default: 127.0.0.1 when the scheduler is on loopback, else required]")
    worker.add_argument("--tls-ca-file", default="", help="with a tls:// scheduler: the cluster's CA certificate(s) (PEM)")
    worker.add_argument("--tls-cert", default="", help="with a tls:// scheduler: this host's certificate (PEM)")
    worker.add_argument("--tls-key", default="", help="with a tls:// scheduler: the private key of --tls-cert (PEM)")
    worker.add_argument("--insecure-tcp", action="store_true", help="accept a plain tcp:// scheduler, loopback "
                        "included (anyone reaching it or a worker can run code in the workers: trusted users only)")
    worker.add_argument("--one", nargs=2, metavar=("KIND", "NAME"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        args.tls = TlsFiles.of(args.tls_ca_file, args.tls_cert, args.tls_key, where="aot_tune.bench.dask")
        address = check_transport(args.scheduler, args.tls, args.insecure_tcp, fix_tls=TLS_OPTIONS)
    except TuneError as err:
        sys.exit(f"aot_tune.bench.dask: {err}")
    args.host = args.host or _default_host(address)
    if args.one:
        return _serve(args, args.one[0], args.one[1])
    warn_if_plain(address)  # once, by the launcher
    return _launch(args)


def _default_host(address: str) -> str:
    """Loopback for a scheduler on loopback; otherwise the user names the address to expose."""
    if is_loopback(split_address(address)[1]):
        return LOOPBACK
    sys.exit(f"aot_tune.bench.dask: the scheduler at {address} is on another host, so the workers must listen on "
             f"an address it reaches (and anyone else on that network reaches too); fix: pass --host with this "
             f"host's address on the cluster's network, e.g. --host 10.0.0.5")


def _forwarded(args) -> list[str]:
    """The launcher's connection options, for each worker process it starts."""
    forwarded = ["--death-timeout", str(args.death_timeout), "--host", args.host]
    if args.tls is not None:
        forwarded += args.tls.cli_args()
    if args.insecure_tcp:
        forwarded.append("--insecure-tcp")
    return forwarded


def _launch(args) -> int:
    """One child process per worker, so a worker that dies takes only its own GPU with it."""
    if args.interpreter:
        plan = [(INTERPRETER, f"{args.name}-interpreter{i}", None) for i in range(args.interpreter)]
    else:
        gpus = visible_gpus()
        if args.gpus:
            unknown = sorted(set(args.gpus) - {g.index for g in gpus})
            if unknown:
                sys.exit(f"aot_tune.bench.dask: no visible GPU with index {', '.join(unknown)}; "
                         f"fix: pick from {', '.join(g.index for g in gpus) or 'none'}")
            gpus = [g for g in gpus if g.index in args.gpus]
        if not gpus:
            sys.exit("aot_tune.bench.dask: no GPU visible (nvidia-smi lists none); fix: run on a GPU host, "
                     "or use --interpreter N for CPU workers")
        plan = [(device_key(g.name), f"{args.name}-gpu{g.index}", g.index) for g in gpus]
    children = []
    for kind, name, gpu in plan:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        command = [sys.executable, "-m", "aot_tune.bench.dask", "worker", args.scheduler, "--one", kind, name,
                   *_forwarded(args)]
        children.append((name, subprocess.Popen(command, env=env)))
        print(f"aot_tune.bench.dask: worker {name} ({resource_name(kind)}=1) starting, pid {children[-1][1].pid}",
              file=sys.stderr, flush=True)

    def stop(signum, frame):
        for _, child in children:
            if child.poll() is None:
                child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failed = False
    running = dict(children)
    while running:
        for name, child in list(running.items()):
            code = child.poll()
            if code is not None:
                del running[name]
                failed |= code != 0
                print(f"aot_tune.bench.dask: worker {name} exited (code {code})", file=sys.stderr, flush=True)
        time.sleep(0.5)
    return 1 if failed else 0


def _serve(args, kind: str, name: str) -> int:
    """Run one Dask worker in this process until it is closed: listening on ``--host`` only, with
    no dashboard and its HTTP endpoint (health, metrics) on loopback."""
    import asyncio

    from distributed import Worker

    scheduler = args.scheduler
    target = {"scheduler_file": scheduler} if os.path.isfile(scheduler) else {"scheduler_ip": scheduler}
    if args.tls is not None:
        target["security"] = args.tls.security("worker")

    async def serve() -> None:
        worker = Worker(**target, nthreads=1, resources={resource_name(kind): 1}, name=name,
                        death_timeout=args.death_timeout, host=args.host, dashboard=False,
                        dashboard_address=f"{LOOPBACK}:0")
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, lambda: asyncio.ensure_future(worker.close()))
        await worker
        await worker.finished()

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
