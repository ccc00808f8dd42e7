"""The bench stage on the GPUs of an existing Dask cluster (``doit tune --executor dask``).

Each GPU of the cluster is one Dask worker (``--nthreads 1``, ``CUDA_VISIBLE_DEVICES`` set to its
GPU) that declares its device model as a worker resource, ``aot_tune:<device key>=1``
(``python -m aot_tune.bench.dask worker SCHEDULER`` starts one per local GPU). A bench batch asks
for one unit of its model's resource, so Dask places it only on a worker of that model and runs
one batch per GPU at a time, and reschedules it on another worker of the model when its worker
dies. The run plans bench units for every model present, so one run fills a table per model.

Split by where the code runs: ``client`` on the machine running ``doit tune`` (discovery,
leases, failure handling), ``remote`` inside the Dask workers (a device worker process per GPU,
as locally), ``sources`` for the project files a worker needs, ``__main__`` the worker launcher.
Importing this package does not import Dask.
"""
from __future__ import annotations

RESOURCE_PREFIX = "aot_tune:"


def resource_name(device_key: str) -> str:
    """The worker resource that marks a Dask worker as one GPU of this device model."""
    return f"{RESOURCE_PREFIX}{device_key}"


def declared_kinds(resources: dict) -> list[str]:
    """The device models a worker's resources declare: none for a worker that is not a bench
    worker, exactly one for a proper one."""
    return sorted(name[len(RESOURCE_PREFIX):] for name in resources if name.startswith(RESOURCE_PREFIX))
