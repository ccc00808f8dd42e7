"""Manifest text written by aot_tune (``doit adopt --write``, ``aot_tune record``): YAML that the
loader reads back as the values it was made from, and entries appended where they belong."""
from __future__ import annotations

import json
import re
from typing import Any


def flow_mapping(mapping: dict) -> str:
    """A mapping as a YAML flow mapping: names are identifiers, and a JSON scalar is a YAML one."""
    return "{" + ", ".join(f"{k}: {yaml_scalar(v)}" for k, v in mapping.items()) + "}"


def yaml_scalar(value: Any) -> str:
    """YAML 1.1 reads a float only with a dot (``1e-05`` would be a string): ``1.0e-05``."""
    text = json.dumps(value)
    if isinstance(value, float) and "e" in text and "." not in text:
        mantissa, _, exponent = text.partition("e")
        text = f"{mantissa}.0e{exponent if exponent[0] in '+-' else '+' + exponent}"
    return text


def kernels_is_last(text: str) -> bool:
    """Whether ``kernels:`` is the manifest's last top-level key, so entries append at its end."""
    top = [line for line in text.splitlines() if re.match(r"[^\s#]", line)]
    return bool(top) and top[-1].startswith("kernels:")
