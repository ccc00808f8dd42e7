"""The built-in launcher of recorded entries: ``inputs``, ``launch`` and ``reference`` for every
kernel ``aot_tune record`` wrote into tuning.yaml, so the compile, bench and select stages treat a
recorded launch like any user's.

* ``make_inputs(shape, dtype, device)`` rebuilds the launch named by the shape's ``recorded``
  dim: tensors of the recorded shape, stride and dtype, holding the recorded values where they
  were kept (index tensors) and random data of the recorded range elsewhere. The first input
  is the :class:`RecordedCall` (not a tensor: the stages pass it through).
* ``launch(call, *tensors, config=...)`` launches the kernel beneath the library's autotuner with
  one config, as that autotuner launches a candidate while it benchmarks: its own pre- and
  post-hooks around the launch (``reset_to_zero``, ``restore_value``, or the library's hooks),
  and the config's own ``pre_hook``. It returns the tensors the recorded launch wrote.
* ``reference(call, *tensors)`` is the same launch with the config the library itself used.

Where the recording holds the kernel's Triton source and the installed files still match it
(``triton_compat.kernel_source``), the kernel is rebuilt from them with Triton alone: no stage
imports the library (fla-core's kernel modules: 4.6-6.6 s a worker). The launch then passes what
the library's ``@triton.heuristics`` computed when it was recorded, and the autotuner's
``reset_to_zero`` and ``restore_value`` are done here. The launcher bound to a folder
``provides`` such a kernel to the compile and specialize steps (``build.loading.load_kernel_module_attrs``).

The manifest names them as ``aot_tune.record.replay:<name>``; the stages bind them to the
manifest's folder (``build.loading.resolve``), where the recordings are.
"""
from __future__ import annotations

import functools
import sys
import threading
from pathlib import Path
from typing import Any, Mapping

from aot_tune.errors import TuneError
from aot_tune.triton_compat import kernel_source
from aot_tune.triton_compat.launch import StandIn
from aot_tune.record.recording import LAUNCH_DIM, RECORDINGS, RecordedKernel, RecordedLaunch, read_recording


class RecordedCall:
    """One recorded launch, replayable: the first of a recorded shape's inputs."""

    def __init__(self, kernel: RecordedKernel, launch: RecordedLaunch, root: str, abstract: bool = False) -> None:
        self.kernel, self.launch, self.root = kernel, launch, root
        self.abstract = abstract  # its tensors are stand-ins: a compile, which launches nothing
        self._grids = {_config_key(c): g for c, g in zip(kernel.configs, launch.grids)}
        self._heuristics = {_config_key(c): h for c, h in zip(kernel.configs, launch.heuristics or ())}
        self._rebuilt = _replay(root).rebuilt(kernel)  # once here, not on every launch

    def __repr__(self) -> str:
        return f"RecordedCall({self.kernel.ref})"

    def arguments(self, tensors: tuple) -> dict[str, Any]:
        from aot_tune.triton_compat.autotuner_hook import tl_dtype

        named: dict[str, Any] = {}
        position = iter(tensors)
        for argument in self.launch.arguments:
            if argument.tensor is not None:
                named[argument.name] = next(position)
            elif argument.same_as is not None:
                named[argument.name] = named[argument.same_as]
            elif argument.tl_dtype is not None:
                named[argument.name] = tl_dtype(argument.tl_dtype)
            else:
                named[argument.name] = argument.scalar
        return named

    def run(self, tensors: tuple, config: Mapping[str, Any]) -> Any:
        """One launch with ``config``: the written tensors (one, or a tuple)."""
        from aot_tune.runtime.untuned import untuned

        config_key = _config_key(config)
        grid = self._grids.get(config_key)
        if grid is None:
            raise TuneError(f"{self.kernel.ref}: no grid was recorded for config {dict(config)} "
                            f"(not one of the decorator's configs, or its grid function failed on it)")
        named = self.arguments(tensors)
        every = {**named, **self.launch.options, **config}
        rebuilt, heuristics = self._rebuilt, self._heuristics.get(config_key)
        if rebuilt is not None and heuristics is not None:
            if self.abstract:
                return rebuilt[grid](**every, **heuristics)
            return self._run_rebuilt(rebuilt, grid, every, heuristics, tensors)
        if self.abstract:
            raise TuneError(f"{self.kernel.ref}: its @triton.heuristics failed for config {dict(config)} when it was "
                            f"recorded, as they would in the library's own launch of it")
        kernel, tuner = _kernel_and_autotuner(self.root, self.kernel.ref)
        tuner.pre_hook(every)
        try:
            untuned(kernel)[grid](**every)
        except BaseException as exc:
            tuner.post_hook(every, exc)
            raise
        written = self._written(every, tensors)
        tuner.post_hook(every, None)
        return written

    def _run_rebuilt(self, kernel: Any, grid: tuple, every: dict, heuristics: dict, tensors: tuple) -> Any:
        """The launch of the kernel rebuilt from its source, with the hooks the library's
        autotuner runs around a launch when it has none of its own (the recording says so)."""
        for name in self.kernel.reset_to_zero:
            every[name].zero_()
        saved = {name: every[name].clone() for name in self.kernel.restore_value}
        try:
            kernel[grid](**every, **heuristics)
            return self._written(every, tensors)
        finally:
            for name, value in saved.items():
                every[name].copy_(value)

    def _written(self, every: dict, tensors: tuple) -> Any:
        """The tensors the launch wrote; those the hooks put back are copied first."""
        kept = set(self.kernel.restore_value)
        written = tuple(every[n].clone() if n in kept else every[n] for n in self.launch.written) or \
            tuple(t for t in tensors if t.is_floating_point()) or tensors
        return written[0] if len(written) == 1 else written


def reference_config(root: str, shape: Mapping[str, Any]) -> dict | None:
    """The config ``reference`` launches for ``shape``: the one the library itself ran the recorded
    launch with (the compile stage compiles it first: every check of the shape waits for it).
    None for a shape that names no recorded launch."""
    try:
        return dict(_replay(str(root)).find(str(shape[LAUNCH_DIM]))[1].library_config)
    except (KeyError, TuneError, ValueError, OSError):  # the stages report a missing or broken recording
        return None


def _config_key(config: Mapping[str, Any]) -> tuple:
    return tuple(sorted((str(k), repr(v)) for k, v in config.items()))


def compile_seconds(root: str, shape: Mapping[str, Any]) -> dict[str, float]:
    """Per GPU target, the seconds a compile of the kernel of ``shape``'s recorded launch took when
    it was recorded; empty where none was seen, or for a shape that names no recorded launch."""
    try:
        return dict(_replay(str(root)).find(str(shape[LAUNCH_DIM]))[0].compile_s)
    except (KeyError, TuneError, ValueError, OSError):  # the stages report a missing or broken recording
        return {}


@functools.lru_cache(maxsize=None)
def _kernel_and_autotuner(root: str, ref: str) -> tuple[Any, Any]:
    from aot_tune.build.loading import resolve
    from aot_tune.triton_compat.autotuner_hook import is_autotuner

    kernel = layer = resolve(root, ref)
    for _ in range(32):
        if is_autotuner(layer):
            return kernel, layer
        layer = getattr(layer, "fn", None)
    raise TuneError(f"{ref} is no longer a @triton.autotune kernel; fix: record the workload again")


class Replay:
    """The recordings under one manifest's folder, read once, and the three functions over them."""

    _lock = threading.Lock()

    def __init__(self, root: str) -> None:
        self.root = root
        self._launches: dict[str, tuple[RecordedKernel, RecordedLaunch]] | None = None
        self._rebuilt: dict[str, Any] = {}  # kernel ref -> rebuilt from its source, or None
        self._why: dict[str, str | None] = {}  # kernel ref -> why_imported, read once

    def kernels(self) -> dict[str, RecordedKernel]:
        """The recorded kernels by ref."""
        return {kernel.ref: kernel for kernel, _ in self._loaded().values()}

    def _loaded(self) -> dict[str, tuple[RecordedKernel, RecordedLaunch]]:
        with self._lock:
            if self._launches is None:
                self._launches = {}
                for path in sorted((Path(self.root) / RECORDINGS).glob("*.json")):
                    kernel = read_recording(path)
                    self._launches.update({lid: (kernel, launch) for lid, launch in kernel.launches.items()})
            return self._launches

    def rebuilt(self, kernel: RecordedKernel) -> Any | None:
        """The kernel rebuilt from its recorded source, or None where it has none or the installed
        files no longer hold it (``why_imported`` says which)."""
        with self._lock:
            if kernel.ref not in self._rebuilt:
                self._rebuilt[kernel.ref] = None
                if kernel.source is not None:
                    try:
                        self._rebuilt[kernel.ref] = kernel_source.rebuild(kernel.source, self._path())
                    except Exception:  # noqa: BLE001 - stale or not rebuildable here: imported instead
                        pass
            return self._rebuilt[kernel.ref]

    def provides(self, ref: str) -> Any | None:
        """The kernel ``ref`` names, rebuilt from its recording; None where it is imported."""
        kernel = self.kernels().get(ref)
        return self.rebuilt(kernel) if kernel is not None else None

    def why_imported(self, ref: str) -> str | None:
        """Why the stages import the library of kernel ``ref``, or None where they rebuild it from
        its recorded source (read from the installed files, with no import of Triton)."""
        if ref not in self._why:  # the plan, the forecast and the loader all ask: the files are read once
            kernel = self.kernels().get(ref)
            if kernel is None:
                why = "it is not recorded"
            elif kernel.source is None:
                why = kernel.source_refused or "no Triton source was recorded for it"
            else:
                stale = kernel_source.stale(kernel.source, self._path())
                why = f"its recorded source is stale ({stale}); fix: record the workload again" if stale else None
            self._why[ref] = why
        return self._why[ref]

    def _path(self) -> list[str]:
        """Where the library's files are found, as resolve imports them: the manifest's folder first."""
        return [self.root, *sys.path]

    def find(self, launch_id: str) -> tuple[RecordedKernel, RecordedLaunch]:
        try:
            return self._loaded()[launch_id]
        except KeyError:
            raise TuneError(f"no recorded launch {launch_id} under {Path(self.root) / RECORDINGS}; fix: restore "
                            f"the recordings from git, or record the workload again") from None

    def make_inputs(self, shape: Mapping[str, Any], dtype: Any, device: Any) -> tuple:
        kernel, launch = self.find(str(shape[LAUNCH_DIM]))
        if str(device) == "meta" and self.rebuilt(kernel) is not None:  # a compile: no torch needed
            return (RecordedCall(kernel, launch, self.root, abstract=True),
                    *(StandIn(a.tensor.dtype, a.tensor.shape, a.tensor.stride) for a in launch.tensors()))
        return (RecordedCall(kernel, launch, self.root), *_tensors(launch, device))

    def launch(self, call: RecordedCall, *tensors: Any, config: Mapping[str, Any]) -> Any:
        return call.run(tensors, config)

    def reference(self, call: RecordedCall, *tensors: Any) -> Any:
        output = call.run(tensors, call.launch.library_config)
        return tuple(t.clone() for t in output) if isinstance(output, tuple) else output.clone()


def _tensors(launch: RecordedLaunch, device: Any) -> list:
    import torch

    built = []
    for argument in launch.tensors():
        spec = argument.tensor
        dtype = getattr(torch, spec.dtype)
        if str(device) == "meta" or 0 in spec.shape:
            built.append(torch.empty_strided(spec.shape, spec.stride, dtype=dtype, device=device))
        elif spec.values is not None:
            values = torch.tensor(spec.values, dtype=torch.float64 if dtype.is_floating_point else torch.int64)
            tensor = torch.empty_strided(spec.shape, spec.stride, dtype=dtype, device=device)
            try:
                tensor.copy_(values.reshape(spec.shape).to(dtype))
            except RuntimeError:  # strides that overlap (an expanded tensor): its values, contiguous
                tensor = values.reshape(spec.shape).to(dtype=dtype, device=device)
            built.append(tensor)
        else:  # random storage viewed with the recorded strides, overlapping ones included
            size = 1 + sum((n - 1) * s for n, s in zip(spec.shape, spec.stride))
            built.append(_random_storage(spec, dtype, size, device).as_strided(spec.shape, spec.stride))
    return built


def _random_storage(spec: Any, dtype: Any, size: int, device: Any) -> Any:
    """Data of the recorded range: integers uniform in it; floats normal with the recorded mean
    and spread, clamped to it (a kernel that exponentiates its input sees values it saw in the
    workload); unit normal without statistics."""
    import torch

    if dtype == torch.bool:
        return torch.randint(0, 2, (size,), device=device).bool()
    if not dtype.is_floating_point:
        low, high = int(spec.low or 0), int(spec.high or 0)
        return torch.randint(low, high + 1, (size,), device=device).to(dtype)
    data = torch.randn(size, device=device, dtype=torch.float32)
    if spec.mean is not None:
        data = data * spec.std + spec.mean
        data = data.clamp(spec.low, spec.high) if spec.low < spec.high else data.fill_(spec.low)
    return data.to(dtype)


def bound(role: str):
    """``role`` of the :class:`Replay` of the manifest folder the stages bind it to."""

    class Bound:
        def bind_manifest_root(self, root: str) -> Any:
            return _bound(root, role)

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            raise TuneError(f"aot_tune.record.replay:{role} is called through a manifest (the stages bind it to "
                            f"the manifest's folder); fix: name it in tuning.yaml")

        def __repr__(self) -> str:
            return f"aot_tune.record.replay:{role}"

    return Bound()


@functools.lru_cache(maxsize=None)
def _replay(root: str) -> Replay:
    return Replay(root)


@functools.lru_cache(maxsize=None)
def _bound(root: str, role: str) -> Any:
    """``role`` of the folder's :class:`Replay`, which also ``provided_kernel``s (the stages ask it
    for the kernel object before they import one: ``build.loading.load_kernel_module_attrs``)."""
    function = functools.partial(getattr(_replay(root), role))
    function.provided_kernel = _replay(root).provides
    return function


make_inputs = bound("make_inputs")
launch = bound("launch")
reference = bound("reference")
#: How a manifest names the recorded entries' reference (``aot_tune record`` writes it).
REFERENCE_REF = f"{__name__}:reference"


def why_imported(root: str, kernel_ref: str) -> str | None:
    """Why the stages import the library of recorded kernel ``kernel_ref`` under the manifest
    folder ``root``, or None where they rebuild it from its recorded source."""
    try:
        return _replay(str(root)).why_imported(kernel_ref)
    except TuneError as exc:  # a broken recording: the stages report it
        return str(exc)
