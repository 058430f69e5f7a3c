"""What `memd list` shows: the memories in effect, taken from search.sqlite's rows where the files'
stats still match them (`memd.memory.scan.list_dir`), and the files that are not memories.

Here, not in `memd.cli.memories`, so that the program's click-free entry (`memd.__main__.list_call`)
and the click command build the very same document; neither click nor logging is imported on this
path. Read-only: a listing never creates or repairs the index.
"""

from __future__ import annotations

import math
import sqlite3
from functools import partial
from itertools import compress, repeat
from operator import ge, itemgetter, sub, truediv
from typing import Any

from memd.discovery import list_memory_dirs
from memd.fsutil import shown
from memd.index.search import open_readonly
from memd.index.staleness import DAY_SECONDS, days_note
from memd.memory.scan import list_dir

_NAME, _TYPE, _MTIME = itemgetter(1), itemgetter(3), itemgetter(4)  # of a `Listed` or its row


def memory_scopes(home: Any, pkey: str | None, everything: bool) -> list[tuple[str, str | None, Any]]:
    """The memory directories a listing covers: every one (`everything`), else the global drawer and
    project `pkey`'s, as (scope, project key, path)."""
    dirs = list_memory_dirs(home)
    if everything:
        return dirs
    return [d for d in dirs if d[0] == "global" or d[1] == pkey]


# Read from the `memories_listing` index alone (`memd.index.schema.EXTRA_INDEXES`), in its order: no body page, no sort.
ROWS_SQL = "SELECT file, name, description, type, mtime, size FROM memories WHERE scope = ? AND project_key IS ? ORDER BY file"


def indexed_rows(home: Any, scopes: list[tuple[str, str | None, Any]]) -> dict[tuple[str, str | None], list[Any]]:
    """search.sqlite's rows of each directory in file order, as `scan.Listed`'s fields (file,
    name, description, type, mtime, size; file home-relative): `list_dir` takes a row whose file's
    size and mtime still match (one stat) instead of reading and parsing the file, and parses the
    rest (new, changed, unindexed). An absent or unreadable database: nothing known, every file
    parsed. Read-only: listing never creates or repairs the index. A directory's rows are one
    fetch, no Python step a row; in file order (SQLite's BINARY order of UTF-8 text is Python's
    order of the names: `list_dir` compares the two lists as they are)."""
    out: dict[tuple[str, str | None], list[Any]] = {}
    try:
        conn = open_readonly(home.search_db)
    except sqlite3.Error:
        return out
    try:
        for scope, key, _path in scopes:  # the body: `list` shows none
            out[(scope, key)] = conn.execute(ROWS_SQL, (scope, key)).fetchall()
    except sqlite3.Error:
        return {}
    finally:
        conn.close()
    return out


def in_list_order(listed: list[Any]) -> None:
    """Sort a directory's listed memories (each a `Listed` or its row) by (type, name) in place, stably:
    as two stable sorts, by name and then by type, each on one string key (Python compares strings of
    one kind without a tuple a memory: 18 ms → 5 ms at 50,000 memories). Sorting by the secondary key
    first and the primary one last, both stable, is the one sort by (type, name)."""
    listed.sort(key=_NAME)
    listed.sort(key=_TYPE)


def listing(home: Any, pkey: str | None, everything: bool) -> tuple[list[tuple[str, str | None, list[Any]]], list[Any]]:
    """What `list` shows: each directory's (scope, project key, `scan.list_dir` entries) in `list`'s
    order, and the files that are not memories in effect; those search.sqlite still matches are
    taken from it (`scan.list_dir`)."""
    groups: list[tuple[str, str | None, list[Any]]] = []
    problems: list[Any] = []
    scopes = memory_scopes(home, pkey, everything)
    known = indexed_rows(home, scopes)
    by_dir: dict[tuple[str, str | None], list[Any]] = {}
    for scope, k, path in scopes:  # the problems in the directories' order, as always
        listed, bad = list_dir(path, scope, k, known.get((scope, k), []), home.root)
        in_list_order(listed)
        by_dir.setdefault((scope, k), []).extend(listed)
        problems.extend(bad)
    # `list`'s order, (global first, project key, type, name), a directory at a time: the
    # directories in that order, each one's memories sorted by (type, name) (stable: as one sort).
    for scope, k in sorted(by_dir, key=lambda d: (d[0] != "global", d[1] or "")):
        groups.append((scope, k, by_dir[(scope, k)]))
    return groups, problems


def listed_json(scope: str, key: str | None, listed: list[Any], now: float,
                notes: dict[int, str | None]) -> list[dict[str, Any]]:  # fmt: skip
    """`memd.cli.memories.memory_json` of a directory's listed memories (same keys, same order), each a
    `Listed` or its row; the staleness notes taken from `stale_notes`."""
    stale = stale_notes(list(map(_MTIME, listed)), now, notes)
    return [{"scope": scope, "project_key": key, "file": f, "name": n, "description": d, "type": t, "mtime": m,
             "size": s, "stale": note} for (f, n, d, t, m, s), note in zip(listed, stale, strict=True)]  # fmt: skip


def stale_notes(mtimes: list[float], now: float, made: dict[int, str | None]) -> list[str | None]:
    """`staleness_note(mtime, now)` of each mtime, made once a distinct age in days (`made`: a
    listing of tens of thousands of memories has a few hundred ages). The warning depends on the
    age in whole days only (`staleness.age_days`: the same floor of the same division, here over
    the whole list in C), or is None within the first day (ages up to DAY_SECONDS: all of them, or
    those few, set to None after)."""
    ages = list(map(sub, repeat(now), mtimes))
    if not ages or max(ages) <= DAY_SECONDS:  # every memory in its first day
        return [None] * len(ages)
    days = list(map(math.floor, map(truediv, ages, repeat(DAY_SECONDS))))
    for d in set(days).difference(made):
        made[d] = days_note(d) if d >= 1 else None
    notes = list(map(made.__getitem__, days))
    if min(ages) <= DAY_SECONDS:  # some in their first day (one exactly a day old has a floor of 1): no note
        for i in compress(range(len(ages)), map(partial(ge, DAY_SECONDS), ages)):
            notes[i] = None
    return notes


def listing_document(home: Any, pkey: str | None, everything: bool, now: float) -> dict[str, Any]:
    """`memd list --json`'s document: {"memories": [...], "problems": [{"file", "reason"}]}, the
    memories in `list`'s order, their staleness counted at `now` (a POSIX time).

    A listing makes a stat, a row and a JSON object a memory (150,000 containers at 50,000 memories)
    and no cycle: callers build it and write it out with the collector paused (`memd.collector.paused`),
    which then neither walks them (~7 % of the command) nor finds them all alive after."""
    groups, problems = listing(home, pkey, everything)
    notes: dict[int, str | None] = {}
    rows: list[dict[str, Any]] = []
    for scope, k, listed in groups:
        rows += listed_json(scope, k, listed, now, notes)
    return {"memories": rows, "problems": [{"file": shown(p.path), "reason": p.reason} for p in problems]}


__all__ = ["ROWS_SQL", "in_list_order", "indexed_rows", "listed_json", "listing", "listing_document", "memory_scopes", "stale_notes"]
