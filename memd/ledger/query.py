"""Read-side queries of the ledger for status and the CLI: unrecognised record types, stuck and
held-back sessions, and the CLI's pause on a session row.
"""

from __future__ import annotations

import sqlite3
from typing import Any


def set_cli_pause(conn: sqlite3.Connection, key: str | None, session_id: str, paused: bool, now_iso: str) -> int:
    """Record a CLI pause on the row only (0 = unknown id). `memd pause` goes through `memd.ledger.pause.say`,
    which also keeps the word's offset and the transcript's parity then; this stays for old callers."""
    if key is None:
        cur = conn.execute(
            "UPDATE sessions SET pause_cli=?, pause_cli_ts=? WHERE session_id=?", (int(paused), now_iso, session_id)
        )
    else:
        cur = conn.execute(
            "UPDATE sessions SET pause_cli=?, pause_cli_ts=? WHERE key=? AND session_id=?",
            (int(paused), now_iso, key, session_id),
        )
    return cur.rowcount


def effective_pause(row: sqlite3.Row | dict[str, Any]) -> bool:
    """The older rule (the later timestamp wins); `memd.ledger.pause.effective` is the one rule now and the
    ledger no longer uses this: the tally's `paused` is the transcript's own parity."""
    cli = row["pause_cli"]
    if cli is None:
        return bool(row["paused_transcript"])
    toggled = row["pause_toggled_ts"]
    if toggled is not None and row["pause_cli_ts"] is not None and str(toggled) > str(row["pause_cli_ts"]):
        return bool(row["paused_transcript"])
    return bool(cli)


def unknown_record_types(conn: sqlite3.Connection) -> dict[str, int]:
    """Every unrecognised record type of the home with how often it was seen."""
    rows = conn.execute("SELECT type, SUM(count) FROM record_types GROUP BY type ORDER BY 2 DESC, 1")
    return {str(r[0]): int(r[1]) for r in rows}


def stuck_sessions(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Sessions whose last ingest failed: the ledger cannot advance them (health is progress)."""
    rows = conn.execute(
        "SELECT key, session_id, ingest_error, ingest_error_ts FROM sessions WHERE ingest_error IS NOT NULL "
        "ORDER BY ingest_error_ts DESC LIMIT 50"
    )
    return [{"key": r[0], "session_id": r[1], "reason": r[2], "since": r[3]} for r in rows]


def held_back(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Sessions whose safe offset is behind what was read because a tool call waits for its result
    (SPEC §7.2), with the timestamp of the record that made the call (`since`), oldest first."""
    rows = conn.execute(
        "SELECT s.key, s.session_id, s.safe_offset, f.offset, s.tool_pending, json_extract(s.carry, '$.pending_ts') "
        "FROM sessions s JOIN files f ON f.session = s.id AND f.role = 'main' "
        "WHERE s.is_subagent = 0 AND s.tool_pending > 0 AND s.safe_offset < f.offset "
        "ORDER BY 6, s.key, s.session_id"
    )
    return [{"key": r[0], "session_id": r[1], "safe_offset": r[2], "read_offset": r[3], "held_bytes": r[3] - r[2],
             "pending": r[4], "since": r[5]} for r in rows]  # fmt: skip
