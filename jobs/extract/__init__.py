"""The extraction gate and extraction (SPEC §3).

Every `extractEveryTurns` human turns of a session that is not paused:

1. a deterministic pre-gate (no model call when the new span holds no user text
   of substance: only tool output, commands or a word or two);
2. the gate: a small model answers yes or no — is there durable information? —
   anything else counts as no, with a warning;
3. on yes, extraction: a stronger model sees the span, both scopes' MEMORY.md and
   the bodies of the memories it may touch, and answers add/update/delete
   operations as JSON; each is validated and applied atomically; the indexes follow;
4. the cursor moves only once all of that is durable.

The offline provider answers 2 and 3 deterministically (module `offline`).

The package, by module: `trigger` (due-ness), `gate` (pause, pre-gate and
what the gate reads), `prompt` (what extraction is sent, related memories),
`offline` (the offline provider's rules) and `runner` (the run itself). The
shared write path (`memd.write.apply.apply`) applies the operations. This module
is the job's contract with the daemon and nothing else.
"""

from __future__ import annotations

from typing import Any

from jobs.extract.runner import run
from jobs.extract.trigger import NAME, extract_due
from memd.job.backfill import keep_recent
from memd.job.context import JobContext
from memd.tree import Place

__all__ = ["NAME", "NEEDS_MODEL", "TARGET_KINDS", "TRIGGER", "due", "due_all", "run", "scopes", "targets"]

TRIGGER = "every extractEveryTurns human turns of a session not paused (gate first; extraction only on yes)"
NEEDS_MODEL = True
TARGET_KINDS: tuple[str, ...] = ("session",)


def scopes(target: Place) -> list[Place]:
    """No lock for the whole run: the gate and the extraction call hold none, and the apply takes
    the drawer's and the memory project's locks itself (its project is known only once the
    session's cwd is read, and no lock is held while a model answers)."""
    return []


def targets(ctx: JobContext) -> list[Place]:
    from memd.ledger.store import session_rows

    return [Place("session", r["key"], r["session_id"]) for r in session_rows(ctx.conn)]


_DUE_SQL = """
SELECT s.key, s.session_id, s.safe_human_turns, s.safe_offset,
       COALESCE(json_extract(c.value, '$.human_turns'), 0), COALESCE(json_extract(c.value, '$.offset'), 0)
FROM sessions s LEFT JOIN cursors c ON c.job = 'extract' AND c.target = 'session:' || s.key || ':' || s.session_id
WHERE s.is_subagent = 0 AND s.safe_offset > COALESCE(json_extract(c.value, '$.offset'), 0)
"""


def due(ctx: JobContext, only: Place | None = None) -> list[Place]:
    """What `due_all` finds, less the sessions idle past `memory.backfillDays` (SPEC §8.3: those
    wait for `memd backfill`, shown as the backlog by `memd status`)."""
    return keep_recent(ctx.conn, ctx.settings, ctx.now(), due_all(ctx, only))


def due_all(ctx: JobContext, only: Place | None = None) -> list[Place]:
    """Sessions with enough new human turns; one query, so a due-check over 10,000 idle sessions is cheap."""
    enabled = bool(ctx.settings.memory.enabled)
    every = int(ctx.settings.memory.extract_every_turns)
    q = _DUE_SQL
    args: tuple[Any, ...] = ()
    if only is not None:
        q, args = q + " AND s.key = ? AND s.session_id = ?", (only.key, only.session_id)
    out: list[Place] = []
    for key, sid, turns, safe, cur_turns, cur_off in ctx.conn.execute(q, args):
        if extract_due(turns - cur_turns, every, safe - cur_off, enabled)[0]:
            out.append(Place("session", key, sid))
    return out
