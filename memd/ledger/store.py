"""The transcript ledger: reads only new bytes of each session and keeps its counters.

The rule that makes restarts exact: a session's counters, its files' offsets,
its newly seen tool ids and usage entries are written in one transaction, so the
stored offset always matches the counters. Two ingesters racing on one session
(the daemon and `memd scan`) cannot both count a span: the commit re-checks the
offsets it started from and the loser starts over.

A file is known by its path under the home (`projects/<key>/…`), not by its
absolute path or inode, so a home that is moved, copied, restored or reached
through a link goes on where it stopped. What tells an append from a rewrite is
a fingerprint of the bytes already read (their first and last 4 KiB and the
offset): a file that shrank or whose read bytes changed is read again from the
start, and the session's `generation` goes up so the jobs restart their cursors.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from memd.discovery import SessionFile
from memd.ledger.commit import SESSION_COLUMNS, FileProblem, IngestResult, Read, Retry, write
from memd.ledger.files import (
    FP_WINDOW,
    FileRow,
    file_rows,
    fingerprint,
    read_fingerprint,
    reset_needed,
    resume_at,
    stat,
)
from memd.transcripts.fold import Folder
from memd.transcripts.lines import LineReader
from memd.transcripts.tally import Tally, UsageBook

MAX_BAD_LINE_LOGS = 5
def _session_row(conn: sqlite3.Connection, sf: SessionFile, known: set[tuple[str, str]] | None = None) -> sqlite3.Row | None:
    """The session's row, or None for a session the ledger has not met (created when its first
    read commits, so the read itself writes nothing). `known`, the sessions that had a row when a
    scan began, spares a query for each new one: a row another process makes meanwhile is met by
    the commit, whose offset check sends the read round again (`commit.Retry`)."""
    if known is not None and (sf.key, sf.session_id) not in known:
        return None
    return conn.execute("SELECT * FROM sessions WHERE key=? AND session_id=?", (sf.key, sf.session_id)).fetchone()


def known_sessions(conn: sqlite3.Connection) -> set[tuple[str, str]]:
    """Every session the ledger has a row for, in one query (a first scan of a full home would
    otherwise ask once per session, each a read transaction of its own)."""
    cur = conn.cursor()
    cur.row_factory = None
    return set(cur.execute("SELECT key, session_id FROM sessions"))


def _tally_of(row: sqlite3.Row) -> Tally:
    carry = orjson.loads(row["carry"] or "{}")
    t = Tally(**{c: row[c] for c in SESSION_COLUMNS})
    t.paused = bool(row["paused_transcript"])
    t.natural_break = bool(row["natural_break"])
    t.is_subagent = bool(row["is_subagent"])
    t.kind_decided = bool(row["kind_decided"])
    t.pending = list(carry.get("pending", []))
    t.last_msg_id = carry.get("last_msg_id")
    t.last_pause_uuid = carry.get("last_pause_uuid")
    ts = carry.get("pending_ts")
    t.pending_ts = ts if isinstance(ts, str) else None
    tails = carry.get("long_tails")
    t.long_tails = dict(tails) if isinstance(tails, dict) else {}
    cost = carry.get("cost_state")
    t.cost_state = (cost[0], cost[1], cost[2], cost[3]) if isinstance(cost, list) and len(cost) == 4 else None
    unknown = carry.get("unknown_types")
    t.unknown_types = dict(unknown) if isinstance(unknown, dict) else {}
    return t


def ingest(conn: sqlite3.Connection, sf: SessionFile, now_iso: str, log: Any = None) -> IngestResult:
    """Fold whatever is new in one session's files into the ledger."""
    try:
        for _ in range(5):
            read = _read_session(conn, sf, log)
            if not read.wants_commit:
                _clear_error(conn, read)
                return read.result
            conn.execute("BEGIN IMMEDIATE")
            try:
                write(conn, read, now_iso)
                conn.execute("COMMIT")
            except Retry:
                conn.execute("ROLLBACK")
                continue
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return read.result
        raise IngestStuck(f"{sf.path}: another process kept changing this session's ledger; will retry")
    except (OSError, sqlite3.DatabaseError, IngestStuck) as exc:
        record_error(conn, sf, str(exc), now_iso)
        raise


BATCH_BYTES = 32 << 20  # a batch's reads are committed together once this much was read …
BATCH_SESSIONS = 256  # … or this many sessions


def ingest_many(
    conn: sqlite3.Connection, sfs: Iterable[SessionFile], now_iso: str, log: Any = None,
    turn: Callable[[], contextlib.AbstractContextManager[None]] | None = None,
    known: set[tuple[str, str]] | None = None,
) -> Iterator[IngestResult]:
    """`ingest` over many sessions, their reads committed a batch at a time: a first scan of a full
    home pays one transaction per batch instead of one per session. Each session's counters and
    offsets still go in together; one whose offsets another process moved meanwhile is read again
    on its own. Results come in the order of `sfs`. `turn()`, when given, is held around each
    batch's write transaction (a parallel scan's workers take turns: `memd.ledger.workers.Turns`).
    `known`: the sessions that had a row when the scan began (`known_sessions`), when the caller
    has them: a parallel scan's parent asks once before it forks, where each worker asked again for
    each of its batches (50-odd queries of up to 1,000 rows over a 500 MB first scan)."""
    batch: list[Read] = []
    size = 0
    if known is None:
        known = known_sessions(conn)
    for sf in sfs:
        try:
            read = _read_session(conn, sf, log, known)
        except (OSError, sqlite3.DatabaseError) as exc:
            yield from _flush(conn, batch, now_iso, log, turn)
            record_error(conn, sf, str(exc), now_iso)
            raise
        batch.append(read)
        size += read.result.bytes_scanned
        if size >= BATCH_BYTES or len(batch) >= BATCH_SESSIONS:
            yield from _flush(conn, batch, now_iso, log, turn)
            batch, size = [], 0
    yield from _flush(conn, batch, now_iso, log, turn)


def _flush(conn: sqlite3.Connection, batch: list[Read], now_iso: str, log: Any,
           turn: Callable[[], contextlib.AbstractContextManager[None]] | None = None) -> Iterator[IngestResult]:  # fmt: skip
    """Commit a batch of reads in one transaction; a read that lost a race is done again alone.
    A database error rolls the batch back and is kept as the error of the session it met."""
    lost: set[int] = set()
    if any(r.wants_commit for r in batch):
        with contextlib.nullcontext() if turn is None else turn():
            _write_batch(conn, batch, now_iso, lost)
    for i, read in enumerate(batch):
        if i in lost:
            yield ingest(conn, read.sf, now_iso, log)
            continue
        if not read.wants_commit:
            _clear_error(conn, read)
        yield read.result


def _write_batch(conn: sqlite3.Connection, batch: list[Read], now_iso: str, lost: set[int]) -> None:
    """The batch's reads in one write transaction; the index of each that lost its race goes in `lost`."""
    conn.execute("BEGIN IMMEDIATE")
    writing: Read | None = None  # the read whose write met an error, if one did
    try:
        for i, writing in enumerate(batch):
            if writing.wants_commit and not _write_one(conn, writing, now_iso):
                lost.add(i)
        writing = None
        conn.execute("COMMIT")
    except BaseException as exc:
        conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.DatabaseError) and writing is not None:
            record_error(conn, writing.sf, str(exc), now_iso)
        raise


def _write_one(conn: sqlite3.Connection, read: Read, now_iso: str) -> bool:
    """One read of a batch: False (and nothing written: `write` checks before its first write) if it
    lost the race."""
    try:
        write(conn, read, now_iso)
    except Retry:
        return False
    return True


class IngestStuck(Exception):
    """Five attempts in a row lost the race for one session's offsets."""


def record_error(conn: sqlite3.Connection, sf: SessionFile, reason: str, now_iso: str) -> None:
    """Keep why a session could not advance, so status shows it failing rather than green."""
    with contextlib.suppress(sqlite3.Error):  # the database itself is what failed: the caller's error says so
        conn.execute(
            "UPDATE sessions SET ingest_error=?, ingest_error_ts=? WHERE key=? AND session_id=?",
            (reason[:500], now_iso, sf.key, sf.session_id),
        )


def _clear_error(conn: sqlite3.Connection, read: Read) -> None:
    """A read that found nothing new still shows the session advancing again (a commit clears the
    error as it writes the session's row)."""
    if read.had_error:
        conn.execute(
            "UPDATE sessions SET ingest_error=NULL, ingest_error_ts=NULL WHERE key=? AND session_id=?",
            (read.sf.key, read.sf.session_id),
        )


def _read_session(conn: sqlite3.Connection, sf: SessionFile, log: Any, known: set[tuple[str, str]] | None = None) -> Read:
    """Read and fold whatever is new in one session, writing nothing."""
    result = IngestResult(sf.key, sf.session_id)
    row = _session_row(conn, sf, known)
    sid = None if row is None else int(row["id"])
    files = file_rows(conn, sid, sf)
    start_offsets = {f.rel: (f.offset, f.inode) for f in files if f.known}
    stats = [stat(f.path) for f in files]
    if reset_needed(files, stats):
        result.reset = True
        files = [FileRow(f.path, f.rel, f.role) for f in files]
    if row is None or result.reset:
        tally = Tally(pending=[])
        prior = False
    else:
        tally = _tally_of(row)  # its `paused` is the transcript's own parity; CLI words are memd.ledger.pause's
        prior = any(f.offset > 0 for f in files)
    lookup_usage, seen_tool = _lookups(conn, sid, prior)
    book = UsageBook(lookup_usage)
    if row is not None and not result.reset:
        book.total = [row["usage_input"], row["usage_output"], row["usage_cache_creation"], row["usage_cache_read"]]
    new_tools: list[str] = []
    for f, st in zip(files, stats):
        if st is None:
            if f.role == "main" and not f.known:
                result.problems.append(FileProblem(f.path, None, "cannot stat (deleted or unreadable)"))
            continue
        if f.known and st.st_size == f.offset and st.st_mtime_ns == f.mtime_ns:
            if (st.st_ino, st.st_dev) != (f.inode, f.dev):  # the same bytes under a new identity
                f.dev, f.inode, f.fp = st.st_dev, st.st_ino, f.fp or fingerprint(f.path, f.offset)
                result.changed = True
            continue
        folder = Folder(tally, book, seen_tool, main=f.role == "main", fmt=f.format)
        _read_file(f, st, folder, result, log)
        folder.finish(f.offset)
        f.format = folder.fmt
        new_tools.extend(folder.new_tools)
        if f.role == "main":
            tally = folder.t
    if row is not None and row["path"] != sf.main:
        result.changed = True  # the home moved: keep the shown path current
    had_error = row is not None and row["ingest_error"] is not None
    return Read(sf, sid, files, start_offsets, tally, book, new_tools, result, had_error)


def _lookups(conn: sqlite3.Connection, sid: int | None, prior: bool) -> tuple[Any, Any]:
    """DB look-ups for ids seen in earlier reads; none needed on a first read (None: nothing seen)."""
    if not prior or sid is None:
        return None, None

    def usage(mid: str) -> tuple[int, tuple[int, int, int, int]] | None:
        r = conn.execute(
            "SELECT prio, input, output, cache_creation, cache_read FROM usage_msgs WHERE session=? AND msg_id=?",
            (sid, mid),
        ).fetchone()
        return None if r is None else (r[0], (r[1], r[2], r[3], r[4]))

    def tool(tid: str) -> bool:
        return conn.execute("SELECT 1 FROM seen_tools WHERE session=? AND tool_id=?", (sid, tid)).fetchone() is not None

    return usage, tool


def _read_file(f: FileRow, st: os.stat_result, folder: Folder, result: IngestResult, log: Any) -> None:
    """Fold the file's complete lines from its offset; the hot loop of ingest is `Folder.fold`."""
    logged = 0
    start = f.offset
    tails = folder.t.long_tails
    reader = LineReader(f.path, f.offset, resume=resume_at(f, st, tails.get(f.rel)), keep_head=FP_WINDOW)
    fold = folder.fold
    try:
        for lines, batch_end, skipped in reader:
            if skipped:  # a line over the limit: scanned for its newline, never loaded
                f.line_no += 1
                f.bad_lines += 1
                reason = f"line of {skipped:,} bytes is longer than the {reader.limit >> 20} MiB limit: skipped"
                result.problems.append(FileProblem(f.path, f.line_no, reason))
                if log is not None and logged < MAX_BAD_LINE_LOGS:
                    logged += 1
                    log.warning("transcript.line_skipped", file=f.path, line=f.line_no, reason=reason)
            else:
                bad: list[tuple[int, str]] = []
                result.records += fold(lines, f.offset, bad)
                for i, why in bad:
                    f.bad_lines += 1
                    if log is not None and logged < MAX_BAD_LINE_LOGS:
                        logged += 1
                        log.warning("transcript.line_skipped", file=f.path, line=f.line_no + i + 1, reason=why)
                    result.problems.append(FileProblem(f.path, f.line_no + i + 1, "unparseable line"))
                f.line_no += len(lines)
            f.offset = batch_end
            result.changed = True
    except OSError as exc:
        result.problems.append(FileProblem(f.path, None, f"read failed: {exc.strerror or exc}"))
        if log is not None:
            log.warning("transcript.read_failed", file=f.path, reason=str(exc.strerror or exc))
    result.bytes_read += f.offset - start
    result.bytes_scanned += reader.bytes_read
    tail = None
    if reader.tail_scan is not None:  # remember how far the search for that line's newline got
        tail = [f.offset, reader.tail_scan, fingerprint(f.path, reader.tail_scan)]
    if tails.get(f.rel) != tail:
        if tail is None:
            tails.pop(f.rel, None)
        else:
            tails[f.rel] = tail
        result.changed = True
    f.dev, f.inode, f.size, f.mtime_ns = st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
    if f.offset != start or f.fp is None:
        f.fp = read_fingerprint(f.path, f.offset, reader.head, reader.window)
    if f.offset < st.st_size:
        # An unterminated tail: remember the size we saw so the next stat still
        # notices growth, but never the mtime, so a rewrite of the tail is read.
        f.mtime_ns = -1


LIST_COLUMNS = (
    "id", "key", "session_id", "format", "path", "bytes_read", "records", "bad_lines", "human_turns",
    "assistant_turns", "tool_calls", "tool_pending", "conv_chars", "usage_input", "usage_output",
    "usage_cache_creation", "usage_cache_read", "compactions", "paused_transcript", "pause_toggled_ts",
    "pause_cli", "pause_cli_ts", "first_ts", "last_ts", "safe_offset", "natural_break", "safe_human_turns",
    "safe_conv_chars", "safe_tool_calls", "pause_offset", "last_compaction_offset", "pause_cli_parity",
    "pause_resumes", "pause_cli_resumes",
)  # fmt: skip


def session_rows(conn: sqlite3.Connection, key: str | None = None) -> list[dict[str, Any]]:
    """Main sessions (sub-agent transcripts excluded) as plain dicts, in a stable order."""
    q = f"SELECT {', '.join(LIST_COLUMNS)} FROM sessions WHERE is_subagent=0"
    args: tuple[Any, ...] = ()
    if key:
        q += " AND key=?"
        args = (key,)
    cur = conn.cursor()
    cur.row_factory = None
    return [dict(zip(LIST_COLUMNS, r)) for r in cur.execute(q + " ORDER BY key, first_ts, session_id", args)]
