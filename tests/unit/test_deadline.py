"""The compile deadline relative to a batch's valid compiles."""
from __future__ import annotations

import math

from aot_tune.build.deadline import CompileDeadline


def test_no_deadline_until_enough_peers_finished_or_when_off():
    assert CompileDeadline(peers=3).seconds([1.0, 2.0]) == math.inf
    assert CompileDeadline(factor=0).seconds([1.0] * 20) == math.inf


def test_the_deadline_is_a_factor_over_the_median_and_never_under_the_floor():
    assert CompileDeadline(factor=10, min_s=20, peers=3).seconds([1.0, 3.0, 50.0]) == 30.0
    assert CompileDeadline(factor=10, min_s=20, peers=3).seconds([0.5, 1.0, 1.5]) == 20.0
