"""Tests for tools.studies.forecast_check: reading a run's own estimates of its end from its lines."""
from __future__ import annotations

import pytest

from tools.studies.forecast_check import estimates, seconds

# lines of a GPU run (fla-core's row kernels, 2026-11-28), as the tool timestamps them
LINES = [
    (1.2, "aot_tune: planning"),
    (17.26, "[compile] 1/480 done, 0.5s elapsed, about 10.2s left (the run: about 34.8s)  swiglu_fwd_kernel sm90 ok"),
    (32.22, "[compile] 202/480 done, 15.5s elapsed, about 9.9s left (the run: about 29.8s)  layer_norm sm90 ok"),
    (36.84, "[bench] 1/72 done, 20.1s elapsed, about 25.5s left (the run: about 26.0s)  swiglu_fwd_kernel best a0ef"),
    (39.04, "[bench] 5/72 done, 22.3s elapsed, about 24.8s left (the run: about 1m05s)  swiglu_fwdbwd best e28b"),
    (62.5, "[bench] 72/72 done, 45.8s elapsed  layer_norm best 77aa"),
]


def test_durations_read_as_the_progress_lines_write_them() -> None:
    assert seconds("12.5s") == 12.5 and seconds("3m04s") == 184 and seconds("1h02m") == 3720


def test_each_estimate_is_judged_against_what_was_left_with_the_share_of_the_work_done() -> None:
    found = estimates(LINES, wall=62.92, tasks=552)
    assert [e.at for e in found] == [17.26, 32.22, 36.84, 39.04]  # the last line says nothing of what is left
    assert [e.said for e in found] == [34.8, 29.8, 26.0, 65.0]
    assert found[1].left == pytest.approx(62.92 - 32.22)
    assert found[1].error == pytest.approx(29.8 / (62.92 - 32.22) - 1)
    # the tasks the stages' lines count done, of the dry run's 480 compiles and 72 benches
    assert found[1].share == pytest.approx(202 / 552) and found[3].share == pytest.approx((202 + 5) / 552)


def test_stages_that_grew_past_the_dry_runs_count_are_judged_by_their_own_totals() -> None:
    found = estimates(LINES, wall=62.92, tasks=100)
    assert found[2].share == pytest.approx((202 + 1) / (480 + 72))
