"""Near duplicates and the exact candidate filter (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from jobs.dream.duplicates import _candidates, near_duplicate_groups, similarity, tokens
from tests.jobs.dream.helpers import (
    mem,
)


def test_near_duplicates_are_grouped_by_type_and_newest_first() -> None:
    a = mem("tabs", "feedback", "indent with tabs", "Always indent with tabs in this repo. Why: history.", 100)
    b = mem("tabs-2", "feedback", "Indent with TABS", "Always indent with tabs in this repo!  Why: history", 300)
    c = mem("tabs-user", "user", "indent with tabs", "Always indent with tabs in this repo. Why: history.", 200)
    x = mem("deploy", "feedback", "deploy on fridays", "Never deploy on Fridays; the on-call is thin.", 50)
    groups = near_duplicate_groups([a, b, c, x])
    assert [[m.name for m in g] for g in groups] == [["tabs-2", "tabs"]]
    assert similarity(tokens("a b c d e f g h i j"), tokens("a b c d e f g h i k")) == pytest.approx(0.9)
    assert near_duplicate_groups([a, mem("t3", "feedback", "tabs", "completely different words here", 400)]) == []


@hsettings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=14), min_size=2, max_size=9))
def test_prefix_filter_never_misses_a_similar_pair(docs: list[list[str]]) -> None:
    """The candidate filter is exact: every pair at or over the threshold is a candidate."""
    cands = _candidates(docs, 0.85)
    for i in range(len(docs)):
        for j in range(i):
            if similarity(docs[j], docs[i]) >= 0.85:
                assert j in cands.get(i, set()), (docs[j], docs[i])
