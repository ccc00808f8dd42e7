"""The inputs, reference outputs and input-set rotation of one (kernel, shape, dtype).

Without a reference function the expected output is the check config's (the default config, else
the shape's first), computed once per input set and compared under the same dtype-aware tolerance.

Cold L2 without a flush kernel: timed launches cycle through enough independent input sets that
every launch reads inputs other launches have pushed out of L2 (``l2_flush_bytes`` of other
inputs in between, twice the device's L2 by default), one cycle across all of a shape's configs,
the probe included. The GPU spends the whole timed phase in the kernel under test, instead of
zeroing a 256 MB buffer before every run.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any, Callable

from aot_tune.build.loading import input_dtype, resolve
from aot_tune.runtime.forcing import launch_with_config
from aot_tune.bench.engine.check import CHECK_SETS, DeviceValues
from aot_tune.dtypes import TOLERANCE
from aot_tune.bench.runner import BenchRequest, BenchSettings

MAX_INPUT_SETS = 1024
#: Share of free device memory the rotating input sets may take.
ROTATION_MEMORY_SHARE = 0.25


class Workload:
    """The inputs, reference outputs and launch function of one (kernel, shape, dtype).

    Input sets are built on demand from seeds derived from the key, so every run of the tuner
    sees the same inputs, and only the sets a measurement needs are ever allocated.
    """

    def __init__(self, request: BenchRequest, device: str) -> None:
        self.kernel = request.kernel
        self.root = request.root
        self.launch = resolve(request.root, request.launch_ref)
        self._make_inputs = resolve(request.root, request.inputs_ref)
        self._reference = resolve(request.root, request.reference_ref) if request.reference_ref else None
        self._check_config = dict(request.check_config or ())
        self._shape = dict(request.shape)
        self._dtype = input_dtype(request.dtype, request.combos)
        self._device = device
        self._seed = zlib.crc32(repr((request.kernel, request.shape, request.dtype)).encode())
        self._sets: list[tuple] = []
        self._expected: dict[int, Any] = {}
        self._nonzero: dict[int, Any] = {}  # check set -> whether any input is nonzero (read later)
        self._checked = 0
        self._cursor = 0  # the next input set of the timing rotation
        self.tolerance = TOLERANCE.get(request.dtype, 1e-2) if request.tolerance is None else request.tolerance
        self.rotation: Rotation | None = None
        self.inputs(0)  # fail here, once per shape, if the input builder is broken

    def inputs(self, index: int) -> tuple:
        import torch

        while len(self._sets) <= index:
            _seed(torch, self._device, self._seed + len(self._sets))
            built = self._make_inputs(dict(self._shape), self._dtype, self._device)
            self._sets.append(tuple(built))
        return self._sets[index]

    def expected(self, index: int) -> Any:
        """The reference output of check set ``index``, computed once and queued on the device;
        ``confirm_inputs`` later says whether that set's inputs were all zero."""
        if index not in self._expected:
            inputs = self.inputs(index)
            self._nonzero[index] = _any_nonzero(inputs)
            if self._reference is not None:
                self._expected[index] = self._reference(*inputs)
            else:  # no reference: the check config's output, computed once per input set
                output = launch_with_config(self.launch, inputs, self._check_config, kernel=self.kernel)
                self._expected[index] = (tuple(o.clone() for o in output) if isinstance(output, (tuple, list))
                                         else output.clone() if hasattr(output, "clone") else output)
        return self._expected[index]

    def confirm_inputs(self) -> None:
        """Raise if the inputs of a check set were all zero: a kernel that writes zeros would
        pass its check. Read here rather than where the set was built, so that building a set
        (ahead of its pass, during another shape's timed launches) waits for nothing."""
        for nonzero in self._nonzero.values():
            if nonzero is not None and not nonzero.read():
                raise ValueError("the input builder returned all-zero tensors, so a kernel that writes zeros "
                                 "would pass the check; fix: build random inputs")

    def prepare(self, settings: BenchSettings, l2_bytes: int) -> None:
        """Build everything a pass over this shape sets up before its first check (the rotation's
        input sets and, given a reference function, the reference outputs), queued on the
        device without waiting: a device worker does this during another shape's timed
        launches. Without a reference function the expected outputs are the check config's
        launches, left to the pass (its kernel's first launch would wait for the device)."""
        self.rotation_for(settings, l2_bytes, wait=False)
        if self._reference is not None:
            for index in range(CHECK_SETS):
                self.expected(index)

    def next_check_set(self) -> int:
        index = self._checked % CHECK_SETS
        self._checked += 1
        return index

    def take_sets(self, count: int) -> int:
        """The first of the next ``count`` input sets of the rotation: one cycle over all sets
        across the shape's configs, so every launch reads the set left untouched the longest
        (cold in L2). ``rotation_for`` decides the sets first."""
        first = self._cursor
        self._cursor = (first + count) % self.rotation.sets
        return first

    def run(self, index: int, config: dict) -> Any:
        return launch_with_config(self.launch, self.inputs(index), config, kernel=self.kernel)

    def runner(self, request: BenchRequest) -> Callable[[int], Any]:
        """What one launch of the request does on input set ``i``: the kernel with the request's
        config, or (``plain``) the named function as it is, e.g. the vendor baseline."""
        if request.plain:
            function = resolve(self.root, request.launch_ref)
            return lambda i: function(*self.inputs(i))
        config = dict(request.config)
        return lambda i: self.run(i, config)

    def rotation_for(self, settings: BenchSettings, l2_bytes: int, wait: bool = True) -> "Rotation":
        """How many input sets timed launches cycle through (decided once per shape); every set
        is built now, never inside a timed phase, and with ``wait`` the device finishes them."""
        if self.rotation is None:
            import torch

            cold_bytes = (settings.l2_flush_bytes or 2 * l2_bytes) if settings.l2_flush else 0
            free_bytes = torch.cuda.mem_get_info()[0] if self._device != "cpu" else 0
            self.rotation = plan_rotation(_tensor_bytes(self.inputs(0)), cold_bytes, free_bytes)
            self.inputs(self.rotation.sets - 1)
            if wait and self._device != "cpu":
                torch.cuda.synchronize()
        return self.rotation


@dataclass(frozen=True)
class Rotation:
    sets: int
    cold_l2: bool


def plan_rotation(set_bytes: int, cold_bytes: int, free_bytes: int) -> Rotation:
    """Sets to cycle through so that between two reads of one set at least ``cold_bytes`` of other
    inputs pass through L2; capped by memory and ``MAX_INPUT_SETS``. ``cold_l2`` says whether
    the cap still let that happen (tiny inputs may not: they stay L2-resident in real use too)."""
    if cold_bytes <= 0 or set_bytes <= 0:
        return Rotation(1, False)
    wanted = math.ceil(cold_bytes / set_bytes) + 1
    affordable = max(1, int(free_bytes * ROTATION_MEMORY_SHARE) // set_bytes)
    sets = max(1, min(wanted, affordable, MAX_INPUT_SETS))
    return Rotation(sets, (sets - 1) * set_bytes >= cold_bytes)


def _seed(torch, device: str, seed: int) -> None:
    """Seed the generators an input builder draws from: the CPU's and the bench device's, as
    ``torch.manual_seed`` leaves them. Not ``torch.manual_seed`` itself: it also seeds every other
    backend, and on a CUDA build of torch its XPU and MTIA calls format the caller's stack for
    devices that never initialize: 72 us a call against 10 us here (H200 host, torch 2.11), for
    each of the whole GEMM benchmark's 10,910 input sets."""
    torch.random.default_generator.manual_seed(seed)
    if torch.device(device).type == "cuda":
        with torch.cuda.device(torch.device(device)):
            torch.cuda.manual_seed(seed)


def _tensor_bytes(inputs: tuple) -> int:
    return sum(x.numel() * x.element_size() for x in inputs if hasattr(x, "element_size"))


def _any_nonzero(inputs: tuple) -> DeviceValues | None:
    """Whether any input tensor holds a nonzero value, read later (None: no tensor inputs)."""
    import torch

    tensors = [x for x in inputs if hasattr(x, "element_size") and x.numel() > 0]
    if not tensors:
        return None
    # fp8 tensors are widened first: not every device implements any() for them
    return DeviceValues(torch.stack([(x.float() if x.is_floating_point() and x.element_size() == 1 else x).any()
                                     for x in tensors]).any())
