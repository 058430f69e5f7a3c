"""Projects and sessions by the names a user types (`memd sessions --project KEY`, `pause ID`, …).

An unknown name is a usage error (exit 2) with one line naming it, never a silent exit 0
over nothing. A session id may be given by a unique prefix (as git takes a short commit
id); an ambiguous prefix is a usage error listing the candidates (`one_of`, which
`memd.history.lookup` uses for run ids too). Reads the ledger and the tree; never writes.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from memd import state
from memd.discovery import list_project_keys
from memd.errors import UsageError
from memd.tree import Home

CANDIDATES_SHOWN = 8


def one_of(kind: str, text: str, hits: list[str], hint: str) -> str:
    """The one id `text` names among `hits` (already filtered by prefix), else a usage error."""
    if text in hits:
        return text
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise UsageError(f"no {kind} {text!r} (see `{hint}`)")
    shown = ", ".join(sorted(hits)[:CANDIDATES_SHOWN]) + (", …" if len(hits) > CANDIDATES_SHOWN else "")
    raise UsageError(f"{kind} {text!r} is ambiguous: {len(hits)} match ({shown}); give more of it")


def project_keys(home: Home, conn: sqlite3.Connection | None = None) -> list[str]:
    """Projects this home knows: a directory under projects/, or a key the ledger holds."""
    keys = set(list_project_keys(home))
    if conn is not None:
        keys.update(r[0] for r in conn.execute("SELECT DISTINCT key FROM sessions"))
    return sorted(keys)


def check_project(home: Home, key: str | None, conn: sqlite3.Connection | None = None) -> str | None:
    """`--project KEY` as given when the home knows it (None passes through)."""
    if key is None:
        return None
    if key in project_keys(home, conn):
        return key
    raise UsageError(f"no project {key!r} in {home.root} (see `memd sessions` or `memd list --all`)")


def _session_rows(conn: sqlite3.Connection, text: str, key: str | None) -> list[tuple[str, str]]:
    q = "SELECT key, session_id FROM sessions WHERE is_subagent=0 AND substr(session_id, 1, ?) = ?"
    args: tuple[Any, ...] = (len(text), text)
    if key:
        q, args = q + " AND key = ?", (*args, key)
    return [(r[0], r[1]) for r in conn.execute(q, args)]


def resolve_session(conn: sqlite3.Connection, text: str, key: str | None = None) -> tuple[str, str]:
    """(project key, session id) of the session `text` names: its id or a unique prefix of it."""
    if not text:
        raise UsageError("an empty session id")
    rows = _session_rows(conn, text, key)
    exact = [r for r in rows if r[1] == text]
    if exact:
        rows = exact
    sid = one_of("session", text, sorted({r[1] for r in rows}), "memd sessions")
    where = sorted({r[0] for r in rows if r[1] == sid})
    if len(where) > 1:
        raise UsageError(f"session {sid!r} exists in several projects ({', '.join(where)}): name one with --project")
    return where[0], sid


def session_known(home: Home, text: str, key: str | None = None) -> tuple[str, str]:
    """`resolve_session` over the home's ledger, after one scan when the ledger does not know it yet."""
    from memd.ledger.scan import scan_home  # noqa: PLC0415 - start-up: a scan only for a session not read yet

    for attempt in (0, 1):
        if attempt:
            scan_home(home, key=key)
        if not home.state_db.exists():
            continue
        conn = state.connect(home.state_db, readonly=True)
        try:
            if _session_rows(conn, text, key) or attempt:
                return resolve_session(conn, text, key)
        finally:
            conn.close()
    raise UsageError(f"no session {text!r} (see `memd sessions`)")
