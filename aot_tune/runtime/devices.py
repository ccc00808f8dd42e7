"""Device keys: one stable, readable name per GPU model, shared by the tuner and the runtime.

Tables are keyed by model, not by compute capability, because an H100 and an H200 share sm90
yet differ in memory bandwidth and L2, so their best configs differ. Variants that behave the
same are folded into one key; form factors that do not (H100 SXM and PCIe) stay apart.
Imports nothing heavy: the runtime calls this on the first tuned launch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

INTERPRETER = "interpreter"

# (pattern on the lower-cased device name, key); first match wins, so specific before generic.
_FAMILIES = (
    (r"gh200", "gh200"),
    (r"h200", "h200"),
    (r"h100.*pcie", "h100-pcie"),
    (r"h100.*nvl", "h100-nvl"),
    (r"h100", "h100-sxm"),
    (r"h800", "h800"),
    (r"h20\b", "h20"),
    (r"a100.*pcie", "a100-pcie"),
    (r"a100", "a100-sxm"),
    (r"a800", "a800"),
    (r"l40s", "l40s"),
    (r"l40\b", "l40"),
    (r"l4\b", "l4"),
    (r"a10g", "a10g"),
    (r"gb200", "gb200"),
    (r"b200", "b200"),
)


#: The keys of the models named above, and the interpreter's: what a manifest's ``devices`` names.
KNOWN_KEYS = (INTERPRETER, *dict.fromkeys(key for _, key in _FAMILIES))


def device_key(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100-sxm'; unknown models become a slug of their name."""
    lowered = name.lower()
    for pattern, key in _FAMILIES:
        if re.search(pattern, lowered):
            return key
    slug = re.sub(r"[^a-z0-9]+", "-", lowered.replace("nvidia", "")).strip("-")
    return slug or "unknown-gpu"


@dataclass(frozen=True)
class DevicePeak:
    """Datasheet peaks of one GPU model (dense, boost clock): the floor a time is judged against.

    ``matrix_tflops`` per dtype: the tensor-core rate for float16 and bfloat16 (fp32
    accumulation), for fp8 and int8 where the GPU has them (twice the float16 rate on Hopper;
    int8 only on Ampere), and the plain fp32 rate for float32, because the repository's kernels and
    torch's defaults keep fp32 exact (no TF32). A datasheet rather than a measured peak: it
    costs no GPU time, is the same on every run and machine (so a report renders from a cache
    on a CPU), and a measured matmul peak would be cuBLAS itself, the vendor row it is meant to
    judge. Sustained clocks under a power cap sit below these (each record holds its clocks).
    """

    matrix_tflops: dict[str, float]
    memory_gbps: float
    source: str


def _peak(fp16: float, fp32: float, gbps: float, source: str, fp8: bool = True) -> DevicePeak:
    """Hopper runs fp8 (e4m3, e5m2) and int8 at twice the float16 rate; Ampere int8 only (fp8=False)."""
    low = {"int8": 2 * fp16, **({"float8_e4m3fn": 2 * fp16, "float8_e5m2": 2 * fp16} if fp8 else {})}
    return DevicePeak({"float16": fp16, "bfloat16": fp16, "float32": fp32, **low}, gbps, source)


# (pattern on the lower-cased device name, peak); first match wins. Models not listed get no floor.
_PEAKS = (
    (r"gh200", None),  # HBM3 (4.0 TB/s) and HBM3e (4.9 TB/s) parts share a name prefix
    (r"h200.*nvl", _peak(835.5, 60.0, 4800, "NVIDIA H200 NVL datasheet")),
    (r"h200", _peak(989.5, 66.9, 4800, "NVIDIA H200 SXM datasheet")),
    (r"h100.*pcie", _peak(756.5, 51.2, 2000, "NVIDIA H100 PCIe datasheet")),
    (r"h100.*nvl", _peak(835.5, 60.0, 3900, "NVIDIA H100 NVL datasheet")),
    (r"h100", _peak(989.5, 66.9, 3350, "NVIDIA H100 SXM datasheet")),
    (r"a100.*pcie.*40gb", _peak(312.0, 19.5, 1555, "NVIDIA A100 40GB PCIe datasheet", fp8=False)),
    (r"a100.*pcie", _peak(312.0, 19.5, 1935, "NVIDIA A100 80GB PCIe datasheet", fp8=False)),
    (r"a100.*40gb", _peak(312.0, 19.5, 1555, "NVIDIA A100 40GB SXM datasheet", fp8=False)),
    (r"a100", _peak(312.0, 19.5, 2039, "NVIDIA A100 80GB SXM datasheet", fp8=False)),
)


def device_peak(name: str) -> DevicePeak | None:
    """The datasheet peaks of the GPU called ``name``; None for the interpreter and unknown models."""
    lowered = name.lower()
    for pattern, peak in _PEAKS:
        if re.search(pattern, lowered):
            return peak
    return None
