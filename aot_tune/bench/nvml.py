"""GPU clocks and the driver version straight from NVML, for the provenance of every measurement.

Read through ctypes from the driver's own libnvidia-ml, because the alternatives cost too much
per measurement (an nvidia-smi process takes about 50 ms) or are not installed everywhere
(pynvml). Every failure degrades to "unknown" (0 MHz, empty driver): provenance must never stop
a benchmark.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
_SUCCESS = 0


@dataclass(frozen=True)
class ClockReading:
    sm_mhz: int = 0
    memory_mhz: int = 0


class GpuClocks:
    """Reads one GPU's current SM and memory clocks; found by UUID, so CUDA_VISIBLE_DEVICES
    renumbering cannot point it at another GPU."""

    def __init__(self, uuid: str) -> None:
        self._nvml = None
        self._handle = ctypes.c_void_p()
        self.driver = ""
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            if nvml.nvmlInit_v2() != _SUCCESS:
                return
            name = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
            if nvml.nvmlDeviceGetHandleByUUID(name.encode(), ctypes.byref(self._handle)) != _SUCCESS:
                return
            buffer = ctypes.create_string_buffer(96)
            if nvml.nvmlSystemGetDriverVersion(buffer, ctypes.c_uint(96)) == _SUCCESS:
                self.driver = buffer.value.decode()
            self._nvml = nvml
        except (OSError, AttributeError):
            self._nvml = None

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def read(self) -> ClockReading:
        if self._nvml is None:
            return ClockReading()
        return ClockReading(self._clock(NVML_CLOCK_SM), self._clock(NVML_CLOCK_MEM))

    def _clock(self, kind: int) -> int:
        value = ctypes.c_uint()
        if self._nvml.nvmlDeviceGetClockInfo(self._handle, ctypes.c_int(kind), ctypes.byref(value)) != _SUCCESS:
            return 0
        return int(value.value)
