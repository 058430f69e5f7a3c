"""The `memd sessions --json` row, defined once.

`FIELDS` names each JSON field and the SQL expression over a `sessions` row that
gives it. SQLite builds the whole `--json` answer in one string from it (10,000
sessions without a Python object each: `sessions_json_text`); `list_sessions` parses
that same answer; `session_json` builds one row in Python from a ledger row, and a
test holds it equal to the SQL. The fields are a stable interface (README,
"memd sessions --json").
"""

from __future__ import annotations

import sqlite3
from typing import Any

# The later word wins: the transcript's last toggle or the CLI's pause/resume
# (`pause.effective` in Python).
from memd.ledger.pause import PAUSED_SQL

_NO_HOOKS = '{"context":0,"prompts":0,"recalls":0,"memories":0,"compacts":0}'

# (JSON field, SQL expression). "usage.input" is `input` inside the `usage` object.
FIELDS: tuple[tuple[str, str], ...] = (
    ("key", "key"),
    ("session_id", "session_id"),
    ("format", "format"),
    ("path", "path"),
    ("bytes_read", "bytes_read"),
    ("records", "records"),
    ("bad_lines", "bad_lines"),
    ("human_turns", "human_turns"),
    ("assistant_turns", "assistant_turns"),
    ("tool_calls", "tool_calls"),
    ("tool_calls_pending", "tool_pending"),
    ("tokens", "(conv_chars + 3) / 4"),  # transcripts.tokens_of
    ("usage.input", "usage_input"),
    ("usage.output", "usage_output"),
    ("usage.cache_creation", "usage_cache_creation"),
    ("usage.cache_read", "usage_cache_read"),
    ("compactions", "compactions"),
    ("paused", PAUSED_SQL),
    ("first_ts", "first_ts"),
    ("last_ts", "last_ts"),
    ("safe_offset", "safe_offset"),
    ("natural_break", "natural_break"),
    # What memd's agent hooks did in the session (memd.agent.hooks keeps the counts in kv).
    ("hooks", f"json(COALESCE((SELECT v FROM kv WHERE k = 'hooks:' || session_id), '{_NO_HOOKS}'))"),
)
BOOLEANS = frozenset({"paused", "natural_break"})
ORDER = "ORDER BY key, first_ts, session_id"


def _json_object_sql() -> str:
    """`json_object(...)` of one row: FIELDS in order, dotted names nested, booleans as JSON."""
    top: list[tuple[str, Any]] = []  # (name, SQL) or (name, [(sub-name, SQL), ...])
    nested: dict[str, list[tuple[str, str]]] = {}
    for name, expr in FIELDS:
        if name in BOOLEANS:
            expr = f"CASE WHEN ({expr}) THEN json('true') ELSE json('false') END"
        parent, _, sub = name.rpartition(".")
        if not parent:
            top.append((name, expr))
        elif parent in nested:
            nested[parent].append((sub, expr))
        else:
            nested[parent] = [(sub, expr)]
            top.append((parent, nested[parent]))

    def obj(items: list[tuple[str, Any]]) -> str:
        return "json_object(" + ", ".join(
            f"'{n}', {obj(e) if isinstance(e, list) else e}" for n, e in items
        ) + ")"  # fmt: skip

    return obj(top)


_ROW_SQL = _json_object_sql()


def sessions_json_text(conn: sqlite3.Connection, key: str | None = None) -> str:
    """`memd sessions --json` (every main session, or one project's) built by SQLite in one string."""
    where = "AND key = ?" if key else ""
    q = f"SELECT json_group_array({_ROW_SQL}) FROM (SELECT * FROM sessions WHERE is_subagent = 0 {where} {ORDER})"
    return str(conn.execute(q, (key,) if key else ()).fetchone()[0])


def list_sessions(conn: sqlite3.Connection, key: str | None = None) -> list[dict[str, Any]]:
    """Every session as `memd sessions --json` prints it, one dict a row."""
    import orjson  # noqa: PLC0415 - start-up: orjson only where JSON is read (the hooks skip it)

    rows: list[dict[str, Any]] = orjson.loads(sessions_json_text(conn, key))
    return rows


def session_json(row: Any, conn: sqlite3.Connection | None = None) -> dict[str, Any]:
    """One ledger row (from `ledger.session_rows`) in the `memd sessions --json` form.

    `hooks` lives in the state's kv, not in the row: without `conn` it reads as none.
    """

    import json  # noqa: PLC0415 - start-up
    def hooks(r: Any) -> dict[str, int]:
        found = conn.execute("SELECT v FROM kv WHERE k = ?", (f"hooks:{r['session_id']}",)).fetchone() if conn else None
        return dict(json.loads(found[0] if found else _NO_HOOKS))

    from memd.ledger.pause import effective  # noqa: PLC0415 - start-up
    from memd.transcripts.formats import tokens_of  # noqa: PLC0415 - start-up
    computed = {"tokens": lambda r: tokens_of(r["conv_chars"]), "paused": effective, "hooks": hooks}
    out: dict[str, Any] = {}
    for name, expr in FIELDS:
        value = computed[name](row) if name in computed else row[expr]
        if name in BOOLEANS:
            value = bool(value)
        parent, _, sub = name.rpartition(".")
        if parent:
            out.setdefault(parent, {})[sub] = value
        else:
            out[name] = value
    return out


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    """How many main sessions there are and how many of them are paused (`memd status`)."""
    n, paused = conn.execute(
        f"SELECT COUNT(*), COALESCE(SUM(CASE WHEN ({PAUSED_SQL}) THEN 1 ELSE 0 END), 0) "
        "FROM sessions WHERE is_subagent=0"
    ).fetchone()
    return {"count": int(n), "paused": int(paused)}
