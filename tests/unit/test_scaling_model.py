"""tools.bench.scaling_model: the scheduling arithmetic behind the 8-GPU and 2-host predictions
(BENCHMARKS.md), on hand-checked task lists, so that a change to the order, the placement or the
costs shows up here rather than as a quietly different prediction."""
from __future__ import annotations

import pytest

from tools.bench.scaling_model import Costs, Task, dispatch_order, fit, list_schedule, predict

NO_COSTS = Costs(startup_s=0.0, first_use_s=0.0, dask_task_s=0.0, entry_kib=0.0)


def test_each_task_goes_in_order_to_the_device_free_first():
    # 5 -> d0, 4 -> d1, 3 -> d1 (free at 4), 3 -> d0 (at 5), 3 -> d1 (at 7)
    assert list_schedule([5, 4, 3, 3, 3], 2) == [8, 10]


def test_longest_first_is_the_pools_order_not_the_optimum():
    # the textbook case where LPT ends at 7 and the best split ({3, 3}, {2, 2, 2}) at 6
    assert max(list_schedule([3, 3, 2, 2, 2], 2)) == 7


def test_a_device_left_without_work_ends_at_zero_and_ties_go_to_the_lowest_index():
    assert list_schedule([2, 2], 3) == [2, 2, 0]


def test_a_kernels_first_shape_costs_more_on_every_device_but_the_first_to_run_it():
    ends = list_schedule([4, 4, 1, 1], 2, first_use_s=0.5, kernels=["gemm", "gemm", "row", "row"])
    # d0: gemm 4, row 1 (first anywhere) = 5; d1: gemm 4 + 0.5, row 1 + 0.5 = 6
    assert ends == [5.0, 6.0]
    assert list_schedule([4, 4], 1, first_use_s=0.5, kernels=["gemm", "row"]) == [8.0]


def test_dispatch_is_most_configs_first_stable_and_seeded_shapes_last():
    tasks = [Task("a", 10, 1.0), Task("b", 319, 9.0), Task("c", 10, 2.0), Task("d", 400, 1.0, seeded=True),
             Task("e", 319, 7.0)]
    assert [t.name for t in dispatch_order(tasks)] == ["b", "e", "a", "c", "d"]


def test_the_order_is_by_configs_so_a_costly_small_task_can_end_last():
    tasks = [Task("gemm x", 300, 6.0), Task("gemm y", 300, 6.0), Task("slow row", 10, 7.0)]
    p = predict(tasks, 2, costs=NO_COSTS)
    assert (p.makespan_s, p.floor_s) == (13.0, 9.5)


def test_stage_adds_the_start_up_once_and_hosts_pay_dask_and_the_network():
    tasks = [Task("gemm x", 100, 10.0), Task("gemm y", 100, 10.0)]
    costs = Costs(startup_s=9.0, first_use_s=0.5, dask_task_s=1.0, entry_kib=1000 / 1024, gbps=8e-6)
    local = predict(tasks, 2, 1, costs)
    assert (local.executor, local.makespan_s, local.stage_s) == ("local", 10.5, 19.5)
    # 100 configs x 1000 bytes x 8 bits at 8 kbit/s: 100 s on the wire, each task
    dask = predict(tasks, 1, 2, costs)
    assert dask.executor == "dask" and dask.makespan_s == pytest.approx(10.0 + 1.0 + 100.0 + 0.5)


def test_a_slowdown_stretches_every_task_by_the_further_devices():
    tasks = [Task("gemm x", 1, 10.0)] * 4
    assert predict(tasks, 4, costs=Costs(**{**NO_COSTS.__dict__, "slowdown": 0.1})).makespan_s == pytest.approx(13.0)


def test_fit_takes_the_scale_from_one_gpu_and_the_excess_from_the_next_count():
    tasks = [Task("gemm x", 1, 10.0)] * 4
    measured = {"runs": [{"gpus": 1, "after_up_s": 80.0}, {"gpus": 2, "after_up_s": 44.0}]}
    fitted, used = fit(tasks, measured, NO_COSTS)
    assert used == [1, 2]
    first_use, slowdown = fitted["fit first use"], fitted["fit slowdown"]
    assert first_use.scale == pytest.approx(2.0) and slowdown.scale == pytest.approx(2.0)
    # 2 GPUs: 40 s at that scale; 44 s asks for 4 s on d1's first task, or a 10% stretch
    assert first_use.first_use_s == pytest.approx(4.0, abs=1e-6)
    assert slowdown.slowdown == pytest.approx(0.1, abs=1e-6)
    assert fit(tasks, {"runs": [{"gpus": 2, "after_up_s": 44.0}]}) == ({}, [])
