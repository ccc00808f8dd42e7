"""The machine's run history (aot_tune.runs.history): where it lives, what it keeps, and that a
file it cannot read costs one warning line, not a run."""
from __future__ import annotations

import json

import pytest

from aot_tune.runs import history
from aot_tune.runs.history import HistoryEntry, MachineKey, append_history, history_path, read_history

KEY = MachineKey("interpreter", "interpreter", "triton 3.9.0, torch 2.13.0", 2, 2)


def entry(key: MachineKey = KEY, n: int = 0, **observed) -> HistoryEntry:
    return HistoryEntry(key, f"2026-11-27T00:00:{n:02d}+00:00", [f"kernel{n}"], 10.0 + n,
                        observed or {"startup_s": 4.0 + n}, {"wall_s": 9.0})


@pytest.mark.parametrize("environ, expected", [
    ({"AOT_TUNE_HISTORY": "/data/runs.json", "XDG_CACHE_HOME": "/xdg"}, "/data/runs.json"),
    ({"XDG_CACHE_HOME": "/xdg", "HOME": "/home/me"}, "/xdg/aot_tune/history.json"),
    ({"XDG_CACHE_HOME": "relative/is/ignored", "HOME": "/home/me"}, "/home/me/.cache/aot_tune/history.json"),
    ({"HOME": "/home/me"}, "/home/me/.cache/aot_tune/history.json"),
])
def test_the_history_lives_in_the_users_cache_unless_the_variable_moves_it(environ, expected):
    assert str(history_path(environ)) == expected


@pytest.mark.parametrize("value", ["", "0", "off", "OFF", "none", "false", "no"])
def test_the_variable_turns_it_off(tmp_path, monkeypatch, value):
    monkeypatch.setenv("AOT_TUNE_HISTORY", value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert history_path() is None
    assert append_history(entry()) is False and read_history() == []
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere


def test_runs_written_are_read_back_oldest_first(tmp_path, monkeypatch):
    monkeypatch.setenv("AOT_TUNE_HISTORY", str(tmp_path / "deep" / "history.json"))
    first, second = entry(n=1), entry(MachineKey("cuda", "h100-sxm", "triton 3.6.0, torch 2.9.0", 64, 8), n=2)
    assert append_history(first) and append_history(second)
    assert read_history() == [first, second]
    assert [p.name for p in (tmp_path / "deep").iterdir() if not p.name.endswith(".lock")] == ["history.json"]


def test_a_file_that_is_not_a_history_is_ignored_with_one_warning_and_replaced(tmp_path):
    path = tmp_path / "history.json"
    path.write_text('{"version": 1, "runs": [{"key": ')  # torn
    warnings = []
    assert read_history(path, warnings.append) == [] and read_history(path, warnings.append) == []
    assert len(warnings) == 1 and str(path) in warnings[0] and "AOT_TUNE_HISTORY=off" in warnings[0]
    assert append_history(entry(), path, warnings.append)
    assert read_history(path, warnings.append) == [entry()] and len(warnings) == 1


@pytest.mark.parametrize("text", ['[1, 2]', '{"version": 99, "runs": []}', '"runs"', '\x00\x01'])
def test_foreign_files_and_other_versions_read_as_empty(tmp_path, text):
    path = tmp_path / "history.json"
    path.write_text(text)
    warnings = []
    assert read_history(path, warnings.append) == [] and len(warnings) == 1


def test_an_entry_that_is_not_one_is_skipped_and_the_others_kept(tmp_path):
    path = tmp_path / "history.json"
    bad_number = {**entry(n=4).to_dict(), "observed": {"startup_s": "soon"}}
    not_finite = {**entry(n=5).to_dict(), "observed": {"startup_s": float("nan")}}  # JSON's NaN
    path.write_text(json.dumps({"version": 1, "runs": [entry(n=3).to_dict(), {"key": {}}, bad_number, 7, not_finite]}))
    assert read_history(path) == [entry(n=3)]


def test_the_history_is_bounded_per_key_and_in_all(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "KEPT_PER_KEY", 3)
    monkeypatch.setattr(history, "KEPT", 5)
    path = tmp_path / "history.json"
    other = MachineKey("cuda", "h100-sxm", "triton 3.9.0, torch 2.13.0", 16, 16)
    for n in range(6):
        append_history(entry(n=n), path)
    assert [e.started_at[-8:-6] for e in read_history(path)] == ["03", "04", "05"]  # the newest 3 of the key
    for n in range(10, 14):
        append_history(entry(other, n=n), path)
    kept = read_history(path)
    assert len(kept) == 5 and [e.key for e in kept] == [KEY, KEY, other, other, other]
    assert [e.started_at[-8:-6] for e in kept] == ["04", "05", "11", "12", "13"]
    assert path.stat().st_size < 5 * 600  # compact: a few hundred bytes a run


def test_the_closest_comparable_runs_are_taken():
    same = entry(n=1)
    toolchain = entry(MachineKey(KEY.backend, KEY.device, "triton 3.6.0, torch 2.9.0", 2, 2), n=2)
    workers = entry(MachineKey(KEY.backend, KEY.device, KEY.toolchain, 2, 1), n=3)
    other_machine = entry(MachineKey(KEY.backend, KEY.device, KEY.toolchain, 64, 2), n=4)
    other_device = entry(MachineKey("cuda", "h100-sxm", KEY.toolchain, 2, 2), n=5)
    runs = [same, toolchain, workers, other_machine, other_device]
    assert history.comparable(runs, KEY) == ([same], 3)
    assert history.comparable(runs[1:], KEY) == ([toolchain], 2)
    assert history.comparable(runs[2:], KEY) == ([workers], 1)
    assert history.comparable(runs[3:], KEY) == ([], 0)
