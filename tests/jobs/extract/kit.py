"""Shared pieces of the corpus tests: reading transcript records, and a read-only look at the daemon's state."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memd import state
from memd.tree import Home


def records(path: Path) -> Iterator[dict[str, Any]]:
    for line in path.read_bytes().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield rec


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside a record's message, however deeply nested (text, tool inputs, results)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)


_PLAIN = re.compile(r"^[\x20-\x7e]+$")


def snippets(text: str, min_len: int = 40) -> Iterator[str]:
    """Single-line ASCII pieces without quotes or backslashes: identical raw and JSON-escaped,
    so finding (or not finding) one in a prompt means the same in every rendering."""
    for line in text.splitlines():
        s = line.strip()
        if len(s) >= min_len and _PLAIN.match(s) and '"' not in s and "\\" not in s:
            yield s[:80]


def state_rows(home: Path, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """A read-only look at the daemon's state DB (it keeps writing meanwhile: WAL)."""
    db = Home(home).state_db
    if not db.exists():
        return []
    try:
        conn = state.connect(db, readonly=True)
    except state.StateError:
        return []  # the daemon has created the file but not its schema yet
    try:
        return [dict(r) for r in conn.execute(sql, args)]
    except Exception:
        return []
    finally:
        conn.close()
