"""Seats as a cluster uses them: workers that join and leave while bench tasks hold or wait for
one (the local pool's grants are tests/unit/test_prefetch.py's)."""
from __future__ import annotations

import threading
import time

from aot_tune.bench.seats import Seats


def test_with_no_device_left_a_polling_take_says_so_instead_of_waiting():
    seats = Seats()
    assert seats.take(poll_s=0.01, refresh=lambda: None) is None
    seats.join("tls://a")
    assert seats.take(poll_s=0.01, refresh=lambda: None) == "tls://a"


def test_a_waiting_take_gets_a_device_that_joins_while_it_waits():
    seats = Seats(["tls://a"])
    assert seats.take() == "tls://a"
    refreshed = []

    def refresh() -> None:  # the cluster's look at its members finds a new worker
        refreshed.append(True)
        if len(refreshed) == 3:
            seats.join("tls://b")

    got = []
    waiter = threading.Thread(target=lambda: got.append(seats.take(poll_s=0.01, refresh=refresh)))
    waiter.start()
    waiter.join(5)
    assert got == ["tls://b"] and len(refreshed) >= 3


def test_a_device_that_left_is_never_granted_again_even_when_given_back():
    seats = Seats(["tls://a", "tls://b"])
    held = seats.take()
    seats.leave(held)
    seats.give_back(held)  # the task that held it ends: nothing to give back
    assert seats.members() == ("tls://b",)
    assert seats.take() == "tls://b"
    got = []
    waiter = threading.Thread(target=lambda: got.append(seats.take(poll_s=0.01, refresh=lambda: None)))
    waiter.start()
    time.sleep(0.05)
    assert got == []  # b is held: it waits, a is gone
    seats.leave("tls://b")
    waiter.join(5)
    assert got == [None]  # no device left at all


def test_a_take_interrupted_while_it_waits_leaves_no_device_granted_to_nobody():
    seats = Seats(["tls://a"])
    assert seats.take() == "tls://a"

    def broken() -> None:
        raise RuntimeError("the scheduler went away")

    try:
        seats.take(poll_s=0.01, refresh=broken)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the refresh's error should reach the caller")
    seats.give_back("tls://a")
    assert seats._idle == ["tls://a"] and seats._waiting == []  # not granted to the abandoned ticket
