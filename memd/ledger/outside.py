"""Transcripts outside the home: MewCode projects' own `.mewcode/sessions/` (MewCode seed §1).

MewCode writes a session where it runs, `<project>/.mewcode/sessions/{id}.jsonl`, not under the
home. memd looks for those directories in two kinds of place (`memd.discovery.project_sessions`):

- the directories of `memd.roots` (a project, or a folder of projects);
- the projects memd already knows: the working directory the home's sessions record (Claude
  Code and deepcode write `cwd` on their records) and its git root, and the project of every
  MewCode session already in the ledger (so a project stays known when a root is removed).

A link is followed only when it ends inside one of those places.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence

from memd.discovery import MEW_SESSIONS, ProjectSessions, project_sessions, session_cwd
from memd.keys import canonical_root, key_for_root
from memd.tree import Home

_CWD_BY_PATH: dict[str, str | None] = {}  # a transcript's first cwd never changes: read once per process
_MARK = os.sep + MEW_SESSIONS + os.sep


def known_projects(conn: sqlite3.Connection, home: Home) -> list[str]:
    """Project directories memd knows from its ledger, in a stable order (see the module's docstring).

    One transcript per project key is read (its first lines, once per process), so a home of
    10,000 sessions costs one short read per key on the first call and none after.
    """
    out: dict[str, None] = {}
    homes = {os.path.realpath(home.root) + os.sep, str(home.root) + os.sep}
    rows = conn.execute(
        "SELECT key, MIN(path) FROM sessions WHERE is_subagent=0 GROUP BY key ORDER BY key"
    ).fetchall()
    for _key, path in rows:
        if path not in _CWD_BY_PATH:
            _CWD_BY_PATH[path] = session_cwd(path)
        cwd = _CWD_BY_PATH[path]
        if cwd and os.path.isabs(cwd) and os.path.isdir(cwd):
            out[cwd] = None
            out[str(canonical_root(cwd))] = None
    for (project,) in conn.execute(
        "SELECT DISTINCT substr(path, 1, instr(path, ?) - 1) FROM sessions WHERE is_subagent=0 AND path LIKE ?",
        (_MARK, f"%{_MARK}%"),
    ):
        if project and not any((project + os.sep).startswith(h) for h in homes):
            out[project] = None
    return list(out)


def find(conn: sqlite3.Connection, home: Home, roots: Sequence[str]) -> list[ProjectSessions]:
    """Every project's own sessions directory reachable from `roots` and the projects memd knows."""
    return project_sessions(home, roots, known_projects(conn, home))


def projects_of(conn: sqlite3.Connection, home: Home, key: str) -> list[str]:
    """The project directories whose sessions memd files under `key`: the project of each of its
    MewCode sessions in a project's own sessions directory, and its sessions' git root when that
    root's key is `key` (a Claude Code or deepcode session's `cwd`)."""
    out: dict[str, None] = {}
    homes = {os.path.realpath(home.root) + os.sep, str(home.root) + os.sep}
    for (path,) in conn.execute("SELECT path FROM sessions WHERE key=? AND is_subagent=0 AND path LIKE ? ORDER BY path",
                                (key, f"%{_MARK}%")):  # fmt: skip
        at = path.rfind(_MARK)
        if at > 0 and not any(path.startswith(h) for h in homes):
            out[path[:at]] = None
    first = conn.execute("SELECT MIN(path) FROM sessions WHERE key=? AND is_subagent=0", (key,)).fetchone()[0]
    if first:
        if first not in _CWD_BY_PATH:
            _CWD_BY_PATH[first] = session_cwd(first)
        cwd = _CWD_BY_PATH[first]
        if cwd and os.path.isabs(cwd) and os.path.isdir(cwd) and key_for_root(root := canonical_root(cwd)) == key:
            out[str(root)] = None
    return list(out)


def outside_keys(conn: sqlite3.Connection, home: Home) -> list[str]:
    """The keys of the sessions found in projects' own sessions directories (not under the home)."""
    homes = {os.path.realpath(home.root) + os.sep, str(home.root) + os.sep}
    rows = conn.execute("SELECT DISTINCT key, path FROM sessions WHERE is_subagent=0 AND path LIKE ? ORDER BY key",
                        (f"%{_MARK}%",))  # fmt: skip
    return list(dict.fromkeys(k for k, p in rows if not any(p.startswith(h) for h in homes)))
