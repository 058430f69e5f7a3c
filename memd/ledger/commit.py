"""What one read of a session puts in the ledger: its counters, its files' offsets, the tool
ids and usage entries it met, in the caller's transaction (`write`), after checking that no
other ingester moved the session's offsets since the read began (`Retry`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

import orjson

from memd.discovery import SessionFile
from memd.ledger.files import FileRow
from memd.transcripts.tally import Tally, UsageBook

SESSION_COLUMNS = (
    "records", "human_turns", "assistant_turns", "tool_calls", "conv_chars", "compactions",
    "last_compaction_offset", "pause_toggled_ts", "pause_offset", "pause_resumes", "first_ts", "last_ts",
    "safe_offset", "safe_human_turns", "safe_conv_chars", "safe_tool_calls",
)  # fmt: skip


@dataclass
class FileProblem:
    """A transcript line (or file) the ledger could not use, and why."""

    path: str
    line: int | None
    reason: str


@dataclass
class IngestResult:
    """What one ingest of one session did: bytes read, records folded, problems met."""

    key: str
    session_id: str
    bytes_read: int = 0  # how far the offsets advanced
    bytes_scanned: int = 0  # bytes read from the files (an unterminated tail is scanned, not consumed)
    records: int = 0
    reset: bool = False
    changed: bool = False
    problems: list[FileProblem] = field(default_factory=list)


class Retry(Exception):
    """Another ingester moved this session's offsets while we read."""


@dataclass
class Read:
    """One session read and folded, not yet committed: what `write` puts in the ledger."""

    sf: SessionFile
    sid: int | None  # None: the ledger has no row for this session yet
    files: list[FileRow]
    start_offsets: dict[str, tuple[int, int]]
    tally: Tally
    book: UsageBook
    new_tools: list[str]
    result: IngestResult
    had_error: bool

    @property
    def wants_commit(self) -> bool:
        """Something to write: new bytes, a reset, a moved home, or a session new to the ledger
        (its row is made even when its files hold nothing yet)."""
        return self.sid is None or self.result.changed or self.result.reset


def write(conn: sqlite3.Connection, read: Read, now_iso: str) -> None:
    """Put one read in the ledger, inside the caller's transaction; `Retry` if another process
    moved the session's offsets since the read began (the caller reads again). `Retry` comes
    before the first write: a batch goes on past a read that lost (`memd.ledger.store._flush`)."""
    sf = read.sf
    sid = read.sid
    values = _session_values(read.files, read.tally, read.book, now_iso)
    fresh = False  # a row this transaction made, counters and all: no other ingester can have offsets in it
    if sid is None:
        cols = ", ".join(values)
        made = conn.execute(
            f"INSERT INTO sessions(key, session_id, {cols}) VALUES (?, ?{', ?' * len(values)}) "
            "ON CONFLICT(key, session_id) DO NOTHING RETURNING id",
            (sf.key, sf.session_id, *values.values()),
        ).fetchone()
        if made is not None:
            sid, fresh = made[0], True
        else:  # another process made the row since the read began
            sid = conn.execute(
                "SELECT id FROM sessions WHERE key=? AND session_id=?", (sf.key, sf.session_id)
            ).fetchone()[0]
    if not fresh:
        current = {
            r["path"]: (r["offset"], r["inode"])
            for r in conn.execute("SELECT path, offset, inode FROM files WHERE session=?", (sid,))
        }
        if current != read.start_offsets:
            raise Retry
        if read.result.reset:
            conn.execute("DELETE FROM files WHERE session=?", (sid,))
            conn.execute("DELETE FROM seen_tools WHERE session=?", (sid,))
            conn.execute("DELETE FROM usage_msgs WHERE session=?", (sid,))
            conn.execute("DELETE FROM record_types WHERE session=?", (sid,))
            conn.execute("UPDATE sessions SET generation = generation + 1 WHERE id=?", (sid,))
        cols = ", ".join(f"{k}=?" for k in values)
        conn.execute(f"UPDATE sessions SET {cols} WHERE id=?", (*values.values(), sid))
    for f in read.files:
        conn.execute(
            "INSERT INTO files(path, session, role, dev, inode, size, mtime_ns, offset, line_no, bad_lines, format, fp) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET session=excluded.session, "
            "role=excluded.role, dev=excluded.dev, inode=excluded.inode, size=excluded.size, "
            "mtime_ns=excluded.mtime_ns, offset=excluded.offset, line_no=excluded.line_no, "
            "bad_lines=excluded.bad_lines, format=excluded.format, fp=excluded.fp",
            (f.rel, sid, f.role, f.dev, f.inode, f.size, f.mtime_ns, f.offset, f.line_no, f.bad_lines, f.format,
             f.fp),
        )  # fmt: skip
    _write_types(conn, sid, read.tally.unknown_types)
    if read.new_tools:
        _write_tools(conn, sid, read.new_tools)
    if read.book.dirty:
        _write_usage(conn, sid, read.book)


# A read's tool ids go to SQLite as one JSON array, unpacked by `json_each` in one statement: a
# first scan of 500 MB writes about 33,000 of them, and a bound row each cost 0.034 s against
# 0.025 s (bench/RESULTS.md, i27i4). Not the usage entries: five numbers taken out of each entry's
# JSON cost more than binding them (0.080 s against 0.069 s for 41,000). SQLite's JSON reads back
# every string orjson writes as the same text but one holding U+0000: such ids go row by row
# (`NUL_ESCAPE` in the JSON sends them there).
NUL_ESCAPE = b"\\u0000"


def _write_tools(conn: sqlite3.Connection, sid: int, tools: list[str]) -> None:
    data = orjson.dumps(tools)
    if NUL_ESCAPE in data:
        conn.executemany("INSERT OR IGNORE INTO seen_tools(session, tool_id) VALUES (?, ?)", [(sid, t) for t in tools])
    else:
        conn.execute("INSERT OR IGNORE INTO seen_tools(session, tool_id) SELECT ?, value FROM json_each(?)", (sid, data))


def _write_usage(conn: sqlite3.Connection, sid: int, book: UsageBook) -> None:
    entries = book.entries
    conn.executemany(
        "INSERT OR REPLACE INTO usage_msgs(session, msg_id, prio, input, output, cache_creation, cache_read) "
        "VALUES (?,?,?,?,?,?,?)",
        [(sid, m, p, *v) for m in book.dirty for p, v in (entries[m],)],
    )


def _session_values(files: list[FileRow], t: Tally, book: UsageBook, now_iso: str) -> dict[str, Any]:
    """The session row's columns after a read (`write` inserts them with a new row, or updates)."""
    main = files[0]
    # Claude Code's own running total (cost-state) includes compaction calls no assistant record shows.
    usage = list(t.cost_state) if t.cost_state is not None else book.total
    values: dict[str, Any] = {c: getattr(t, c) for c in SESSION_COLUMNS}
    values.update(
        format=main.format,
        is_subagent=int(t.is_subagent),
        kind_decided=int(t.kind_decided),
        bad_lines=sum(f.bad_lines for f in files),
        tool_pending=len(t.pending),
        paused_transcript=int(t.paused),
        natural_break=int(t.natural_break),
        carry=orjson.dumps(t.to_carry()).decode(),
        usage_input=usage[0],
        usage_output=usage[1],
        usage_cache_creation=usage[2],
        usage_cache_read=usage[3],
        bytes_read=sum(f.offset for f in files),
        path=main.path,
        updated_at=now_iso,
        ingest_error=None,  # it advanced
        ingest_error_ts=None,
    )
    return values


def _write_types(conn: sqlite3.Connection, sid: int, counts: dict[str, int]) -> None:
    """Counts of record types the reader did not recognise (SPEC §7.0): a format change shows as a number."""
    if counts:
        conn.executemany(
            "INSERT INTO record_types(session, type, count) VALUES (?,?,?) "
            "ON CONFLICT(session, type) DO UPDATE SET count=excluded.count",
            [(sid, t, n) for t, n in counts.items()],
        )
