"""Aligned text tables and durations in words for the terminal (issue 24 pt 5; `memd.output`, `memd.clock`)."""

from __future__ import annotations

from datetime import timedelta, timezone

from memd.clock import duration_text, local_text
from memd.output import render as table


def test_a_wide_name_widens_its_column() -> None:
    lines = table(["NAME", "N"], [["短い名前", 1], ["x", 22]], right=[1])
    assert lines == ["NAME       N", "短い名前   1", "x         22"]  # 短い名前 takes 8 cells


def test_the_last_column_is_not_padded_and_none_is_a_dash() -> None:
    assert table(["A", "B"], [["x", None], ["longer", "y"]]) == ["A       B", "x       -", "longer  y"]


def test_local_times_carry_their_zone() -> None:
    tokyo = timezone(timedelta(hours=9), "JST")
    assert local_text("2026-11-20T09:00:20Z", tokyo) == "2026-11-20 18:00 JST"
    assert local_text("2026-11-20T09:00:20Z", tokyo, seconds=True) == "2026-11-20 18:00:20 JST"
    assert local_text(None) == "-" and local_text("not a time") == "not a time"


def test_durations_in_words() -> None:
    assert [duration_text(s) for s in (0.85, 5, 65, 3600, 3660, 7205, 90061, 585596 * 60)] == [
        "850 ms", "5 s", "1 min 5 s", "1 h", "1 h 1 min", "2 h", "1 d 1 h", "406 d 15 h"]  # fmt: skip
