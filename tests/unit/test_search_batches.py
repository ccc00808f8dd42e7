"""The bench stage's budgeted path measures each batch a search chooses as one pipelined batch on
the device, shares its wall time out like the exhaustive path, and reuses earlier probes."""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from aot_tune.search import strategies as search
from aot_tune.bench.runner import ConfigMeasurement
from aot_tune.manifest import BenchSettings, SearchSettings
from aot_tune.space import Config
from aot_tune.pipeline import searching

CONFIGS = [Config.from_dict({"A": a, "B": b, "C": c})
           for a, b, c in itertools.product([16, 32, 64, 128], [16, 32, 64, 128], [1, 2, 4])]


def fake_time(config_id: str) -> float:
    p = next(c for c in CONFIGS if c.id == config_id).as_dict()
    return math.exp(0.3 * (math.log2(p["A"]) - 5) ** 2 + 0.2 * (math.log2(p["B"]) - 6) ** 2 + 0.1 * p["C"])


class Lease:
    """A device hold that answers each batch at once; records the batches and their timing lengths."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, float]]] = []
        self.warmups: list[list[float]] = []
        self.shares: list[list[float]] = []

    def lease(self, upcoming=None) -> "Lease":
        return self

    def measure_all(self, requests, timeout_s, more=None):
        self.batches.append([(r.config_id, r.settings.rep_ms) for r in requests])
        self.warmups.append([r.settings.warmup_ms for r in requests])
        self.shares.append([r.share for r in requests])
        time.sleep(0.02)  # the batch's wall time, at least
        # results come as they complete, not in request order
        return [ConfigMeasurement(r.config_id, "ok", times_ms=[fake_time(r.config_id)] * 12, method="events",
                                  phase_seconds={"check": 0.001, "warmup": 0.002, "capture": 0.005,
                                                 "timed": r.settings.rep_ms * fake_time(r.config_id) / 1e3})
                for r in reversed(requests)]


@dataclass(frozen=True)
class FakeRequest:
    config_id: str
    settings: BenchSettings
    share: float = 1.0


class Session:
    """A bench stage's budgeted path with every compile valid and no seeding shapes."""

    compiles = SimpleNamespace(invalid_configs=lambda kp, unit, configs: {})

    def search(self, kp, unit, hold, previous, device):
        request = lambda kp, unit, config, settings, device: FakeRequest(config.id, settings)  # noqa: E731
        return searching.search_shape(self.compiles, kp, unit, hold, previous, device, request, [])


def session_and_unit(budget: int):
    session = Session()
    kp = SimpleNamespace(spec=SimpleNamespace(bench=BenchSettings(warmup_ms=2, rep_ms=18, l2_flush=True,
                                                                  l2_flush_bytes=None)))
    unit = SimpleNamespace(search=SearchSettings("surrogate", budget, seed=1), configs=tuple(CONFIGS),
                           probes=tuple(CONFIGS), shape=(1024,), compiles_on_demand=False)  # compiled already
    return session, kp, unit, SimpleNamespace(backend="cuda")


def test_a_surrogate_search_reaches_the_device_in_batches_with_shared_out_seconds():
    session, kp, unit, device = session_and_unit(20)
    lease = Lease()
    entries, fresh, info = session.search(kp, unit, lease, None, device)
    sizes = [len(b) for b in lease.batches]
    assert sizes == [search.INITIAL_DESIGN, search.BATCH, search.BATCH, search.BATCH, search.FINALISTS]
    assert all(rep == 18 * search.SCREEN_SHARE for b in lease.batches[:-1] for _, rep in b)
    assert all(rep == 18 for _, rep in lease.batches[-1])  # the finalists in full
    # a screening timing's warm-up shrinks with it; the finalists warm up in full
    assert all(w == pytest.approx(2 * search.SCREEN_SHARE) for b in lease.warmups[:-1] for w in b)
    assert lease.warmups[-1] == [2] * search.FINALISTS
    # and the engine is told the share, so that its fewest samples scale too
    assert all(s == search.SCREEN_SHARE for b in lease.shares[:-1] for s in b) and lease.shares[-1] == [1.0] * 3
    assert info.configs_measured == 20 and len(fresh) == 20 + search.FINALISTS and info.reused == 0
    short = [m for m in entries.values() if m.short_rep_ms]
    full = [m for m in entries.values() if not m.short_rep_ms]
    assert len(short) == 20 - search.FINALISTS and len(full) == search.FINALISTS
    # each batch's wall time is shared out over its configs in proportion to their own phases
    # (the capture apart, as the exhaustive path shares it), so a batch's seconds add up to its wall
    design = [entries[c] for c, _ in lease.batches[0] if entries[c].short_rep_ms]  # not timed again since
    assert len(design) >= 2
    own = [m.phases.check + m.phases.warmup + m.phases.timed for m in design]
    for m, o in zip(design, own):
        assert m.seconds / design[0].seconds == pytest.approx(o / own[0])
    finals = [entries[c] for c, _ in lease.batches[-1]]
    assert sum(m.seconds for m in finals) >= 0.02 and info.seconds >= 0.02 * len(lease.batches)


def test_probes_an_earlier_record_holds_are_reused_and_the_rest_still_go_as_batches():
    session, kp, unit, device = session_and_unit(20)
    first = Lease()
    entries, _, _ = session.search(kp, unit, first, None, device)
    previous = SimpleNamespace(measurements=list(entries.values()))
    again = Lease()
    _, fresh, info = session.search(kp, unit, again, previous, device)
    # a record keeps each config's latest measurement: the finalists' screening timings are gone,
    # so only they are measured again (short, in the batches they were chosen in)
    finalists = {m.config.id for m in entries.values() if not m.short_rep_ms}
    again_ids = [c for b in again.batches for c, _ in b]
    assert set(again_ids) == finalists and len(again_ids) == len(fresh) == search.FINALISTS
    assert info.reused == 20 and all(rep < 18 for b in again.batches for _, rep in b)
    unit = SimpleNamespace(**{**vars(unit), "search": SearchSettings("surrogate", 24, seed=1)})
    more = Lease()
    _, fresh, info = session.search(kp, unit, more, previous, device)
    assert fresh and all(len(b) <= search.BATCH or b == more.batches[-1] for b in more.batches)
    assert sum(map(len, more.batches)) == len(fresh) and info.reused + len(fresh) >= 24 + search.FINALISTS
