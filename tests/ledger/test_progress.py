"""The first scan's time left (issue 24 pt 5): none until it can mean something, then a steady one."""

from __future__ import annotations

from memd.ledger.progress import Eta, eta_text


def test_no_time_left_until_enough_is_read_then_a_steady_one() -> None:
    e = Eta(total=1_000_000, start=0.0)
    e.advance(1_000, 0.001)  # a tiny first burst, read very fast: no guess from it
    assert e.seconds_left(0.001) is None
    e.advance(10_000, 0.5)
    assert e.seconds_left(0.5) is None  # under 2 s
    e.advance(100_000, 2.5)  # 11 % in 2.5 s
    left = e.seconds_left(2.5)
    assert left is not None and 5 < left < 60, left  # ~20 s at the average rate, not days
    e.advance(0, 30.0)  # a long stall (a big session being read): the figure grows, boundedly
    stalled = e.seconds_left(30.0)
    assert stalled is not None and stalled < 3600, stalled
    assert eta_text(75) == "about 1 min 15 s left" and eta_text(None) == ""
