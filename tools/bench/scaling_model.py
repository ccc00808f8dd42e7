"""The bench stage on more GPUs than were measured, on paper: list scheduling fed with measured
costs, checked against the GPU counts that were measured (issue #41: 8 GPUs, 2 hosts of 8).

Nothing here is measured. Every input is a measurement made elsewhere (each constant below
says where), and every figure printed for a count that was not run is a prediction.

The model, for one device model:

* **A bench task's seconds** are what its record says the task held a device
  (``bench_seconds``: its measurements plus its own work around them), read from a cache whose
  measurements carry seconds (the checked-in fp8 GEMM cache, the paper benchmark's oracles, a
  ``bench_scaling --keep`` folder), this device's records first. A baseline the manifest declares
  and the record lacks adds one measurement at the record's median; a record of another config
  count is scaled to the task's. A task no record answers costs ``ROW_MEASUREMENT_S`` a
  measurement (its configs and baselines): the checked-in H200 tables of the row kernels were
  measured on 2026-11-22 by runs that kept no per-measurement seconds.
* **Order and placement**: the bench rule's dispatch order (rules/bench.py: seeding shapes
  first, then the forecast's device seconds, which for a cold run price every config alike, so
  most configs first, stable in manifest order), which the local pool grants first
  come first served and Dask runs by submission: list scheduling longest first, with the config
  count as the length (LPT). Each task goes to the device that frees first (lowest index on a
  tie). A kernel's first shape on a device costs ``FIRST_USE_S`` more (a fresh worker's first
  shape: its first launches, reference and vendor set-up), except on the first device to run the
  kernel: records measured on one worker hold that once per kernel.
* **Stage** = the workers' start-up (in parallel: one ``STARTUP_S`` whatever the count) + the
  makespan. ``floor`` is max(device seconds / devices, the longest task).
* **H hosts of G GPUs** are H x G devices of one Dask cluster: each task also pays
  ``DASK_TASK_S`` and its Triton cache entries over the network (configs x ``ENTRY_KIB`` at
  ``GBPS``); the workers of every host start in parallel.
* **A cold run** compiles on the planning host only, however many GPUs bench: it takes at least
  max(compile stage, makespan) after the start-up; the table says which bounds it.

Not modelled: contention between devices (one process hands every device its work and reads
its results), clocks that fall under sustained load, retries, and budgeted searches' later
batches. ``fit`` gives two variants fitted to measured runs to bound what that leaves out: the
1-GPU run sets a scale (the records come from other runs), and the next count's excess is put
either in the first use or in a slowdown per further device; the counts after are the check.

    python3 -m tools.bench.scaling_model                        # the check and the predictions
    python3 -m tools.bench.scaling_model --measured scaling.json   # against bench_scaling --save
    python3 -m tools.bench.scaling_model --gpus 1 2 4 8 16 --hosts 2x8 4x8 --json out.json
"""
from __future__ import annotations

import argparse
import heapq
import json
import lzma
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

ROOT = Path(__file__).resolve().parents[2]
ORACLE_H200 = ROOT / "tools" / "studies" / "oracle" / "gemm-paper-h200.tuning.pb.xz"

#: The device workers' start-up in a bench-only run: 9.7, 8.9 and 8.9 s on 1, 2 and 4 GPUs (4x
#: H200 host, 2026-11-26, bench_scaling's stage less its part after the workers were up); 9.1 and
#: 7.4 s on 1 and 2 GPUs (2x H200 host, 2026-11-22 15:48).
STARTUP_S = 9.0
#: A fresh worker's first shape costs more than its later ones: the first GEMM shape of each
#: oracle's second slice against that slice's median, 7.36 against 6.81 s (H200) and 7.40 against
#: 6.88 s (H100), 2026-11-26; profile_bench_pass's first launch of a process, 0.55-0.68 s (H200,
#: 2026-11-22). Measured for the GEMM only; the model charges it for each kernel.
FIRST_USE_S = 0.55
#: A task of the row kernels (10 configs and the vendor) held its device 325 ms, all in: 29.5 ms a
#: measurement (H100 host, 2026-11-24, tools.bench.small_tasks).
ROW_MEASUREMENT_S = 0.0295
#: Dask over the local pool on one host (bench_distributed, 2x H200 host, 2026-11-22 09:34, 23 tasks):
#: +1.0 s on 1 GPU (0.043 s a task) and +1.1 s on 2 (0.096 s a task of each GPU's share). The
#: larger; both are within the run-to-run spread of the stage (about 1 s).
DASK_TASK_S = 0.096
#: A packed Triton cache entry of the GEMM for sm90 (cubin and metadata, zlib level 1): median
#: 15.3 KiB, at most 27.4 KiB (54 entries of test caches on the 2-core CPU, triton 3.9, 2026-11-27).
ENTRY_KIB = 15.3
#: Assumed: the hosts' network, Gbit/s.
GBPS = 10.0
#: Compile stages on a 16-core planning host: this repository's manifest 32.9 s (982 compiles,
#: H100 host, 2026-11-24 02:08); the paper's benchmark about 8 s (319 configs, H200 host, 2026-11-26).
MANIFEST_COMPILE_S = 32.9
WHOLE_COMPILE_S = 8.0
#: The runs issue #41 reports (bench_scaling's timings, in the format of its --save).
MEASURED_4XH200 = {
    "date": "2026-11-26", "device": "4 x NVIDIA H200", "command": "python3 -m tools.bench.bench_scaling --gpus 1 2 4",
    "runs": [{"gpus": 1, "stage_s": 86.0, "after_up_s": 76.3}, {"gpus": 2, "stage_s": 49.0, "after_up_s": 40.1},
             {"gpus": 4, "stage_s": 30.3, "after_up_s": 21.4}],
}


@dataclass(frozen=True)
class Task:
    """One bench task: its dispatch key (configs, whether it seeds a search) and its device seconds."""

    name: str
    configs: int
    seconds: float
    source: str = ""
    seeded: bool = False

    @property
    def kernel(self) -> str:
        return self.name.split()[0]


@dataclass(frozen=True)
class Costs:
    """The model's inputs. ``scale`` and ``slowdown`` are 1 and 0 in the model; ``fit`` sets them
    (and ``first_use_s``) from measured runs."""

    startup_s: float = STARTUP_S
    first_use_s: float = FIRST_USE_S
    dask_task_s: float = DASK_TASK_S
    entry_kib: float = ENTRY_KIB
    gbps: float = GBPS
    scale: float = 1.0      # every task's seconds times this
    slowdown: float = 0.0   # and times 1 + slowdown x (devices - 1): contention in the one serving process

    def network_s(self, task: Task) -> float:
        """A task's Triton cache entries over the hosts' network (sent with every batch)."""
        return task.configs * self.entry_kib * 1024 * 8 / (self.gbps * 1e9)


@dataclass(frozen=True)
class Prediction:
    hosts: int
    gpus_per_host: int
    executor: str
    makespan_s: float
    stage_s: float
    floor_s: float
    compile_s: float

    @property
    def devices(self) -> int:
        return self.hosts * self.gpus_per_host

    @property
    def bound(self) -> str:
        return "compile" if self.compile_s > self.makespan_s else "bench"


def dispatch_order(tasks: Iterable[Task]) -> list[Task]:
    """The order doit hands bench tasks out in a cold run (rules/bench.py): seeds first, most configs first, stable."""
    return sorted(tasks, key=lambda t: (t.seeded, -t.configs))


def list_schedule(seconds: Sequence[float], devices: int, first_use_s: float = 0.0,
                  kernels: Sequence[str] | None = None) -> list[float]:
    """Each task, in the order given, to the device that frees first (lowest index on a tie). A
    task of a kernel that another device ran already, but this one not yet, costs ``first_use_s``
    more (``kernels``: each task's kernel; None: all one). Returns when each device ends (0 for
    one that got no task)."""
    kernels = kernels if kernels is not None else [""] * len(seconds)
    free = [(0.0, index) for index in range(max(1, devices))]
    ends = [0.0] * len(free)
    ran: list[set[str]] = [set() for _ in free]
    for task, kernel in zip(seconds, kernels):
        at, index = heapq.heappop(free)
        first_use = first_use_s if kernel not in ran[index] and any(kernel in r for r in ran) else 0.0
        ran[index].add(kernel)
        ends[index] = at + task + first_use
        heapq.heappush(free, (ends[index], index))
    return ends


def predict(tasks: Sequence[Task], gpus_per_host: int, hosts: int = 1, costs: Costs = Costs(),
            compile_s: float = 0.0) -> Prediction:
    """The bench stage of ``tasks`` on ``hosts`` x ``gpus_per_host`` devices (Dask past one host)."""
    ordered = dispatch_order(tasks)
    dask = hosts > 1
    devices = hosts * gpus_per_host
    stretch = costs.scale * (1 + costs.slowdown * (devices - 1))
    seconds = [t.seconds * stretch + (costs.dask_task_s + costs.network_s(t) if dask else 0.0) for t in ordered]
    makespan = max(list_schedule(seconds, devices, costs.first_use_s, [t.kernel for t in ordered]), default=0.0)
    floor = max(sum(seconds) / devices, max(seconds, default=0.0))
    return Prediction(hosts, gpus_per_host, "dask" if dask else "local", makespan, costs.startup_s + makespan,
                      floor, compile_s)


def fit(tasks: Sequence[Task], measured: dict, costs: Costs = Costs()) -> tuple[dict[str, Costs], list[int]]:
    """Two fitted variants of ``costs`` from measured runs: the 1-GPU run sets ``scale`` (the
    records come from other runs), then the next count's excess over that is put either in
    ``first_use_s`` or in ``slowdown``. Returns them and the counts used (the others are a
    check); none without a 1-GPU run and another."""
    runs = {r["gpus"]: r["after_up_s"] for r in measured.get("runs", [])}
    others = sorted(n for n in runs if n > 1)
    if 1 not in runs or not others:
        return {}, []
    scaled = Costs(**{**asdict(costs), "scale": runs[1] / predict(tasks, 1, 1, costs).makespan_s})
    target = others[0]

    def solve(field: str, high: float) -> Costs:
        low = 0.0
        for _ in range(60):  # the makespan grows with either parameter
            middle = (low + high) / 2
            trial = Costs(**{**asdict(scaled), field: middle})
            low, high = (middle, high) if predict(tasks, target, 1, trial).makespan_s < runs[target] else (low, middle)
        return Costs(**{**asdict(scaled), field: (low + high) / 2})

    return {"fit first use": solve("first_use_s", runs[target]), "fit slowdown": solve("slowdown", 1.0)}, [1, target]


# -- per-task seconds from caches ---------------------------------------------------------------

def read_records(path: Path) -> list:
    """A cache's records: binary, xz-compressed binary (the oracles) or text."""
    from aot_tune.cache import read_cache
    from aot_tune.tuning_schema import TuningCache

    if path.suffix == ".xz":
        cache = TuningCache()
        cache.ParseFromString(lzma.open(path).read())
        return list(cache.records)
    return list(read_cache(path).records)


def measured_seconds(record) -> float | None:
    """What the record's task held its device, or None where its measurements carry no seconds."""
    summed = sum(m.seconds for m in record.measurements)
    return max(record.bench_seconds, summed) if summed > 0 else None


def record_index(paths: Sequence[Path]) -> dict[tuple, list[tuple[object, str]]]:
    """(kernel, dtype, full shape) -> the records with seconds, in the order of ``paths``."""
    from aot_tune.cache import record_full_shape

    index: dict[tuple, list[tuple[object, str]]] = {}
    for path in paths:
        for record in read_records(path):
            if measured_seconds(record) is not None:
                key = (record.kernel, record.dtype, tuple(record_full_shape(record)))
                index.setdefault(key, []).append((record, path.name))
    return index


def unit_task(unit, index: dict, device_key: str) -> Task:
    """A bench unit's seconds from the best record of its shape (this device's first), else estimated."""
    extra = bool(unit.vendor) + (unit.default_config is not None and unit.default_config not in unit.configs)
    configs = len(unit.configs)
    found = index.get((unit.kernel, unit.dtype, tuple(unit.shape)), [])
    found = sorted(found, key=lambda item: item[0].device.key != device_key)  # stable: this device's first
    label = f"{unit.kernel} {unit.dtype} {'x'.join(map(str, unit.shape))}"
    if not found:
        return Task(label, configs, (configs + extra) * ROW_MEASUREMENT_S, "estimated", bool(unit.sources))
    record, name = found[0]
    seconds = measured_seconds(record) * configs / max(1, len(record.measurements))
    typical = statistics.median(m.seconds for m in record.measurements if m.seconds > 0)
    missing = (bool(unit.vendor) and record.vendor_baseline.seconds <= 0) + \
        (extra - bool(unit.vendor) > 0 and record.default_baseline.seconds <= 0)
    return Task(label, configs, seconds + missing * typical, f"{record.device.key} {name}", bool(unit.sources))


def manifest_tasks(manifest_path: Path, caches: Sequence[Path], device_key: str, kernels: Sequence[str] = (),
                   capability: str = "9.0") -> list[Task]:
    """The bench tasks a run of this manifest (its ``kernels``, all where none) on one model of
    GPU has, in plan order."""
    from aot_tune.bench.runner import DeviceModel
    from aot_tune.manifest import load_manifest
    from aot_tune.pipeline.plan import build_plan

    manifest = load_manifest(manifest_path)
    specs = tuple(k for k in manifest.kernels if not kernels or k.name in kernels)
    plan = build_plan(manifest, DeviceModel("cuda", device_key, device_key, capability, 1), specs)
    index = record_index(caches)
    return [unit_task(unit, index, device_key) for kp in plan.kernels for unit in kp.bench_units]


def cache_tasks(path: Path, device_key: str) -> list[Task]:
    """A cache as a workload: one exhaustive task per record of the device (the paper's benchmark)."""
    from aot_tune.cache import record_full_shape

    return [Task(f"{r.kernel} {r.dtype} {'x'.join(map(str, record_full_shape(r)))}", len(r.measurements),
                 measured_seconds(r), f"{r.device.key} {path.name}")
            for r in read_records(path) if r.device.key == device_key and measured_seconds(r) is not None]


# -- the report -------------------------------------------------------------------------------

def parse_hosts(text: str) -> tuple[int, int]:
    hosts, _, gpus = text.partition("x")
    return int(hosts), int(gpus)


def workload_table(title: str, tasks: Sequence[Task], counts: Sequence[tuple[int, int]], variants: dict[str, Costs],
                   compile_s: float, measured: dict | None, fitted_on: Sequence[int] = ()) -> tuple[str, list[dict]]:
    """A markdown section: the workload, then each variant's prediction (after the workers are up,
    and the stage with their start-up) against the measured runs, per count."""
    runs = {r["gpus"]: r for r in (measured or {}).get("runs", [])}
    sources: dict[str, int] = {}
    for t in tasks:
        sources[t.source] = sources.get(t.source, 0) + 1
    lines = [f"## {title}", "",
             f"{len(tasks)} bench tasks, {sum(t.seconds for t in tasks):.1f} s of device time on one device, "
             f"longest {max(t.seconds for t in tasks):.2f} s; seconds from: "
             + "; ".join(f"{k} ({n})" for k, n in sources.items()), ""]
    if measured:
        lines += [f"measured: {measured.get('device', '?')}, {measured.get('date', '?')}, "
                  f"`{measured.get('command', '?')}`" + (f"; fitted on {' and '.join(map(str, fitted_on))} GPU(s)"
                                                          if fitted_on else ""), ""]
    names = list(variants)
    lines += ["| hosts x GPUs | executor | " + " | ".join(f"{n}: after up (stage)" for n in names)
              + " | measured: after up (stage) | error after up | floor | cold run bound by |",
              "|---|---|" + "---|" * len(names) + "---|---|---|---|"]
    rows = []
    for hosts, gpus in counts:
        predicted = {n: predict(tasks, gpus, hosts, c, compile_s) for n, c in variants.items()}
        first = predicted[names[0]]
        seen = runs.get(first.devices) if hosts == 1 else None
        errors = " / ".join(f"{p.makespan_s / seen['after_up_s'] - 1:+.1%}" for p in predicted.values()) if seen else ""
        lines.append(f"| {hosts} x {gpus} | {first.executor} | "
                     + " | ".join(f"{p.makespan_s:.1f} s ({p.stage_s:.1f})" for p in predicted.values())
                     + (f" | {seen['after_up_s']:.1f} s ({seen['stage_s']:.1f})" if seen else " | ")
                     + f" | {errors} | {first.floor_s:.1f} s | {first.bound} ({compile_s:.1f} s) |")
        rows.append({"hosts": hosts, "gpus_per_host": gpus, "executor": first.executor, "floor_s": first.floor_s,
                     "compile_s": compile_s, **{f"{n}_after_up_s": p.makespan_s for n, p in predicted.items()},
                     **{f"{n}_stage_s": p.stage_s for n, p in predicted.items()},
                     "measured_after_up_s": seen["after_up_s"] if seen else None,
                     "measured_stage_s": seen["stage_s"] if seen else None})
    return "\n".join(lines) + "\n", rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=ROOT / "tuning.yaml")
    parser.add_argument("--caches", type=Path, nargs="*", help="caches with per-measurement seconds, first wins "
                        "[default: the manifest's generated/*.tuning.pb, then the H200 oracle]")
    parser.add_argument("--oracle", default=str(ORACLE_H200), help="a cache predicted as a workload of its own "
                        "(the paper's whole benchmark); 'none' to leave it out")
    parser.add_argument("--device", default="h200", help="the device model whose records come first")
    parser.add_argument("--kernels", nargs="*", help="the manifest's kernels [default: the measured runs' or all]")
    parser.add_argument("--measured", type=Path,
                        help="bench_scaling --save JSON [default: issue #41's 4x H200 host runs]")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--hosts", nargs="*", default=["2x8"], help="HOSTSxGPUS, on a Dask cluster")
    parser.add_argument("--startup-s", type=float, default=STARTUP_S)
    parser.add_argument("--first-use-s", type=float, default=FIRST_USE_S)
    parser.add_argument("--dask-task-s", type=float, default=DASK_TASK_S)
    parser.add_argument("--entry-kib", type=float, default=ENTRY_KIB)
    parser.add_argument("--gbps", type=float, default=GBPS)
    parser.add_argument("--compile-s", type=float, default=MANIFEST_COMPILE_S, help="the manifest's compile stage")
    parser.add_argument("--oracle-compile-s", type=float, default=WHOLE_COMPILE_S)
    parser.add_argument("--json", type=Path, help="write the predictions here")
    args = parser.parse_args(argv)

    costs = Costs(args.startup_s, args.first_use_s, args.dask_task_s, args.entry_kib, args.gbps)
    counts = [(1, g) for g in args.gpus] + [parse_hosts(h) for h in args.hosts]
    caches = args.caches if args.caches is not None else \
        [*sorted((args.manifest.parent / "generated").glob("*.tuning.pb")), ORACLE_H200]
    measured = json.loads(args.measured.read_text()) if args.measured else MEASURED_4XH200
    if measured.get("mode") == "cold":
        print("# note: cold runs (bench_scaling --cold): their bench stages also wait for compiles, which the model "
              "leaves out; it fits and checks bench-only ones")
    print(f"# model inputs: start-up {costs.startup_s} s, first use {costs.first_use_s} s, row kernels "
          f"{ROW_MEASUREMENT_S * 1e3:.1f} ms a measurement, Dask {costs.dask_task_s} s a task, entries "
          f"{costs.entry_kib} KiB a config at {costs.gbps} Gbit/s")
    tasks = manifest_tasks(args.manifest, caches, args.device, args.kernels or measured.get("kernels") or ())
    fitted, fitted_on = fit(tasks, measured, costs)
    for name, c in fitted.items():
        print(f"# {name}: scale {c.scale:.3f}, first use {c.first_use_s:.2f} s, "
              f"slowdown {c.slowdown:.2%} a further device")
    print()
    out: dict = {"costs": asdict(costs), "fitted": {n: asdict(c) for n, c in fitted.items()}}
    text, out["manifest"] = workload_table(f"{args.manifest.name} on {args.device}", tasks, counts,
                                           {"model": costs, **fitted}, args.compile_s, measured, fitted_on)
    print(text)
    if args.oracle != "none":
        oracle = Path(args.oracle)
        # the oracle's seconds are this workload's own: the fits keep their device terms, not their scale
        variants = {"model": costs, **{n: Costs(**{**asdict(c), "scale": 1.0}) for n, c in fitted.items()}}
        text, out["oracle"] = workload_table(f"{oracle.name} (every record one task)", cache_tasks(oracle, args.device),
                                             counts, variants, args.oracle_compile_s, None)
        print(text)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
