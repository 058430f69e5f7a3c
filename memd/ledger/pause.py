"""Whether memory is paused, at any point of a session (SPEC §3.4): the one place that decides.

Two voices speak: the transcript (`/pause-memory` and its aliases toggle,
`/resume-memory` resumes, in any form the agent records them: one parser,
`memd.transcripts.formats.pause_word`, for the fold and the spans alike) and the user's `memd pause` / `memd resume`. The
later word wins, whichever side said it. A CLI word is an event at the offset the
ledger had read when it was given: it sets the state there; transcript toggles
after it toggle from it.

The ledger keeps only the transcript's own parity (`paused_transcript`); each CLI
event stores that parity as it was at its offset, so the state at the end of the
session is `cli ^ (parity_now ^ parity_then)` without re-reading the transcript —
unless a `/resume-memory` came after it (the ledger counts them), which stands.
Extraction and the summary fold their span's pieces through `follow`, with the CLI
events that fall inside the span.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memd.transcripts.spans import Piece


@dataclass(frozen=True)
class CliWord:
    """`memd pause` (paused=True) or `memd resume` at a transcript offset."""

    offset: int
    paused: bool
    parity: bool  # the transcript's own pause state at `offset`
    resumes: int = 0  # the transcript's `/resume-memory` count at `offset`


def state_at_end(transcript_paused: bool, words: Sequence[CliWord], resumes: int = 0) -> bool:
    """Effective pause after the last record read (pure).

    After the last CLI word, a `/resume-memory` in the transcript (the count grew) overrules it and
    the transcript's own state stands; otherwise the toggles said since flip the CLI's word."""
    if not words:
        return transcript_paused
    last = words[-1]
    if resumes > last.resumes:
        return transcript_paused
    return last.paused ^ (transcript_paused ^ last.parity)


@dataclass
class Follow:
    """Where a reader of spans is in the pause: the state, and the record that last said a command
    (so the "Unknown command" echo answering it is not a second word). Extraction keeps both in
    its cursor; the summary too."""

    paused: bool = False
    last_uuid: str | None = None


def follow(pieces: Iterable[Piece], state: Follow, words: Sequence[CliWord] = ()) -> list[Piece]:
    """The pieces said while memory was not paused; `state` moves past them (pure but for `state`).

    `state` is the state before the first piece; a CLI word at offset X governs the pieces that end
    after X; a pause command (`memd.transcripts.formats.follow_pause`, the fold's rule too) toggles
    or resumes; commands themselves are dropped, and with them the text a command swallowed.
    """
    from memd.transcripts.formats import MEMORY_COMMANDS, PauseWord, follow_pause  # noqa: PLC0415 - start-up

    kept: list[Piece] = []
    pending = sorted(words, key=lambda w: w.offset)
    i = 0
    for p in pieces:
        while i < len(pending) and pending[i].offset < p.end:
            state.paused = pending[i].paused
            i += 1
        if p.kind == "command" and p.name in MEMORY_COMMANDS:
            word = PauseWord(p.name, echo=p.echo)
            state.paused, state.last_uuid, _ = follow_pause(state.paused, state.last_uuid, word, p.uuid, p.parent)
            continue
        if not state.paused:
            kept.append(p)
    if i < len(pending):
        state.paused = pending[-1].paused
    return kept


def unpaused(pieces: Iterable[Piece], paused: bool, words: Sequence[CliWord] = ()) -> tuple[list[Piece], bool]:
    """The pieces said while memory was not paused, and the state after them (pure; see `follow`)."""
    state = Follow(paused)
    kept = follow(pieces, state, words)
    return kept, state.paused


def words(conn: sqlite3.Connection, key: str, session_id: str, generation: int, after: int = -1) -> list[CliWord]:
    """The CLI words of a session's current transcript, after an offset, in order."""
    rows = conn.execute(
        "SELECT offset, paused, parity FROM pause_events WHERE key=? AND session_id=? AND generation=? AND offset>? "
        "ORDER BY offset, id",
        (key, session_id, generation, after),
    )
    return [CliWord(int(r[0]), bool(r[1]), bool(r[2])) for r in rows]


PAUSED_SQL = (
    "CASE WHEN pause_cli IS NULL THEN paused_transcript "
    "WHEN pause_resumes > COALESCE(pause_cli_resumes, 0) THEN paused_transcript "
    "ELSE (pause_cli != (paused_transcript != COALESCE(pause_cli_parity, paused_transcript))) END"
)


def effective(row: Any) -> bool:
    """A session row's pause state now (`memd sessions`, `status`): the row keeps the last CLI word
    and the transcript parity it was given at, so no other table is read. Same as `PAUSED_SQL`."""
    r = dict(row)
    resumes = int(r.get("pause_resumes") or 0)
    if r.get("pause_cli") is None:
        return bool(r["paused_transcript"])
    parity = r.get("pause_cli_parity")
    transcript = bool(r["paused_transcript"])
    word = CliWord(0, bool(r["pause_cli"]), transcript if parity is None else bool(parity),
                   int(r.get("pause_cli_resumes") or 0))  # fmt: skip
    return state_at_end(transcript, [word], resumes)


def say(conn: sqlite3.Connection, key: str | None, session_id: str, paused: bool, now_iso: str) -> int:
    """Record `memd pause`/`resume` for every session of that id (and key); returns how many matched."""
    q = ("SELECT s.key, s.session_id, s.generation, s.paused_transcript, s.safe_offset, s.pause_resumes "
         "FROM sessions s WHERE s.session_id=?")  # fmt: skip
    args: tuple[Any, ...] = (session_id,)
    if key is not None:
        q, args = q + " AND s.key=?", (session_id, key)
    rows = conn.execute(q, args).fetchall()
    for r in rows:
        conn.execute(
            "INSERT INTO pause_events(key, session_id, generation, offset, paused, parity, ts) VALUES (?,?,?,?,?,?,?)",
            (r[0], r[1], r[2], _read_offset(conn, r[0], r[1]), int(paused), int(r[3]), now_iso),
        )
        conn.execute("UPDATE sessions SET pause_cli=?, pause_cli_ts=?, pause_cli_parity=?, pause_cli_resumes=? "
                     "WHERE key=? AND session_id=?", (int(paused), now_iso, int(r[3]), int(r[5] or 0), r[0], r[1]))  # fmt: skip
    return len(rows)


def _read_offset(conn: sqlite3.Connection, key: str, session_id: str) -> int:
    """How far the ledger has read the session's main transcript: where a CLI word takes effect."""
    row = conn.execute(
        "SELECT f.offset FROM files f JOIN sessions s ON s.id = f.session "
        "WHERE s.key=? AND s.session_id=? AND f.role='main'",
        (key, session_id),
    ).fetchone()
    return int(row[0]) if row else 0
