"""Linear-time reading with bounded memory (issue 16): a line over the limit is skipped without
being held, and an over-long unterminated tail is not scanned again from its start."""

from __future__ import annotations

import json
import random
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd import state
from memd.discovery import discover_sessions
from memd.ledger import files as ledgerfiles
from memd.ledger import store as ledger
from memd.ledger.sessions import session_json
from memd.transcripts import lines as linereader
from memd.transcripts.lines import LineReader, read_lines
from memd.transcripts.spans import read_span
from memd.tree import Home

NOW = "2026-11-30T00:00:00.000Z"
MiB = 1 << 20
LIMIT = 1 * MiB  # injected for the tests: what MAX_LINE is to a real transcript


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(linereader, "MAX_LINE", LIMIT)
    yield


def human(text: str) -> bytes:
    return json.dumps({"type": "user", "uuid": "u", "message": {"role": "user", "content": text}}).encode() + b"\n"


def peak_bytes(fn: Callable[[], Any]) -> tuple[Any, int]:
    """What `fn` returns, and the most memory Python held at once while it ran."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def ingest_once(home: Path) -> ledger.IngestResult:
    h = Home(home)
    conn = state.connect(h.state_db)
    try:
        (sf,) = discover_sessions(h)
        return ledger.ingest(conn, sf, NOW)
    finally:
        conn.close()


def row_of(home: Path) -> dict[str, Any]:
    conn = state.connect(Home(home).state_db)
    try:
        return session_json(ledger.session_rows(conn)[0])
    finally:
        conn.close()


def test_a_newline_less_file_is_scanned_once_in_bounded_memory(home: Path, small_limit: None) -> None:
    p = home / "projects" / "k" / "s.jsonl"
    p.parent.mkdir(parents=True)
    with open(p, "wb") as fh:
        fh.write(human("before"))
        fh.truncate(64 * MiB)  # then 64 MB of zeros and never a newline
    size = p.stat().st_size
    r, peak = peak_bytes(lambda: ingest_once(home))
    assert r.records == 1 and r.bytes_read == len(human("before"))
    assert r.bytes_scanned == size  # every byte read once
    assert peak < 8 * MiB  # a 64 MB line is never held
    with open(p, "ab") as fh:
        fh.write(b"y" * 1000)  # the line grows, still unterminated
    r = ingest_once(home)
    assert r.bytes_scanned == 1000  # the scan goes on where it stopped, not from the line's start
    assert ingest_once(home).bytes_scanned == 0
    with open(p, "ab") as fh:
        fh.write(b"\n" + human("after"))
    r, peak = peak_bytes(lambda: ingest_once(home))
    assert r.bytes_scanned == 1 + len(human("after"))
    assert r.records == 1 and [pr.line for pr in r.problems] == [2]
    assert "longer than the 1 MiB limit" in r.problems[0].reason and "skipped" in r.problems[0].reason
    assert peak < 8 * MiB
    row = row_of(home)
    assert row["bad_lines"] == 1 and row["human_turns"] == 2 and row["records"] == 2
    assert row["bytes_read"] == p.stat().st_size == row["safe_offset"]


def test_a_rewritten_long_tail_is_scanned_again_from_its_start(home: Path, small_limit: None) -> None:
    p = home / "projects" / "k" / "s.jsonl"
    p.parent.mkdir(parents=True)
    p.write_bytes(human("a") + b"x" * (3 * MiB))
    assert ingest_once(home).bytes_scanned == p.stat().st_size
    with open(p, "r+b") as fh:  # the scanned bytes change (the agent never does this; a restore might)
        fh.truncate(len(human("a")) + 2 * MiB)
        fh.seek(0, 2)
        fh.write(b"\n" + human("b"))
    r = ingest_once(home)
    assert r.bytes_scanned == p.stat().st_size - len(human("a"))  # the remembered scan no longer holds
    assert r.records == 1 and len(r.problems) == 1 and row_of(home)["human_turns"] == 2


def test_a_giant_complete_line_costs_no_memory_to_ingest_or_to_read_as_a_span(home: Path, small_limit: None) -> None:
    p = home / "projects" / "k" / "s.jsonl"
    p.parent.mkdir(parents=True)
    giant = b'{"type":"user","uuid":"g","message":{"role":"user","content":"' + b"z" * (40 * MiB) + b'"}}\n'
    p.write_bytes(human("one") + giant + human("two"))
    r, peak = peak_bytes(lambda: ingest_once(home))
    assert r.records == 2 and len(r.problems) == 1 and peak < 8 * MiB
    span, peak = peak_bytes(lambda: read_span(p, 0, p.stat().st_size, "claude"))
    assert [x.text for x in span.pieces] == ["one", "two"] and span.end == p.stat().st_size
    assert peak < 8 * MiB


def test_read_lines_reports_a_skipped_line_in_its_place(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"a\n" + b"b" * 100 + b"\n" + b"c" * 10 + b"\nunfinished")
    got = [(x.data, x.number, x.end, x.skipped) for x in read_lines(p, 0, 1, limit=10)]
    assert got == [(b"a", 1, 2, 0), (b"", 2, 103, 100), (b"c" * 10, 3, 114, 0)]


def naive(data: bytes, limit: int) -> tuple[list[tuple[bytes, int]], int | None]:
    """Complete lines (data with its newline, skipped length) and, for an over-long unterminated tail,
    the end of data."""
    *complete, tail = data.split(b"\n")
    out = [(b"", len(x)) if len(x) > limit else (x + b"\n", 0) for x in complete]
    return out, (len(data) if len(tail) > limit else None)


@settings(max_examples=300, deadline=None, database=None)
@given(pieces=st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=30), limit=st.integers(1, 25),
       chunk=st.integers(1, 17), resume_cut=st.integers(0, 100))  # fmt: skip
def test_line_reader_equals_a_plain_split_under_any_chunking(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[tuple[int, bool]], limit: int, chunk: int, resume_cut: int
) -> None:
    rng = random.Random(len(pieces))
    data = b"".join(bytes(rng.choice(b"ab{}") for _ in range(n)) + (b"\n" if nl else b"") for n, nl in pieces)
    p = tmp_path_factory.mktemp("lr") / "f"
    p.write_bytes(data)
    want, tail = naive(data, limit)
    old = linereader.CHUNK
    linereader.CHUNK = chunk
    try:
        reader = LineReader(p, 0, limit=limit)
        got: list[tuple[bytes, int]] = []
        end = 0
        for lines, batch_end, skipped in reader:
            got.extend([(b"", skipped)] if skipped else [(x, 0) for x in lines])
            assert batch_end == end + (skipped + 1 if skipped else sum(len(x) for x in lines))
            end = batch_end
        assert got == want and reader.bytes_read == len(data) and reader.tail_scan == tail
        if tail is not None:  # going on from a remembered scan finds the same lines, reading only new bytes
            extra = b"q" * (resume_cut % 7) + b"\nend\n"
            with open(p, "ab") as fh:
                fh.write(extra)
            again = LineReader(p, end, limit=limit, resume=tail)
            rest = [(b"", s) if s else lines for lines, _e, s in again]
            assert rest[0] == (b"", len(data) - end + resume_cut % 7) and again.bytes_read == len(extra)
    finally:
        linereader.CHUNK = old


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64).map(lambda b: b.replace(b"\x00", b"\n")))
def test_split_lines_is_bytes_split(chunk: bytes) -> None:
    """The memchr splitter the reader uses cuts exactly where `bytes.split(b"\\n")` does, each
    complete line keeping its newline."""
    *complete, tail = chunk.split(b"\n")
    assert linereader.split_lines(chunk) == ([x + b"\n" for x in complete], tail)


@settings(max_examples=200, deadline=None, database=None)
@given(pieces=st.lists(st.tuples(st.integers(0, 3000), st.booleans()), max_size=12), chunk=st.integers(1, 9000),
       limit=st.integers(50, 5000))  # fmt: skip
def test_the_fingerprint_of_what_a_read_saw_is_the_one_read_again(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[tuple[int, bool]], chunk: int, limit: int
) -> None:
    """The ledger fingerprints a first read from the chunks it read (`LineReader.head`, `window`), or
    reads the bytes again where it no longer has them: the same fingerprint either way."""
    data = b"".join(b"x" * n + (b"\n" if nl else b"") for n, nl in pieces)
    p = tmp_path_factory.mktemp("fp") / "f"
    p.write_bytes(data)
    old = linereader.CHUNK
    linereader.CHUNK = chunk
    try:
        reader = LineReader(p, 0, limit=limit, keep_head=ledgerfiles.FP_WINDOW)
        end = 0
        for batch in reader:
            end = batch[1]
        assert ledgerfiles.read_fingerprint(str(p), end, reader.head, reader.window) == ledgerfiles.fingerprint(str(p), end)
        for start, stop in ((0, end), (max(0, end - 10), end), (end, end)):
            got = reader.window(start, stop)
            assert got is None or got == data[start:stop]
    finally:
        linereader.CHUNK = old
