"""The specialize step of a run (part of planning, before doit gets the tasks): capture the
specialization of every launch a stale bench needs and the table lacks, in the compile pool,
store the tables, and plan those kernels' compile units again (aot_tune.build.specialize)."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from aot_tune.build.specialize import SpecializeRequest, split_request
from aot_tune.pipeline.plan import KernelPlan, Plan
from aot_tune.pipeline.staleness import Staleness
from aot_tune.runs.progress import eprint
from aot_tune.runs.stats import RunStats
from aot_tune.space import Config
from aot_tune import forking
from aot_tune.workers.pools import Executors


def capture(plan: Plan, staleness: Staleness, executors: Executors, stats: RunStats) -> None:
    """One request per kernel and target, each split into parts spread over the compile workers
    (a big space has thousands of launches at about half a millisecond each), side by side."""
    requests: list[tuple[KernelPlan, SpecializeRequest]] = []
    for kp in plan.kernels:
        wanted: dict[str, dict[tuple[tuple[int, ...], str], list[Config]]] = {}
        for target, shape, dtype, config in staleness.launches_to_specialize(kp):
            wanted.setdefault(target, {}).setdefault((shape, dtype), []).append(config)
        spec = kp.spec
        for target, launches in wanted.items():
            requests.append((kp, SpecializeRequest(
                kernel=spec.name, root=str(plan.manifest.root), kernel_ref=spec.kernel,
                launch_ref=spec.launch, inputs_ref=spec.inputs, target=target,
                launches=tuple((shape, spec.shape_dict(shape), dtype, tuple((c.id, c.as_dict()) for c in configs))
                               for (shape, dtype), configs in launches.items()),
                combos=spec.combo_pairs,
            )))
    if not requests:
        return
    requests = [(kp, part) for kp, request in requests
                for part in split_request(request, -(-executors.compile_jobs // len(requests)))]
    start, began = time.perf_counter(), time.time()
    executors.start_compiles()  # every compile worker, not only the ones these requests take
    with ThreadPoolExecutor(len(requests)) as threads:
        results = list(threads.map(lambda item: executors.specialize(item[1]), requests))
    specialized, seconds = stats.specialized, stats.seconds
    for (kp, _), result in zip(requests, results):
        kp.specializations.add(result)
        specialized["launches"] += result.launches
        seconds["capture"] += result.seconds
    for kp in {id(kp): kp for kp, _ in requests}.values():
        kp.specializations.write(kp.specializations_path)
        kp.plan_compiles(plan.toolchain, plan.work_dir)
        specialized["specializations"] += len({u.specialization for u in kp.compile_units})
    stats.span("specialize", began, time.time())
    # Until the fork server's imports are done no compile could start either: only the rest
    # of this step is on the run's critical path.
    startup = max(0.0, (forking.ready_at or began) - began)
    seconds["specialize start-up" if executors.compiles_need_torch else "light start-up"] += startup
    eprint(f"[specialize] {specialized['launches']} launches of "
           f"{', '.join(sorted({kp.spec.name for kp, _ in requests}))} captured in "
           f"{time.perf_counter() - start:.1f}s, {startup:.1f}s of it the workers' start-up "
           f"({'torch and triton' if executors.compiles_need_torch else 'triton'} "
           f"imports, which every compile waits for too); the launches {seconds['capture']:.2f}s of "
           f"worker time, {1e3 * seconds['capture'] / max(specialized['launches'], 1):.2f} ms each")
