"""What ``aot_tune.autotune`` costs at run time, against a hard-coded config and ``@triton.autotune``.

Three measurements on ``kernels/vector_add.py`` (``add_kernel`` is decorated with
``@aot_tune.autotune``; its JIT function underneath is launched directly for the baselines):

1. dispatch: host time per call over many calls (CUDA-synchronized at the end of each batch),
   for the decorated kernel, the same JIT kernel with its table config hard-coded, and
   ``@triton.autotune`` with the same configs once its key is tuned; batches interleaved,
   median reported. The "stub" rows swap the launch for a no-op to isolate each wrapper's own
   dispatch cost from Triton's launch path (so they mean something on the CPU too).
2. import: each ``generated/<kernel>.py`` imported in a fresh interpreter (and whether that
   pulled in torch or triton).
3. first call: in a fresh process with a warm Triton cache (each mode runs once to warm it), the
   wall time of the first launch (to synchronize), for a hard-coded config, the decorated kernel
   (with and without its warm start, ``aot_tune.runtime.warm_start``) and ``@triton.autotune`` with the
   same configs.

On a GPU machine, from the repository root (needs torch and triton, not doit):

    python3 -m tools.bench.bench_runtime
    python3 -m tools.bench.bench_runtime --calls 20000 --repeats 7 --fresh 5

On a CPU-only machine it stops with a message unless ``--interpreter`` is given: then everything
runs under the Triton interpreter (a wall-clock ``do_bench`` stands in for Triton's CUDA one), which
checks the tool works; its launch numbers say nothing about a GPU.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("vector_add", "softmax", "rmsnorm", "gemm")
MODES = ("hard-coded", "aot_tune.autotune", "triton.autotune")
#: First-call rows: (label, launch mode, environment). Warm start (aot_tune.runtime.warm_start) is on for
#: aot_tune.autotune by default; it is switched off for the baselines, so they take Triton's own
#: path, and for one aot_tune row, to show what it saves.
FIRST_CALL_ROWS = (
    ("hard-coded config (Triton's path)", "hard-coded", {"AOT_TUNE_WARM_START": "0"}),
    ("aot_tune.autotune", "aot_tune.autotune", {}),
    ("aot_tune.autotune, warm start off", "aot_tune.autotune", {"AOT_TUNE_WARM_START": "0"}),
    ("triton.autotune", "triton.autotune", {"AOT_TUNE_WARM_START": "0"}),
)


# --------------------------------------------------------------------------- shared by parent and children


def _setup(n: int, dtype_name: str, interpreter: bool):
    """The kernel, its inputs, the grid, and the config the table gives for them."""
    import torch
    import triton

    from kernels import vector_add

    device = "cpu" if interpreter else "cuda"
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    x, y = vector_add.make_inputs({"n": n}, dtype, device)
    out = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)  # noqa: E731
    return vector_add, (x, y, out, n), grid


def _wall_do_bench(fn, quantiles=None, **_):
    """The interpreter has no benchmarker: a few wall-clock runs stand in for do_bench."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    median = statistics.median(times)
    return [median] * len(quantiles) if quantiles else median


def _triton_autotuned(vector_add, interpreter: bool):
    import triton

    options = {"do_bench": _wall_do_bench} if interpreter else {}
    return triton.autotune(configs=vector_add._CONFIGS, key=["n"], **options)(vector_add.add_kernel.fn)


def _sync(interpreter: bool) -> None:
    if not interpreter:
        import torch

        torch.cuda.synchronize()


# --------------------------------------------------------------------------- 1. dispatch


class _StubJit:
    """A stand-in JIT function whose launch does nothing: isolates dispatch from Triton's launch."""

    def __init__(self, arg_names):
        self.arg_names = list(arg_names)
        self.fn = _StubJit.run  # triton.autotune looks for the Python function under .fn

    def run(self, *args, grid, warmup, **kwargs):
        return None

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


def dispatch(args) -> list[tuple[str, float]]:
    """Median µs per call of each launch path, batches interleaved."""
    import aot_tune

    vector_add, kernel_args, grid = _setup(args.n, args.dtype, args.interpreter)
    decorated = vector_add.add_kernel
    jit = decorated.fn
    config = decorated.config_for(*kernel_args)
    peer = _triton_autotuned(vector_add, args.interpreter)
    peer[grid](*kernel_args)  # tunes its key once, outside the timing
    stub = _StubJit(jit.arg_names)
    stub_decorated = aot_tune.autotune(configs=vector_add._CONFIGS, key=["n"], table="vector_add")(stub)
    stub_decorated._chosen = {memo: chosen for memo, chosen in decorated._chosen.items()}
    stub_decorated._device = decorated._device
    import triton

    stub_peer = triton.autotune(configs=vector_add._CONFIGS, key=["n"], do_bench=_wall_do_bench)(stub)
    stub_peer[grid](*kernel_args)
    paths = {
        "hard-coded": lambda: jit[grid](*kernel_args, **config),
        "aot_tune.autotune": lambda: decorated[grid](*kernel_args),
        "triton.autotune": lambda: peer[grid](*kernel_args),
        "stub: hard-coded": lambda: stub[grid](*kernel_args, **config),
        "stub: aot_tune.autotune": lambda: stub_decorated[grid](*kernel_args),
        "stub: triton.autotune": lambda: stub_peer[grid](*kernel_args),
    }
    calls = args.calls if not args.interpreter else min(args.calls, 50)
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for name, launch in paths.items():  # warm up every path
        for _ in range(min(calls, 100)):
            launch()
    _sync(args.interpreter)
    for _ in range(args.repeats):
        for name, launch in paths.items():
            count = calls if not name.startswith("stub") else calls * 10
            start = time.perf_counter()
            for _ in range(count):
                launch()
            _sync(args.interpreter)
            samples[name].append((time.perf_counter() - start) / count * 1e6)
    return [(name, statistics.median(values)) for name, values in samples.items()]


# --------------------------------------------------------------------------- 2. import


_IMPORT_PROBE = """
import json, sys, time
start = time.perf_counter()
import generated.{name}
elapsed = time.perf_counter() - start
print(json.dumps([elapsed * 1e3, sorted(m for m in ("torch", "triton") if m in sys.modules)]))
"""


def imports(args) -> list[tuple[str, float, float, str]]:
    rows = []
    for name in GENERATED:
        times, heavy = [], set()
        for _ in range(args.fresh):
            proc = _python(["-c", _IMPORT_PROBE.format(name=name)], {})
            elapsed, loaded = json.loads(proc.stdout.strip().splitlines()[-1])
            times.append(elapsed)
            heavy.update(loaded)
        rows.append((name, min(times), statistics.median(times), ", ".join(sorted(heavy)) or "none"))
    return rows


# --------------------------------------------------------------------------- 3. first call


def first_call_child(mode: str, n: int, dtype: str, interpreter: bool) -> None:
    """Runs in a fresh process: set up, then time the first launch of ``mode`` to synchronize.
    Also reports the time from before importing torch to the first result (imports and set-up
    included), since a launch path can move work between import and first call."""
    began = time.perf_counter()
    import torch  # noqa: F401  (imported before the clock starts, like any user program)

    vector_add, kernel_args, grid = _setup(n, dtype, interpreter)
    if mode == "hard-coded":
        jit = vector_add.add_kernel.fn
        config = vector_add.add_kernel.config_for(*kernel_args)  # as a literal would be: before the clock
        launch = lambda: jit[grid](*kernel_args, **config)  # noqa: E731
    elif mode == "aot_tune.autotune":
        launch = lambda: vector_add.add_kernel[grid](*kernel_args)  # noqa: E731
    else:
        peer = _triton_autotuned(vector_add, interpreter)
        launch = lambda: peer[grid](*kernel_args)  # noqa: E731
    _sync(interpreter)
    start = time.perf_counter()
    launch()
    _sync(interpreter)
    now = time.perf_counter()
    print(json.dumps({"ms": (now - start) * 1e3, "total_ms": (now - began) * 1e3}))


def first_calls(args) -> list[tuple[str, float, list[float]]]:
    """Each row's first launch in fresh processes, rows interleaved, after one warming run each
    (which fills the Triton cache and, for aot_tune.autotune, the warm-start index)."""
    env = {"TRITON_CACHE_DIR": args.triton_cache}
    for _, mode, extra in FIRST_CALL_ROWS:
        _python(["-m", __spec__.name, "--child", mode, *_shared_flags(args)], {**env, **extra})
    samples: dict[str, list[float]] = {label: [] for label, _, _ in FIRST_CALL_ROWS}
    totals: dict[str, list[float]] = {label: [] for label, _, _ in FIRST_CALL_ROWS}
    for _ in range(args.fresh):
        for label, mode, extra in FIRST_CALL_ROWS:
            proc = _python(["-m", __spec__.name, "--child", mode, *_shared_flags(args)], {**env, **extra})
            measured = json.loads(proc.stdout.strip().splitlines()[-1])
            samples[label].append(measured["ms"])
            totals[label].append(measured["total_ms"])
    return [(label, statistics.median(values), values, statistics.median(totals[label]))
            for label, values in samples.items()]


def _shared_flags(args) -> list[str]:
    return ["--n", str(args.n), "--dtype", args.dtype, *(["--interpreter"] if args.interpreter else [])]


def _python(argv: list[str], extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **extra_env}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"bench_runtime: {' '.join(argv[:3])} failed:\n{proc.stderr[-3000:]}")
    return proc


# --------------------------------------------------------------------------- report


def header(args) -> str:
    import torch
    import triton

    if args.interpreter:
        device = f"CPU, Triton interpreter ({os.cpu_count()} cores, {platform.processor() or platform.machine()})"
    else:
        device = f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}, {os.cpu_count()} CPU cores)"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python3 -m tools.bench.bench_runtime " + " ".join(sys.argv[1:])
    return (f"command: {command.strip()}\ndevice: {device}\ndate: {now}\n"
            f"versions: Python {platform.python_version()}, triton {triton.__version__}, torch {torch.__version__}\n"
            f"kernel: vector_add, n={args.n}, {args.dtype}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interpreter", action="store_true", help="run on the CPU under the Triton interpreter")
    parser.add_argument("--n", type=int, default=1048576, help="vector_add size (a tuned key: 1048576 on GPUs)")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--calls", type=int, default=20000, help="launches per dispatch batch")
    parser.add_argument("--repeats", type=int, default=7, help="dispatch batches per path")
    parser.add_argument("--fresh", type=int, default=5, help="fresh processes per first-call mode and per import")
    parser.add_argument("--triton-cache", default=None, help="Triton cache dir (default: a new temporary one)")
    parser.add_argument("--only", choices=("dispatch", "import", "first-call"), action="append")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.interpreter:
        os.environ["TRITON_INTERPRET"] = "1"
        if args.n == 1048576:
            args.n = 4096  # a tuned key of the interpreter table, small enough for the CPU
    if args.child:
        first_call_child(args.child, args.n, args.dtype, args.interpreter)
        return
    if not args.interpreter:
        import torch

        if not torch.cuda.is_available():
            sys.exit("bench_runtime: no CUDA GPU visible; run it on a GPU machine, or pass --interpreter to "
                     "check the tool on the CPU (its launch numbers then say nothing about a GPU)")
    only = set(args.only or ("dispatch", "import", "first-call"))
    with tempfile.TemporaryDirectory(prefix="bench-runtime-triton-") as scratch:
        args.triton_cache = args.triton_cache or scratch
        print(header(args))
        if "dispatch" in only:
            rows = dict(dispatch(args))
            base = rows["hard-coded"]
            print("\n| launch path | µs per call | extra vs hard-coded | ratio |\n|---|---|---|---|")
            for name, value in rows.items():
                reference = rows["stub: hard-coded"] if name.startswith("stub") else base
                print(f"| {name} | {value:.2f} | {value - reference:+.2f} | {value / reference:.2f}x |")
        if "import" in only:
            print("\n| generated module | import ms (min) | median | torch/triton imported |\n|---|---|---|---|")
            for name, best, median, heavy in imports(args):
                print(f"| generated.{name} | {best:.2f} | {median:.2f} | {heavy} |")
        if "first-call" in only:
            rows = first_calls(args)
            aot = dict((label, ms) for label, ms, _, _ in rows)["aot_tune.autotune"]
            print("\n| first call, fresh process, warm Triton cache | ms (median) | samples | vs aot_tune "
                  "| import torch to first result, ms (median) |\n|---|---|---|---|---|")
            for label, ms, values, total in rows:
                print(f"| {label} | {ms:.2f} | {', '.join(f'{v:.2f}' for v in values)} | {ms / aot:.1f}x "
                      f"| {total:.0f} |")


if __name__ == "__main__":
    main()
