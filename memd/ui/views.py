"""What each page shows, read from the home: plain data, no HTML (`memd.ui.pages` renders it).

Read-only: nothing here writes. A memory is named by its scope (`global` or `project:KEY`, parsed
by `Place.parse`, so no name can leave the home) and its file name as the scan of that directory
found it: the page never opens a path a request spelled.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

from memd import settings as st
from memd import state
from memd.daemon.status import gather
from memd.discovery import list_memory_dirs
from memd.errors import UsageError
from memd.fsutil import shown
from memd.history import kept, provenance
from memd.history.runs import list_runs
from memd.history.writes import BEFORE_DIR
from memd.index.staleness import staleness_note
from memd.ledger.sessions import list_sessions
from memd.memory.file import Memory
from memd.memory.scan import scan_dir
from memd.tree import Home, Place
from memd.write import proposals

TIMELINE_RUNS = 100
SESSIONS_SHOWN = 60
SUMMARY_CHARS = 400


def place_of(scope: str) -> Place:
    """`global` or `project:KEY` as a memory Place; anything else is a usage error (400)."""
    try:
        place = Place.parse(scope)
    except ValueError as exc:
        raise UsageError(f"scope {scope!r}: {exc}") from None
    if place.kind not in ("global", "project"):
        raise UsageError(f"scope {scope!r}: not a memory scope")
    return place


def scopes(home: Home) -> list[tuple[Place, list[Memory], list[str]]]:
    """Every memory directory, the drawer first: (place, memories by name, problems)."""
    out = []
    for scope, key, path in list_memory_dirs(home):
        r = scan_dir(path, scope, key)
        place = Place.memory(None if scope == "global" else key)
        out.append((place, sorted(r.memories, key=lambda m: (m.type, m.name.casefold())),
                    [f"{shown(p.path.name)}: {p.reason}" for p in r.problems]))  # fmt: skip
    return out


def matches(m: Memory, query: str) -> bool:
    """Every word of the query in the name, description, type or body (case-folded)."""
    hay = " ".join((m.name, m.description, m.type, m.body)).casefold()
    return all(w in hay for w in query.casefold().split())


def memory_row(m: Memory, now: datetime) -> dict[str, Any]:
    return {"name": m.name, "file": m.path.name, "type": m.type, "description": m.description,
            "age_seconds": max(0, int(now.timestamp() - m.mtime)), "stale": staleness_note(m.mtime, now)}  # fmt: skip


def find_memory(home: Home, place: Place, file: str) -> Memory:
    directory = place.memory_dir(home)
    scope = "global" if place.is_global else "project"
    for m in scan_dir(directory, scope, place.key).memories:
        if m.path.name == file:
            return m
    raise UsageError(f"no memory file {file!r} in {place}")


def _read(path: Path) -> str | None:
    try:
        if path.is_symlink() or not path.is_file():
            return None
        return path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return None


def _before_state(run: dict[str, Any], file: str) -> tuple[bool, str | None]:
    """(known, text) of `file` just before `run`: a snapshot knows every file; a write run only those it changed."""
    entry = Path(str(run.get("path")))
    if run.get("kind") == "write":
        files = run.get("files")
        if not isinstance(files, dict) or file not in files:
            return False, None
        return True, None if files[file].get("before") is None else _read(entry / BEFORE_DIR / file)
    if kept.has_snapshot(entry):
        got = kept.read_file(entry, file)
        return True, None if got is None else got[0].decode("utf-8", "replace")
    return False, None


def diff(before: str | None, after: str | None, file: str) -> str:
    a = (before or "").splitlines(keepends=True)
    b = (after or "").splitlines(keepends=True)
    lines = difflib.unified_diff(a, b, "/dev/null" if before is None else f"a/{file}",
                                 "/dev/null" if after is None else f"b/{file}")  # fmt: skip
    return "".join(x if x.endswith("\n") else x + "\n" for x in lines)


def file_history(home: Home, place: Place, file: str) -> list[dict[str, Any]]:
    """Every run that changed `file`, newest first, each with its diff.

    The file's text after a run is its text before the next run that knew it (a snapshot, or a
    write run that changed it), or today's file after the last: what a run left is what the next
    one found. A run whose before and after are equal did not change it and is left out.
    """
    seen = []
    for run in list_runs(home, place):
        known, text = _before_state(run, file)
        if known:
            seen.append((run, text))
    current = _read(place.memory_dir(home) / file)
    out = []
    for i, (run, before) in enumerate(seen):
        after = seen[i + 1][1] if i + 1 < len(seen) else current
        if before == after:
            continue
        out.append({"run": run["run"], "kind": run.get("kind"), "job": run.get("job"), "time": run.get("time"),
                    "reason": run.get("reason") or (run.get("undo_of") and f"undo of {run.get('undo_of')}"),
                    "diff": diff(before, after, file)})  # fmt: skip
    return list(reversed(out))


def memory_page(home: Home, place: Place, file: str, now: datetime) -> dict[str, Any]:
    """One memory: its row, text, provenance and history. A memory gone (forgotten, undone) still has its
    history, from which it can be brought back; a file with neither is unknown (UsageError)."""
    try:
        m: Memory | None = find_memory(home, place, file)
    except UsageError:
        m = None
    history = file_history(home, place, file) if "/" not in file and file.endswith(".md") else []
    if m is None:
        if not history:
            raise UsageError(f"no memory file {file!r} in {place}")
        return {"scope": str(place), "row": None, "file": file, "history": history}
    data = m.path.read_bytes()
    return {"scope": str(place), "row": memory_row(m, now), "file": file, "text": data.decode("utf-8", "replace"),
            "base": hashlib.sha256(data).hexdigest(), "why": provenance.explain(home, m, now), "history": history}  # fmt: skip


def proposal_rows(home: Home, now: datetime) -> list[dict[str, Any]]:
    out = []
    for p in proposals.list_proposals(home):
        info = p.info
        files = [{"n": n, "file": c.get("file"), "name": c.get("name"), "action": c.get("action"),
                  "scope": "global" if c.get("scope") == "global" else f"project:{c.get('key')}",
                  "text": p.proposed_text(n) if c.get("action") != "delete" else None}
                 for n, c in enumerate(p.changes)]  # fmt: skip
        t = p.time
        out.append({"id": p.id, "job": info.get("job"), "kind": info.get("kind"), "reason": info.get("reason"),
                    "session": info.get("session") or None, "age_seconds": int((now - t).total_seconds()) if t else None,
                    "diff": info.get("diff") or "", "check": info.get("check"), "edited": bool(info.get("edited")),
                    "files": files})  # fmt: skip
    return out


def _summary(home: Home, key: str, sid: str) -> tuple[str | None, str | None]:
    """A session's title (its summary's `# ` line) and the summary's opening, when it has one."""
    try:
        text = home.summary_file(key, sid).read_text(encoding="utf-8", errors="replace")[:20_000]
    except (OSError, ValueError):
        return None, None
    title = next((ln[2:].strip() for ln in text.splitlines() if ln.startswith("# ")), None)
    body = " ".join(ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))
    return title, (body[:SUMMARY_CHARS] + "…" if len(body) > SUMMARY_CHARS else body) or None


def _own_title(path: str) -> str | None:
    """A session without a summary: the title the agent gave it (MewCode's `.meta`), else its first
    prompt, redacted; a malformed `.meta` is said in the log, the page shows the session anyway."""
    from memd.logs.events import get_logger  # noqa: PLC0415 - start-up
    from memd.redact.redactor import may_hold_secret, redact  # noqa: PLC0415 - start-up
    from memd.transcripts.titles import session_title  # noqa: PLC0415 - start-up

    log = get_logger("memd.ui")
    title = session_title(Path(path), warn=lambda line: log.warning("session.meta_ignored", problem=line))
    return redact(title) if title and may_hold_secret(title) else title


def daemon_page(home: Home, now: datetime) -> dict[str, Any]:
    """`memd status` as data, the last runs of every job (newest first) and the sessions (latest first)."""
    data = gather(home, now)
    data["timeline"], data["session_rows"] = [], []
    if not home.state_db.exists():
        return data
    conn = state.connect(home.state_db, readonly=True)
    try:
        data["timeline"] = [dict(r) for r in conn.execute(
            "SELECT run_id, job, target, started_at, finished_at, outcome, duration_ms, reason, error FROM runs "
            "ORDER BY id DESC LIMIT ?", (TIMELINE_RUNS,))]  # fmt: skip
        rows = sorted(list_sessions(conn), key=lambda r: str(r.get("last_ts") or ""), reverse=True)
    except sqlite3.Error as exc:
        data["warnings"].append(f"{home.state_db}: {exc}")
        rows = []
    finally:
        conn.close()
    for r in rows[:SESSIONS_SHOWN]:
        title, summary = _summary(home, r["key"], r["session_id"])
        data["session_rows"].append({**r, "title": title or _own_title(r["path"]), "summary": summary})
    data["sessions_total"] = len(rows)
    return data


def dream_runs(home: Home) -> list[dict[str, Any]]:
    """Dream runs and their undos, newest first, every scope."""
    return [r for r in reversed(list_runs(home)) if r.get("kind") in ("dream", "undo")
            or r.get("proposed_by") == "dream"]  # a dream accepted in review mode is a write run


def version(home: Home) -> str:
    """A cheap fingerprint of what the pages show: sizes and times of the state database, the memory
    directories, the proposals and the history. It changes when the daemon (or anyone) does something."""
    paths = [home.state_db, Path(f"{home.state_db}-wal"), proposals.root(home), home.history_dir,
             home.global_memory, home.settings_file]
    try:
        paths += [home.history_dir / n for n in os.listdir(home.history_dir)]
    except OSError:
        pass
    paths += [p for _s, _k, p in list_memory_dirs(home)]
    parts = []
    for p in paths:
        try:
            s = os.stat(p)
            parts.append(f"{s.st_mtime_ns:x}.{s.st_size:x}")
        except OSError:
            parts.append("-")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def settings_of(home: Home) -> st.Settings:
    return st.load(home.settings_file)
