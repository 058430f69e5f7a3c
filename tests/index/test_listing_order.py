"""`memd.index.listing.in_list_order`: two stable one-key sorts (name, then type) give `list`'s order, the one
stable sort by (type, name), for any rows: ties kept in their order, names of any case and script."""

from __future__ import annotations

from operator import itemgetter

from hypothesis import given
from hypothesis import strategies as st

from memd.index.listing import in_list_order

_ROW = st.tuples(st.text(max_size=6), st.sampled_from(["a", "B", "b", "é", "a b", ""]) | st.text(max_size=4),
                 st.text(max_size=3), st.sampled_from(["user", "feedback", "project", "reference"]) | st.text(max_size=3),
                 st.floats(allow_nan=False), st.integers(0, 10))  # fmt: skip


@given(st.lists(_ROW, max_size=40))
def test_two_stable_sorts_are_the_one_sort_by_type_and_name(rows: list[tuple[object, ...]]) -> None:
    got = list(rows)
    in_list_order(got)
    assert got == sorted(rows, key=itemgetter(3, 1))
    assert [id(r) for r in got] == [id(r) for r in sorted(rows, key=itemgetter(3, 1))]  # ties in their order
