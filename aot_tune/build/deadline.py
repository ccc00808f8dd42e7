"""The compile deadline: a config far slower to compile than its peers in the same batch is
recorded as ``timeout`` (never chosen, reported) instead of holding the compile stage, and the
benches waiting on it, for one straggler. Relative, because what is slow depends on the host
and the kernel: ``factor`` times the median compile time of the batch's valid compiles, once
``peers`` of them have finished, and never under ``min_s``."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class CompileDeadline:
    factor: float = 10.0
    min_s: float = 20.0
    peers: int = 8

    def seconds(self, peer_seconds: list[float]) -> float:
        """The deadline given the compile times of the valid compiles finished so far (inf until
        there are ``peers`` of them, or with a factor of 0: no deadline)."""
        if self.factor <= 0 or len(peer_seconds) < self.peers:
            return math.inf
        return max(self.min_s, self.factor * statistics.median(peer_seconds))

    def describe(self) -> str:
        if self.factor <= 0:
            return "off"
        return f"{self.factor:g}x the median valid compile, at least {self.min_s:g} s, after {self.peers} compiles"
