"""Relative dates made absolute (pure)."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from jobs.dream.dates import _DATE_WORDS, _EN_DATES, _absolutize_spans, _may_hold_a_date, absolutize

D = date(2026, 11, 27)  # a Friday

DATES = [
    ("We ship tomorrow.", "We ship on 2026-11-28."),
    ("Today we froze main", "On 2026-11-27 we froze main"),
    ("frozen until tomorrow", "frozen until 2026-11-28"),
    ("fixed yesterday, see today's notes", "fixed on 2026-11-26, see 2026-11-27's notes"),
    ("the release is next Monday", "the release is on Monday 2026-11-30"),
    ("decided last Friday", "decided on Friday 2026-11-20"),
    ("agreed last week", "agreed in the week of 2026-11-16"),
    ("due next month", "due in 2026-12"),
    ("3 days ago it broke", "on 2026-11-24 it broke"),
    ("review in 2 days", "review on 2026-11-29"),
    ("the day after tomorrow", "on 2026-11-29"),
    ("我们明天发布，昨天冻结", "我们2026-11-28发布，2026-11-26冻结"),
    ("上周决定", "2026-11-16 那一周决定"),
    ("keep `today` and ```\ntomorrow\n``` as code", "keep `today` and ```\ntomorrow\n``` as code"),
    ("todays and yesterdays-ish words: nothing", "todays and yesterdays-ish words: nothing"),
]


@pytest.mark.parametrize("before,after", DATES)
def test_absolutize(before: str, after: str) -> None:
    got, n = absolutize(before, D)
    assert got == after
    assert (n > 0) == (before != after)
    assert absolutize(got, D) == (got, 0)  # idempotent


_PIECES = ["today", "Tonight", "YESTERDAY", "tomorrow", "the day before yesterday", "the day after tomorrow",
           "3 days ago", "1 day ago", "in 2 days", "in 1 day", "last week", "Next Month", "this monday",
           "next Friday", "last sunday", "today's", "until", "on", "we", "ship", "day", "week", "month",
           "todays", "weekly", "monthly", "Mondays", "`today`", "```", "\n", " ", ",", ".", "-", "'s", "x"]  # fmt: skip


@hsettings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=14), st.text(st.characters(max_codepoint=127), max_size=40))
def test_the_ascii_shortcut_replaces_what_the_regexes_replace(pieces: list[str], noise: str) -> None:
    """ASCII text without a date word is returned untouched without a regex pass: the same answer
    the regexes give, on text made of date phrases, their near misses and random ASCII."""
    for text in (" ".join(pieces), noise, " ".join(pieces) + noise, noise + "".join(pieces)):
        assert absolutize(text, D) == _absolutize_spans(text, D), text


def test_every_english_date_holds_a_date_word() -> None:
    """What the shortcut relies on: each match of the English regex holds one of `_DATE_WORDS`."""
    text = " ".join(_PIECES) + " " + " ".join(f"{w} {u}" for w in ("last", "next", "this")
                                              for u in ("week", "month", "monday", "tuesday", "wednesday", "thursday",
                                                        "friday", "saturday", "sunday"))  # fmt: skip
    matches = [m.group(0).lower() for m in _EN_DATES.finditer(text)]
    assert len(matches) > 30
    assert all(_may_hold_a_date(m) for m in matches), matches
    assert all(_may_hold_a_date(f"x {w} y") for w in _DATE_WORDS) and not _may_hold_a_date("we ship on the eve of the release")
