"""Pure renders: MEMORY.md, the drawer injection and its budget, staleness notes."""

from __future__ import annotations

import os
import re
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.index.refresh import refresh_dir
from memd.index.render import DrawerRender, render_drawer, render_memory_index
from memd.index.staleness import DAY_SECONDS, staleness_note
from memd.memory.file import Memory
from memd.tree import Home

# 2024-05-10 12:00 UTC
NOON = datetime(2024, 5, 10, 12, 0, tzinfo=UTC).timestamp()
TODAY = date(2024, 5, 12)
LAST = -3  # memd's last index line: then a blank line and the end marker of memd's block


def mem(
    name: str,
    kind: str = "user",
    description: str | None = None,
    body: str = "",
    mtime: float = NOON,
    file: str | None = None,
) -> Memory:
    return Memory(
        path=Path("/h/memory") / (file or f"{name}.md"),
        name=name,
        description=description if description is not None else f"about {name}",
        type=kind,
        body=body,
        mtime=mtime,
        size=0,
    )


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


# --------------------------------------------------------------------------- MEMORY.md


def test_index_lines_grouped_by_type_in_spec_order() -> None:
    memories = [
        mem("zeta-ref", "reference", "the board"),
        mem("b-proj", "project"),
        mem("prefers-tabs", "feedback", "tabs, not spaces"),
        mem("a-proj", "project"),
        mem("role", "user", "senior backend engineer"),
    ]
    out = render_memory_index(memories)
    assert out.warning is None
    assert out.entries == 5
    body = out.text.split("\n", 2)[2].rsplit("\n\n<!-- end of memd's index", 1)[0] + "\n"  # header to end marker
    assert body == (
        "## User\n\n"
        "- [role](role.md) — senior backend engineer\n\n"
        "## Feedback\n\n"
        "- [prefers-tabs](prefers-tabs.md) — tabs, not spaces\n\n"
        "## Project\n\n"
        "- [a-proj](a-proj.md) — about a-proj\n"
        "- [b-proj](b-proj.md) — about b-proj\n\n"
        "## Reference\n\n"
        "- [zeta-ref](zeta-ref.md) — the board\n"
    )
    assert "memd" in out.text.splitlines()[0]


def test_index_is_stable_under_input_order() -> None:
    memories = [mem(f"n{i}", ("user", "project")[i % 2]) for i in range(20)]
    assert render_memory_index(memories).text == render_memory_index(list(reversed(memories))).text


def test_index_empty_dir() -> None:
    out = render_memory_index([])
    assert out.warning is None and out.entries == 0
    assert "- [" not in out.text


def test_index_escapes_link_text_and_odd_file_names() -> None:
    line = render_memory_index([mem("a]b[c", file="my notes (v2).md")]).text.splitlines()[LAST]
    assert line == r"- [a\]b\[c](<my notes (v2).md>) — about a]b[c"


def test_index_description_truncated_to_line_budget() -> None:
    long = "word " * 100
    out = render_memory_index([mem("x", description=long)], max_line_chars=80)
    line = out.text.splitlines()[LAST]
    assert len(line) <= 80
    assert line.endswith("…")
    assert line.startswith("- [x](x.md) — word word")
    short = render_memory_index([mem("x", description="fits")], max_line_chars=80)
    assert short.text.splitlines()[LAST] == "- [x](x.md) — fits"


def test_index_description_newlines_are_flattened() -> None:
    line = render_memory_index([mem("x", description="one\ntwo\n\tthree")]).text.splitlines()[LAST]
    assert line == "- [x](x.md) — one two three"


def _lines(n: int) -> list[Memory]:
    return [mem(f"m{i:03d}", "project") for i in range(n)]


def test_index_line_budget_boundary() -> None:
    base = render_memory_index(_lines(10))
    n_lines = len(base.text.splitlines())
    assert render_memory_index(_lines(10), max_lines=n_lines).warning is None
    over = render_memory_index(_lines(10), max_lines=n_lines - 1)
    assert over.warning is not None
    assert over.text.startswith("> " + over.warning + "\n")


def test_index_over_200_entries_warns_and_is_not_cut() -> None:
    memories = _lines(230)
    out = render_memory_index(memories)
    assert out.warning is not None
    first = out.text.splitlines()[0]
    assert first.startswith("> ⚠ memd:") and "230 entries" in first and "memd run-now dream" in first
    assert out.text.count("\n- [") == 230  # every entry still there


def test_index_over_25kb_warns_with_few_lines() -> None:
    memories = [mem(f"m{i:02d}", "project", "d" * 900) for i in range(40)]
    out = render_memory_index(memories, max_line_chars=1000)
    assert len(out.text.splitlines()) < 200
    assert _utf8(out.text) > 25_000
    assert out.warning is not None and "KB" in out.warning
    fits = render_memory_index(memories[:20], max_line_chars=1000)
    assert fits.warning is None


def test_index_byte_budget_boundary() -> None:
    memories = _lines(5)
    size = _utf8(render_memory_index(memories).text)
    assert render_memory_index(memories, max_bytes=size).warning is None
    assert render_memory_index(memories, max_bytes=size - 1).warning is not None


# --------------------------------------------------------------------------- drawer


def _full_size(memories: list[Memory]) -> int:
    return _utf8(render_drawer(memories, max_bytes=10**9, today=TODAY).text)


def test_drawer_full_contains_every_memory() -> None:
    memories = [mem("role", "user", "backend dev", "Works on Go services."), mem("tabs", "feedback", "tabs", "Use tabs.")]
    out = render_drawer(memories, today=TODAY)
    assert out.mode == "full"
    assert out.text.startswith("# Global memory\n")
    assert "generated by memd" in out.text
    for m in memories:
        assert f"## {m.name}" in out.text and m.body in out.text and m.description in out.text
    assert "2024-05-10" in out.text and "2 days old" in out.text
    assert "memory/role.md" in out.text
    assert "point-in-time" in out.text  # some memory is more than a day old


def test_drawer_no_staleness_header_when_all_fresh() -> None:
    out = render_drawer([mem("role")], today=date(2024, 5, 10))
    assert "point-in-time" not in out.text
    assert "today" in out.text


def _padded_to(budget: int) -> list[Memory]:
    """Memories whose full render is exactly `budget` bytes (multi-byte padding included)."""
    memories = [mem("role", "user", "who", "é" * 10), mem("tabs", "feedback", "tabs", "Use tabs.")]
    gap = budget - _full_size(memories)
    assert gap >= 0
    memories[0].body += "x" * gap
    assert _full_size(memories) == budget
    return memories


def test_drawer_budget_boundary_is_exact() -> None:
    exact = _padded_to(8192)
    out = render_drawer(exact, max_bytes=8192, today=TODAY)
    assert out.mode == "full" and _utf8(out.text) == 8192
    one_more = _padded_to(8192)
    one_more[0].body += "y"
    out = render_drawer(one_more, max_bytes=8192, today=TODAY)
    assert out.mode == "index"
    assert _utf8(out.text) <= 8192


def test_drawer_budget_counts_bytes_not_characters() -> None:
    memories = _padded_to(4000)
    memories[0].body = memories[0].body[:-2] + "é"  # one character fewer, same bytes
    assert render_drawer(memories, max_bytes=4000, today=TODAY).mode == "full"
    memories[0].body = memories[0].body[:-1] + "éé"  # one more byte, still fewer characters
    text = render_drawer(memories, max_bytes=10**9, today=TODAY).text
    assert len(text) < 4000 < _utf8(text)
    assert render_drawer(memories, max_bytes=4000, today=TODAY).mode == "index"


def test_drawer_index_mode_lists_every_entry_and_points_to_search() -> None:
    memories = [mem(f"pref-{i}", "feedback", f"preference number {i}", "long body " * 200) for i in range(5)]
    out = render_drawer(memories, max_bytes=8192, today=TODAY)
    assert out.mode == "index" and out.omitted == 0
    assert "generated by memd" in out.text
    assert "memd search" in out.text and "SearchMemory" in out.text and "Read" in out.text
    for m in memories:
        assert f"- [{m.name}](memory/{m.name}.md) (feedback, 2024-05-10) — {m.description}" in out.text
    assert "long body" not in out.text


def test_drawer_index_truncated_at_entry_boundary() -> None:
    memories = [mem(f"pref-{i:03d}", "feedback", "d" * 120, "body") for i in range(200)]
    out = render_drawer(memories, max_bytes=8192, today=TODAY)
    assert out.mode == "index"
    assert _utf8(out.text) <= 8192
    entries = [line for line in out.text.splitlines() if line.startswith("- [")]
    assert 0 < len(entries) < 200
    assert out.omitted == 200 - len(entries)
    assert out.text.rstrip("\n").splitlines()[-1].startswith(f"- … {out.omitted} more entries omitted")
    assert all(line.endswith("d" * 120) for line in entries)  # no entry is cut
    assert [e.split("]")[0] for e in entries] == [f"- [pref-{i:03d}" for i in range(len(entries))]


def test_drawer_truncation_uses_the_whole_budget() -> None:
    memories = [mem(f"pref-{i:03d}", "feedback", "d" * 120, "body") for i in range(200)]
    out = render_drawer(memories, max_bytes=8192, today=TODAY)
    kept = 200 - out.omitted
    tighter = render_drawer(memories, max_bytes=_utf8(out.text) - 1, today=TODAY)
    assert 200 - tighter.omitted == kept - 1  # one entry fewer, not an arbitrary cut


def test_drawer_dates_follow_the_given_zone() -> None:
    late = datetime(2024, 5, 10, 23, 30, tzinfo=UTC).timestamp()
    utc = render_drawer([mem("x", mtime=late)], today=TODAY, tz=UTC).text
    east = render_drawer([mem("x", mtime=late)], today=TODAY, tz=timezone(timedelta(hours=8))).text
    assert "2024-05-10" in utc and "2024-05-11" in east


@settings(max_examples=150, deadline=None)
@given(
    bodies=st.lists(st.text(max_size=400), min_size=0, max_size=40),
    budget=st.integers(min_value=700, max_value=12_000),
)
def test_drawer_never_exceeds_budget(bodies: list[str], budget: int) -> None:
    memories = [mem(f"m{i}", "user", f"desc {i} " + b[:50], b) for i, b in enumerate(bodies)]
    out = render_drawer(memories, max_bytes=budget, today=TODAY)
    assert isinstance(out, DrawerRender)
    assert _utf8(out.text) <= budget
    assert (out.mode == "full") == (_full_size(memories) <= budget)
    if out.mode == "index":
        listed = len(re.findall(r"^- \[", out.text, flags=re.M))
        assert listed + out.omitted == len(memories)


# --------------------------------------------------------------------------- staleness


@pytest.mark.parametrize(
    ("age", "expected"),
    [
        (0, None),
        (23 * 3600, None),
        (DAY_SECONDS, None),
        (DAY_SECONDS + 3600, "This memory is 1 day old."),
        (2.5 * DAY_SECONDS, "This memory is 2 days old."),
        (40 * DAY_SECONDS, "This memory is 40 days old."),
    ],
)
def test_staleness_note(age: float, expected: str | None) -> None:
    note = staleness_note(NOON - age, NOON)
    if expected is None:
        assert note is None
    else:
        assert note is not None and note.startswith(expected)
        assert "point-in-time observations, not live state" in note
        assert "Verify against current code" in note


def test_staleness_note_accepts_datetime_and_future_mtime() -> None:
    now = datetime.fromtimestamp(NOON, UTC)
    assert staleness_note(NOON - 3 * DAY_SECONDS, now) is not None
    assert staleness_note(NOON + 100, now) is None  # clock skew: never "negative days old"


def test_refresh_reuses_indexed_rows_for_unchanged_files(tmp_path: Path) -> None:
    """An unchanged file (same size and mtime as its search row) is not read again."""

    home = Home(tmp_path / "h")
    d = home.global_memory
    d.mkdir(parents=True)
    f = d / "tabs.md"
    f.write_text("---\nname: tabs\ndescription: indents with tabs\nmetadata:\n  type: user\n---\nTabs.\n")
    first = refresh_dir(home, "global", None, d)
    assert first.memories == 1 and not first.problems
    st = f.stat()
    f.write_bytes(b"\xff" * st.st_size)  # garbage of the same size, mtime put back
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = refresh_dir(home, "global", None, d)
    assert again.memories == 1 and not again.problems  # the row was reused, the file not re-read
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # now it looks changed: read, and reported
    third = refresh_dir(home, "global", None, d)
    assert third.memories == 0 and "UTF-8" in third.problems[0].reason
