"""What aot_tune knows of each dtype and dtype combination, without importing torch.

A manifest dtype is a torch dtype name (``float8_e4m3fn``, ``int8``, ...) or the name of a
*combination* the manifest declares (``fp8_w8a8: {a: float8_e4m3fn, b: float8_e4m3fn, out:
bfloat16}``): per-argument dtypes of the launch under one name, which is what records, tables
and runtime keys hold, as vLLM's ``dtype=fp8_w8a8``. Bytes per element feed ``dtype_bytes`` in
cost expressions; the tolerance defaults decide the correctness check; the interpreter set says
which dtypes the CPU interpreter cannot compute correctly (they are compiled, never measured
there).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

#: Every torch float and integer dtype by name, with its bytes per element.
DTYPE_BYTES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e4m3fnuz": 1, "float8_e5m2": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1,
}  # fmt: skip

#: Other spellings a manifest may use.
ALIASES: dict[str, str] = {
    "fp64": "float64", "double": "float64", "fp32": "float32", "float": "float32",
    "fp16": "float16", "half": "float16", "bf16": "bfloat16",
    "fp8_e4m3": "float8_e4m3fn", "e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "e5m2": "float8_e5m2",
    "i8": "int8", "u8": "uint8", "int": "int32", "long": "int64",
}  # fmt: skip

#: ||out - ref|| / ||ref|| a config may reach, per dtype (a manifest's ``tolerance`` overrides).
#: Integer outputs are exact; fp8 keeps 3 mantissa bits (e4m3) or 2 (e5m2).
TOLERANCE: dict[str, float] = {
    "float64": 1e-6, "float32": 2e-3, "float16": 1e-2, "bfloat16": 3e-2,
    "float8_e4m3fn": 1e-1, "float8_e4m3fnuz": 1e-1, "float8_e5m2": 2e-1, "float8_e5m2fnuz": 2e-1,
    "float8_e8m0fnu": 5e-1,
}  # fmt: skip

#: Dtypes the Triton interpreter cannot compute correctly on the CPU: bfloat16 is held as
#: uint16 there (arithmetic on the raw bits), and numpy has no fp8.
INTERPRETER_UNSUPPORTED = frozenset({"bfloat16", *(name for name in DTYPE_BYTES if name.startswith("float8"))})


@dataclass(frozen=True)
class DtypeCombo:
    """Per-argument dtypes of a launch under one name (e.g. ``fp8_w8a8``)."""

    name: str
    args: tuple[tuple[str, str], ...]  # (launch argument, torch dtype name), in manifest order
    where: str = field(default="", compare=False)  # its manifest key and line, for errors
    line: int = field(default=0, compare=False)

    def as_dict(self) -> dict[str, str]:
        return dict(self.args)


def canonical(name: str) -> str | None:
    """A torch dtype name for a manifest spelling, or None if it names no dtype."""
    name = name.lower()
    return name if name in DTYPE_BYTES else ALIASES.get(name)


def members(dtype: str, combos: Mapping[str, DtypeCombo]) -> tuple[str, ...]:
    """The torch dtypes a manifest dtype stands for: itself, or its combination's."""
    combo = combos.get(dtype)
    return tuple(dict.fromkeys(d for _, d in combo.args)) if combo else (dtype,)


def element_bytes(dtype: str, combos: Mapping[str, DtypeCombo]) -> int:
    """``dtype_bytes`` of cost expressions: a combination's is its first argument's."""
    return DTYPE_BYTES[members(dtype, combos)[0]]


def tolerance(dtype: str, combos: Mapping[str, DtypeCombo], overrides: Mapping[str, float]) -> float:
    """The manifest's tolerance for ``dtype``, else the loosest default among its members."""
    if dtype in overrides:
        return overrides[dtype]
    return max(TOLERANCE.get(d, 0.0) for d in members(dtype, combos))


def interpreter_runs(dtype: str, combos: Mapping[str, DtypeCombo]) -> bool:
    """Whether the CPU interpreter computes ``dtype`` (every member of a combination) correctly."""
    return not INTERPRETER_UNSUPPORTED.intersection(members(dtype, combos))
