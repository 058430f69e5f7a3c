"""The rolling session summary (SPEC §4): `summary.md` beside each session.

A long session keeps a summary so that compacting the conversation does not
lose its early key information. The job is incremental on purpose: an update
reads the previous summary and only the transcript since the summary's cursor,
so its cost follows the new conversation, not the whole session (re-sending
the transcript at every update grows quadratically with the session).

Shape of the package, so each half is testable alone:

* pure decisions: `trigger` (`summary_due`: the thresholds), `document`
  (`parse_summary` / `render_summary`: the fixed sections, `bound_summary`:
  size caps), `offline` (`offline_summary`: the no-network provider), `prompt`
  (`build_user_prompt`, `chunk_pieces`, and the model calls);
* I/O at the edges: `runner` (`facts_of` / `cursor_of` gather the ledger's
  numbers; `run` reads the span, calls the model, writes `summary.md`
  atomically and only then advances the cursor, DESIGN "Cursor rule").

This module is the job's contract with the daemon and nothing else.

Invariants:

* The job never reads past the ledger's safe offset (§7.2), so a summary never
  ends in the middle of an unanswered tool call.
* A compaction in the transcript does not reset the summary: the cursor is a
  byte offset in an append-only file, and the old lines stay in it.
* Model output is untrusted: it is parsed into the known sections, unknown
  headings are dropped, missing sections come from the previous summary,
  secrets are redacted and every size is capped before anything is written.
* `summary.md` is replaced atomically; the cursor moves after the rename, so a
  crash repeats an update and never skips one.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from jobs.summary.runner import cursor_of, facts_of, run
from jobs.summary.trigger import NAME, Thresholds, summary_due
from memd.job.backfill import keep_recent
from memd.job.context import JobContext
from memd.tree import Place

__all__ = ["NAME", "NEEDS_MODEL", "TARGET_KINDS", "TRIGGER", "due", "due_all", "run", "scopes", "targets"]

TRIGGER = "a session passed minInitTokens, then every minUpdateTokens more with toolCallsBetween tool calls or a natural break"
NEEDS_MODEL = True
TARGET_KINDS: tuple[str, ...] = ("session",)


def scopes(target: Place) -> list[Place]:
    assert target.key and target.session_id, target
    return [Place.session(target.key, target.session_id)]


def targets(ctx: JobContext) -> list[Place]:
    from memd.ledger.store import session_rows

    return [Place("session", r["key"], r["session_id"]) for r in session_rows(ctx.conn)]


_CANDIDATES_SQL = """
SELECT s.key, s.session_id, s.safe_offset, s.safe_conv_chars, s.safe_tool_calls, s.natural_break, s.tool_pending
FROM sessions s LEFT JOIN cursors c ON c.job = 'summary' AND c.target = 'session:' || s.key || ':' || s.session_id
WHERE s.is_subagent = 0 AND (s.safe_conv_chars + 3) / 4 >= ?
  AND s.safe_offset != COALESCE(json_extract(c.value, '$.offset'), -1)
"""


def due(ctx: JobContext, only: Place | None = None) -> list[Place]:
    """What `due_all` finds, less the sessions idle past `memory.backfillDays` (SPEC §8.3: those
    wait for `memd backfill`, shown as the backlog by `memd status`)."""
    return keep_recent(ctx.conn, ctx.settings, ctx.now(), due_all(ctx, only))


def due_all(ctx: JobContext, only: Place | None = None) -> list[Place]:
    """Sessions due for a summary. One query narrows 10,000 idle sessions to those with
    new bytes past `minInitTokens`; the pure `summary_due` decides for those few."""
    th = Thresholds.of(ctx.settings)
    if not th.enabled:
        return []
    q = _CANDIDATES_SQL
    args: tuple[Any, ...] = (th.min_init_tokens,)
    if only is not None:
        q, args = q + " AND s.key = ? AND s.session_id = ?", (*args, only.key, only.session_id)
    cur = ctx.conn.cursor()
    cur.row_factory = sqlite3.Row
    out = []
    for row in cur.execute(q, args):
        t = Place("session", row["key"], row["session_id"])
        if summary_due(facts_of(row), cursor_of(ctx, t), th)[0]:
            out.append(t)
    return out
