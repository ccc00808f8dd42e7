"""What a device worker does besides measuring: profiling its batches where asked."""
from __future__ import annotations


def test_a_device_worker_profiles_its_batches_where_asked(tmp_path, monkeypatch):
    import pstats

    from aot_tune.bench.local.worker import PROFILE_ENV, profiled

    with profiled("device0"):  # not asked: nothing written
        sum(range(1000))
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "prof"))
    with profiled("device0"):
        sorted(range(1000), key=lambda n: -n)
    (written,) = (tmp_path / "prof").iterdir()
    assert written.name.startswith("device0-") and written.suffix == ".pstats"
    assert any("sorted" in str(func) for func in pstats.Stats(str(written)).stats)
