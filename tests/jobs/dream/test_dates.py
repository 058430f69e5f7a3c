"""Relative dates made absolute (pure)."""

from __future__ import annotations

from datetime import date

import pytest

from jobs.dream.dates import absolutize

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
