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

import contextlib
import json
import os
import sqlite3
from collections.abc import Sequence

from memd.discovery import MEW_SESSIONS, ProjectSessions, project_sessions, session_cwd
from memd.keys import canonical_root, key_for_root
from memd.tree import Home

_CWD_BY_PATH: dict[str, str | None] = {}  # a transcript's first cwd never changes: read once per process
_MARK = os.sep + MEW_SESSIONS + os.sep
KNOWN_KV = "mewcode:known-projects"  # {transcript path: [cwd, git root] or []}: each read once per ledger


def known_projects(conn: sqlite3.Connection, home: Home, keys: dict[str, str] | None = None) -> list[str]:
    """Project directories memd knows from its ledger, in a stable order (see the module's docstring).

    One transcript per project key is read for its `cwd` (its first lines), and what it said is kept
    in the state database (`kv`), so each is read once, not at every scan of every process; a home of
    10,000 sessions costs one query and one small JSON value afterwards.
    """
    from memd.state import get_kv, set_kv  # noqa: PLC0415 - start-up

    out: dict[str, None] = {}
    homes = {os.path.realpath(home.root) + os.sep, str(home.root) + os.sep}
    try:
        said: dict[str, list[str]] = json.loads(get_kv(conn, KNOWN_KV) or "{}")
    except ValueError:
        said = {}
    grew = False
    for (path,) in conn.execute("SELECT MIN(path) FROM sessions WHERE is_subagent=0 GROUP BY key ORDER BY key"):
        if path not in said:
            said[path], grew = _project_of_cwd(path), True
        for p in said[path]:
            out[p] = None
    if grew:
        with contextlib.suppress(sqlite3.Error):  # a read-only ledger: read again next time
            set_kv(conn, KNOWN_KV, json.dumps(said, separators=(",", ":")))
    for sessions, key in conn.execute(
        "SELECT DISTINCT substr(path, 1, instr(path, ?) + ? - 1), key FROM sessions WHERE is_subagent=0 AND path LIKE ?",
        (_MARK, len(_MARK) - 1, f"%{_MARK}%"),
    ):
        project = os.path.dirname(os.path.dirname(sessions))
        if project and not any((project + os.sep).startswith(h) for h in homes):
            out[project] = None
            if keys is not None:
                keys.setdefault(sessions, key)
    return list(out)


def _project_of_cwd(path: str) -> list[str]:
    """The working directory a transcript records and its git root ([] without one)."""
    if path not in _CWD_BY_PATH:
        _CWD_BY_PATH[path] = session_cwd(path)
    cwd = _CWD_BY_PATH[path]
    if not (cwd and os.path.isabs(cwd) and os.path.isdir(cwd)):
        return []
    root = str(canonical_root(cwd))
    return [cwd] if root == cwd else [cwd, root]


def learn_cwds(paths: Sequence[str]) -> None:
    """Read the working directory of each of `paths` now, for `known_projects` to find later: a
    parallel first scan does it while its workers read (the scan's next `find` asks for the first
    transcript of each project key it has just read)."""
    for path in paths:
        if path not in _CWD_BY_PATH:
            _CWD_BY_PATH[path] = session_cwd(path)


def find(conn: sqlite3.Connection, home: Home, roots: Sequence[str]) -> list[ProjectSessions]:
    """Every project's own sessions directory reachable from `roots` and the projects memd knows."""
    keys: dict[str, str] = {}
    known = known_projects(conn, home, keys)
    return project_sessions(home, roots, known, keys)


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
    for project in _project_of_cwd(first) if first else []:
        if key_for_root(project) == key:
            out[project] = None
    return list(out)


def outside_keys(conn: sqlite3.Connection, home: Home) -> list[str]:
    """The keys of the sessions found in projects' own sessions directories (not under the home)."""
    homes = {os.path.realpath(home.root) + os.sep, str(home.root) + os.sep}
    rows = conn.execute("SELECT DISTINCT key, path FROM sessions WHERE is_subagent=0 AND path LIKE ? ORDER BY key",
                        (f"%{_MARK}%",))  # fmt: skip
    return list(dict.fromkeys(k for k, p in rows if not any(p.startswith(h) for h in homes)))
