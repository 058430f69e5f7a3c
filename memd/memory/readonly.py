"""The read-only switch: memory that must only be read (issue 13, SPEC §12).

Where memory is read-only, memd writes **no memory file**: extraction, dream,
MCP writes, `memd remember`/`edit`/`forget` and accepting a review proposal are
refused with one line naming the switch. Everything that only reads goes on:
recall, search, `memd context`, and the indexes (`MEMORY.md`, the drawer render,
the search database) still follow hand edits, because they are derived from the
files, not new memory.

Two voices set it, and either one is enough:

* `memory.readOnly: true` in `settings.json`: every scope, every session;
* `memd readonly on|off` with `--global`, `--project KEY` / `--cwd PATH`, or
  `--session ID`, kept in `memd/readonly.json` (private, replaced atomically):
  the global drawer, one project's memory, or whatever one session would
  write (its extraction, in both scopes).

A session's *extraction* can also be paused (`/pause-memory`, `memd pause`):
pause skips what was said while paused for good; read-only keeps reading and
refuses to write. Read-only wins over review mode: no proposal is made either,
since accepting it would write.

`memd undo` stays available: it is the user's explicit repair of memd's own
writes, and refusing it would keep a bad write in place.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memd.clock import iso
from memd.errors import MemdError
from memd.fsutil import atomic_write, ensure_private_dir
from memd.settings import Settings
from memd.tree import Home

FILE_NAME = "readonly.json"


class ReadOnlyError(MemdError):
    """A write refused because the memory it targets is read-only (exit 1)."""


@dataclass
class Switches:
    """The read-only switches in effect: the settings' and `memd readonly`'s."""

    everything: bool = False  # memory.readOnly in settings.json
    global_: str | None = None  # since when the drawer is read-only (iso), or None
    projects: dict[str, str] = field(default_factory=dict)  # key → since
    sessions: dict[str, str] = field(default_factory=dict)  # session id → since

    def reason(self, scope: str, key: str | None, session_id: str | None = None) -> str | None:
        """Why a write to `scope` (global | project KEY) on behalf of `session_id` is refused, or None."""
        if self.everything:
            return "memory is read-only (memory.readOnly is true in settings.json)"
        if session_id and session_id in self.sessions:
            return f"session {session_id} is read-only (`memd readonly off --session {session_id}`)"
        if scope == "global" and self.global_:
            return "the global drawer is read-only (`memd readonly off --global`)"
        if scope == "project" and key is not None and key in self.projects:
            return f"project {key} is read-only (`memd readonly off --project {key}`)"
        return None

    def as_json(self) -> dict[str, Any]:
        return {"settings": self.everything, "global": self.global_, "projects": dict(self.projects),
                "sessions": dict(self.sessions)}  # fmt: skip


def path(home: Home) -> Path:
    return home.memd_dir / FILE_NAME


def _read(home: Home) -> dict[str, Any]:
    try:
        data = json.loads(path(home).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        # Fail closed: a damaged switch file must not silently turn writes back on.
        raise ReadOnlyError(f"{path(home)}: unreadable ({exc}); fix or remove it") from None
    return data if isinstance(data, dict) else {}


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def load(home: Home, settings: Settings | None) -> Switches:
    """The switches now. A damaged `readonly.json` raises ReadOnlyError (fail closed)."""
    data = _read(home)
    g = data.get("global")
    return Switches(
        everything=settings.memory.read_only if settings is not None else False,
        global_=str(g) if g else None,
        projects=_str_map(data.get("projects")),
        sessions=_str_map(data.get("sessions")),
    )


def reason(home: Home, settings: Settings | None, scope: str, key: str | None, session_id: str | None = None) -> str | None:
    """Why memd must not write to `scope` now, or None. The one check every writer makes
    (memwrite.apply does it per operation; dream calls it before planning)."""
    try:
        return load(home, settings).reason(scope, key, session_id)
    except ReadOnlyError as exc:
        return str(exc)


def set_switch(home: Home, *, on: bool, now: datetime, glob: bool = False, projects: Iterable[str] = (),
               sessions: Iterable[str] = ()) -> Switches:  # fmt: skip
    """Turn the named switches on or off; returns the file's switches afterwards.

    Read, change and replace under a lock file of its own, so two commands never lose each other's word.
    """

    ensure_private_dir(home.locks_dir)
    lock_path = home.locks_dir / "readonly.lock"
    from filelock import FileLock  # noqa: PLC0415 - start-up: filelock only when a lock is taken
    with FileLock(str(lock_path), mode=0o600):
        data = _read(home)
        projs = _str_map(data.get("projects"))
        sess = _str_map(data.get("sessions"))
        stamp = iso(now)
        g = data.get("global") or None
        if glob:
            g = stamp if on else None
        for k in projects:
            if on:
                projs.setdefault(k, stamp)
            else:
                projs.pop(k, None)
        for s in sessions:
            if on:
                sess.setdefault(s, stamp)
            else:
                sess.pop(s, None)
        out = {"global": g, "projects": dict(sorted(projs.items())), "sessions": dict(sorted(sess.items()))}
        ensure_private_dir(home.memd_dir)
        atomic_write(path(home), json.dumps(out, indent=2) + "\n")
    return Switches(False, str(g) if g else None, projs, sess)
