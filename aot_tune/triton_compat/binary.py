"""What a compiled kernel's binary says about its resources, read with no GPU.

What this relies on (triton 3.6 to 3.9), and why:

* The wheel ships ``cuobjdump`` (``knobs.nvidia.cuobjdump``, 3.6 and 3.9); ``-res-usage`` on a
  cubin gives registers, stack and local memory per function, with no GPU.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceUsage:
    """Per-thread resources of a compiled kernel, read from its cubin (no GPU needed)."""

    registers: int
    stack_bytes: int
    local_bytes: int

    @property
    def spills(self) -> int:
        """Spilled 32-bit words: local memory per thread / 4, what Triton reports as ``n_spills``
        (there from the driver's local-size attribute, which covers the stack frame)."""
        return (self.stack_bytes + self.local_bytes) // 4


def cuobjdump_path() -> str | None:
    """The cuobjdump shipped with the Triton wheel (or TRITON_CUOBJDUMP_PATH), if there is one."""
    try:
        from triton import knobs

        return knobs.nvidia.cuobjdump.path
    except Exception:  # absent from this wheel, or not runnable here
        return None


def resource_usage(cubin: bytes, function: str) -> ResourceUsage | str:
    """Registers, stack and local memory of ``function`` in a cubin, or why they are unknown."""
    import re
    import subprocess
    import tempfile

    tool = cuobjdump_path()
    if tool is None:
        return "no cuobjdump in this Triton installation"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        try:
            out = subprocess.run([tool, "-res-usage", handle.name], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"cuobjdump failed: {exc}"
    match = re.search(rf"Function {re.escape(function)}:\s*\n\s*(.*)", out.stdout)
    if out.returncode != 0 or match is None:
        return f"cuobjdump -res-usage gave no line for {function} (exit {out.returncode})"
    fields = dict(re.findall(r"([A-Z]+):(\d+)", match.group(1)))
    try:
        return ResourceUsage(int(fields["REG"]), int(fields.get("STACK", 0)), int(fields.get("LOCAL", 0)))
    except KeyError:
        return f"cuobjdump -res-usage printed no REG count for {function}"
