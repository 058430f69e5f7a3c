"""No silent spending (SPEC §8.3): which sessions the model jobs may take up unasked, and the backlog.

A session is *recent* when it was active within `memory.backfillDays` of now: its last record's
timestamp or its transcript's modification time, whichever is later (Claude Code appends to a
transcript only while the session lives, so an old session's file keeps its old time; a file
copied in anew counts as new, which errs towards taking it up, as memd always did). Extraction and summaries take up recent
sessions only; the others wait, shown by `memd status` as the backlog (sessions, estimated
tokens, estimated price at the dated price table, `memd.llm.prices`), until `memd backfill`
moves the horizon back (the `backfill` cursor, {"since": ISO}). A session that comes back to life
is recent again and is taken up as usual. `backfillDays: 0` turns the horizon off (every session).

Pure decisions (`horizon`, `is_recent`, `estimate`) apart from the reads (`activity`, `backlog`).
Invariant: the horizon only ever filters what the jobs' own due checks found; it never makes a
session due, and never moves a cursor, so a backfill later finds every old session where it was.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from memd.clock import iso, parse_iso
from memd.settings import Settings
from memd.tree import Place

__all__ = ["CURSOR_JOB", "CURSOR_TARGET", "Activity", "Backlog", "activity", "asked_since", "backlog", "horizon", "is_recent", "keep_recent"]

CURSOR_JOB, CURSOR_TARGET = "backfill", "home"
# Rough shape of a call, for the estimate only: what a model answers to an extraction or a summary.
OUTPUT_TOKENS_PER_CALL = 600
GATE_TOKENS = 1_500  # the gate reads a few turns, on the small model


def asked_since(conn: sqlite3.Connection) -> datetime | None:
    """The earliest activity `memd backfill` asked for, or None (never asked)."""
    row = conn.execute("SELECT json_extract(value, '$.since') FROM cursors WHERE job=? AND target=?",
                       (CURSOR_JOB, CURSOR_TARGET)).fetchone()  # fmt: skip
    return parse_iso(str(row[0])) if row is not None and row[0] else None


def horizon(days: int, now: datetime, since: datetime | None) -> datetime | None:
    """The oldest activity taken up unasked: `days` before `now`, or earlier when a backfill asked
    for it; None (no horizon) when `days` is 0."""
    if days <= 0:
        return None
    edge = now - timedelta(days=days)
    return min(edge, since) if since is not None else edge


def is_recent(last_ts: str | None, mtime_ns: int | None, edge: datetime | None) -> bool:
    """Pure: whether a session last active at `last_ts` or at its file's `mtime_ns` (the later) is
    on this side of `edge`. A file touched since `edge` answers without parsing the record time
    (the common case, and `memd status` asks it of every session)."""
    if edge is None:
        return True
    if mtime_ns and mtime_ns >= edge.timestamp() * 1e9:
        return True
    times = [t for t in (parse_iso(last_ts) if last_ts else None,
                         datetime.fromtimestamp(mtime_ns / 1e9, UTC) if mtime_ns else None) if t is not None]  # fmt: skip
    return not times or max(times) >= edge  # a session with no time at all is not held back


_ACTIVITY_SQL = """
SELECT s.key, s.session_id, s.last_ts, (SELECT MAX(f.mtime_ns) FROM files f WHERE f.session = s.id), s.safe_conv_chars
FROM sessions s WHERE s.is_subagent = 0
"""


Activity = dict[tuple[str, str], tuple[str | None, int | None, int]]  # (key, session) → (last ts, mtime, chars)
FEW = 64  # up to this many sessions are looked up one by one (the daemon's event path: one session)


def activity(conn: sqlite3.Connection, only: list[Place] | None = None) -> Activity:
    """(key, session) → (last record time, newest file mtime, conversation characters): of the
    sessions in `only` when they are few, else of every session in one query."""
    if only is not None and len(only) <= FEW:
        rows = [r for p in only for r in conn.execute(_ACTIVITY_SQL + " AND s.key = ? AND s.session_id = ?",
                                                       (p.key, p.session_id))]  # fmt: skip
    else:
        rows = list(conn.execute(_ACTIVITY_SQL))
    return {(k, sid): (ts, mt, int(chars or 0)) for k, sid, ts, mt, chars in rows}


def current_horizon(conn: sqlite3.Connection, settings: Settings, now: datetime) -> datetime | None:
    return horizon(int(settings.memory.backfill_days), now, asked_since(conn))


def keep_recent(conn: sqlite3.Connection, settings: Settings, now: datetime, due: list[Place],
                acts: Activity | None = None) -> list[Place]:  # fmt: skip
    """`due` without the sessions past the horizon (what a job's `due` returns). `acts`: every
    session's `activity`, when the caller read it already (`memd status` asks for several jobs)."""
    edge = current_horizon(conn, settings, now)
    if edge is None or not due:
        return due
    acts = activity(conn, due) if acts is None else acts
    edge_ns = edge.timestamp() * 1e9
    return [p for p in due if _recent(acts.get((p.key or "", p.session_id or "")), edge, edge_ns)]


def _recent(act: tuple[str | None, int | None, int] | None, edge: datetime, edge_ns: float | None = None) -> bool:
    """`is_recent` of one session's activity; `edge_ns` (the edge in ns, computed once a pass) answers a file
    touched since without a call."""
    if act is None or (edge_ns is not None and act[1] and act[1] >= edge_ns):
        return True
    return is_recent(act[0], act[1], edge)


@dataclass(frozen=True)
class Backlog:
    """Old sessions the jobs would take up if asked: how many, their tokens, their estimated price."""

    sessions: int
    extract: int
    summary: int
    tokens: int
    usd: float | None
    horizon: str | None
    as_of: str
    targets: tuple[tuple[str, str, str], ...] = ()  # (job, key, session id)

    def as_dict(self) -> dict[str, Any]:
        return {"sessions": self.sessions, "extract": self.extract, "summary": self.summary,
                "estimated_tokens": self.tokens, "estimated_usd": None if self.usd is None else round(self.usd, 4),
                "horizon": self.horizon, "prices_as_of": self.as_of}  # fmt: skip


def estimate(chars: Iterable[tuple[str, int]], small: str, strong: str, prices: Any) -> tuple[int, float | None]:
    """Pure: tokens and dollars for `(job, conversation characters)` pairs: an extraction is a gate
    on the small model and, at most, one strong call reading the conversation; a summary one
    strong call reading it. An upper bound: a gate that answers no spends only the gate."""
    tokens, usd, known = 0, 0.0, True
    for job, n in chars:
        body = (n + 3) // 4
        calls = [(small, GATE_TOKENS, 1), (strong, body, OUTPUT_TOKENS_PER_CALL)] if job == "extract" else \
            [(strong, body, OUTPUT_TOKENS_PER_CALL)]  # fmt: skip
        for model, tin, tout in calls:
            tokens += tin + tout
            cost = prices.cost(model, tin, tout)
            if cost is None:
                known = False
            else:
                usd += cost
    return tokens, (usd if known else None)


def backlog(conn: sqlite3.Connection, settings: Settings, now: datetime, due_all: dict[str, list[Place]],
            prices: Any, since: datetime | None = None, acts: Activity | None = None) -> Backlog:  # fmt: skip
    """The sessions in `due_all` (job → what its due check found, before the horizon) that the
    horizon holds back — or, with `since`, those active since then (what `memd backfill --since`
    would run). `acts`: every session's `activity`, when the caller read it already."""
    edge = current_horizon(conn, settings, now)
    acts = activity(conn) if acts is None else acts
    pairs: list[tuple[str, int]] = []
    targets: list[tuple[str, str, str]] = []
    edge_ns = None if edge is None else edge.timestamp() * 1e9
    for job in ("extract", "summary"):
        for p in due_all.get(job, []):
            act = acts.get((p.key or "", p.session_id or ""))
            if act is None or edge is None or _recent(act, edge, edge_ns):
                continue
            if since is not None and not is_recent(act[0], act[1], since):
                continue
            pairs.append((job, act[2]))
            targets.append((job, p.key or "", p.session_id or ""))
    tokens, usd = estimate(pairs, settings.memd.small_model, settings.memd.strong_model, prices)
    return Backlog(sessions=len({(k, s) for _j, k, s in targets}), extract=sum(1 for t in targets if t[0] == "extract"),
                   summary=sum(1 for t in targets if t[0] == "summary"), tokens=tokens, usd=usd,
                   horizon=None if edge is None else iso(edge), as_of=str(getattr(prices, "as_of", "")),
                   targets=tuple(targets))  # fmt: skip
