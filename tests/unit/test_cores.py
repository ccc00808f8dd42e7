"""GPU device workers on cores of their own, the compiles on the others: which cores, and the
processes kept to them."""
from __future__ import annotations

import multiprocessing
import os

import pytest

from aot_tune.bench.local.pool import DevicePool
from aot_tune.workers.cores import CoreSplit, _parse_list, pin, split_cores

needs_two_cpus = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                                    reason="needs a Linux machine with two CPUs to split")


def _smt(cpus: int):
    """A host of ``cpus`` hardware threads, two to a physical core (cpu i and i + cpus/2)."""
    half = cpus // 2
    return lambda cpu: frozenset({cpu % half, cpu % half + half})


def test_each_device_worker_gets_a_whole_physical_core_and_the_compiles_the_rest():
    split = split_cores(4, range(64), _smt(64))
    assert split.devices == (frozenset({31, 63}), frozenset({30, 62}), frozenset({29, 61}), frozenset({28, 60}))
    assert len(split.compiles) == 56 and not split.compiles & set().union(*split.devices)
    assert split.compiles | set().union(*split.devices) == set(range(64))
    assert "the compiles run on the other 56 CPUs" in split.describe()


def test_no_split_where_too_few_cores_are_to_spare():
    assert split_cores(1, range(2), lambda cpu: frozenset({cpu})) is None
    assert split_cores(4, range(24), _smt(24)) is None  # 12 physical cores for 4 devices
    assert split_cores(0, range(64), _smt(64)) is None
    assert split_cores(1, range(16), _smt(16)).devices == (frozenset({7, 15}),)
    # a sibling outside the allowed CPUs (a container's share) is not handed out
    assert split_cores(1, range(8), _smt(16)).devices == (frozenset({7}),)


def test_a_sysfs_cpu_list_reads_ranges_and_singles():
    assert _parse_list("0-1,4\n") == {0, 1, 4} and _parse_list("7") == {7}


def _affinity(conn, cpus):
    pin(cpus)
    conn.send(sorted(os.sched_getaffinity(0)))


@needs_two_cpus
def test_a_pinned_process_and_a_device_worker_keep_to_their_cpus(tmp_path):
    first, *_ = sorted(os.sched_getaffinity(0))
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(target=_affinity, args=(child, {first}))
    process.start()
    assert parent.recv() == [first]
    process.join()

    pool = DevicePool("interpreter", 1, str(tmp_path / "cache"), cpus=(frozenset({first}),))
    try:
        worker = pool.worker(0)
        assert os.sched_getaffinity(worker.process.pid) == {first}
    finally:
        pool.close()


def test_a_split_names_every_device_core():
    split = CoreSplit((frozenset({3, 7}),), frozenset({0, 1, 2, 4, 5, 6}))
    assert split.describe().startswith("each GPU device worker has a CPU core of its own (3+7)")
