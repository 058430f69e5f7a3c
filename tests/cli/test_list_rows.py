"""`memd list`'s rows made a directory at a time (issue 27 point 4): the staleness notes taken over
the whole list equal `staleness_note` of each memory, at the day boundaries and within the first day."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.index.listing import stale_notes as _stale_notes
from memd.index.staleness import DAY_SECONDS, staleness_note

NOW = 1_796_200_000.123456


def test_stale_notes_at_the_boundaries() -> None:
    ages = [DAY_SECONDS + 1e-6, 2 * DAY_SECONDS, 2 * DAY_SECONDS - 1e-7, 2 * DAY_SECONDS + 1e-7, 400.5 * DAY_SECONDS, 3e9]
    mtimes = [NOW - a for a in ages]
    assert _stale_notes(mtimes, NOW, {}) == [staleness_note(m, NOW) for m in mtimes]
    young = [*mtimes, NOW - DAY_SECONDS, NOW - 5.0, NOW + 60.0]  # the first day, and a clock ahead
    assert _stale_notes(young, NOW, {}) == [staleness_note(m, NOW) for m in young]
    assert _stale_notes([], NOW, {}) == []


@given(st.lists(st.floats(min_value=0, max_value=NOW + 1e6, allow_nan=False), max_size=30))
def test_stale_notes_are_staleness_note_of_each(mtimes: list[float]) -> None:
    made: dict[int, str | None] = {}
    assert _stale_notes(mtimes, NOW, made) == [staleness_note(m, NOW) for m in mtimes]
    assert _stale_notes(mtimes, NOW, made) == [staleness_note(m, NOW) for m in mtimes]  # the notes made kept


def test_stale_notes_never_call_staleness_note_a_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory all of whose memories are in their first day, or some of them (the common mix of
    old and new), gets its notes over the whole list: no `staleness_note` call a memory."""
    import memd.index.staleness as staleness  # noqa: PLC0415 - patched below

    calls: list[float] = []
    real = staleness.staleness_note

    def spy(mtime: float, now: float) -> str | None:
        calls.append(mtime)
        return real(mtime, now)

    monkeypatch.setattr(staleness, "staleness_note", spy)
    fresh = [NOW - 5.0 * i for i in range(100)]
    mixed = [NOW - DAY_SECONDS * i / 7 for i in range(100)] + [NOW - DAY_SECONDS, NOW + 60.0]
    assert _stale_notes(fresh, NOW, {}) == [None] * 100
    got = _stale_notes(mixed, NOW, {})
    assert calls == []
    assert got == [real(m, NOW) for m in mixed] and got[:8] == [None] * 8 and got[8] is not None


@given(st.lists(st.text(alphabet=" a\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x1b-", max_size=6), max_size=5))
def test_uneven_space_is_the_regexs_answer(names: list[str]) -> None:
    """The duplicate-name check's whitespace test by substring searches finds what its regex finds."""
    from memd.memory.scan import _UNEVEN_SPACE, _uneven_space  # noqa: PLC0415 - what is checked

    joined = "\0".join(names)
    assert _uneven_space(joined) == (_UNEVEN_SPACE.search(joined) is not None)
