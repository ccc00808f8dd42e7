"""Device keys: one stable, readable name per GPU model, shared by the tuner and the runtime.

Tables are keyed by model, not by compute capability, because an H100 and an H200 share sm90
yet differ in memory bandwidth and L2, so their best configs differ. Variants that behave the
same are folded into one key; form factors that do not (H100 SXM and PCIe) stay apart.
Imports nothing heavy: the runtime calls this on the first tuned launch.
"""
from __future__ import annotations

import re

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


def device_key(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100-sxm'; unknown models become a slug of their name."""
    lowered = name.lower()
    for pattern, key in _FAMILIES:
        if re.search(pattern, lowered):
            return key
    slug = re.sub(r"[^a-z0-9]+", "-", lowered.replace("nvidia", "")).strip("-")
    return slug or "unknown-gpu"
