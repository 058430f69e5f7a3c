"""Where things are: the `$DEEPCODE_HOME` tree of SPEC §1 and the places memd works on.

`Home` names the paths under one home; `Place` is one place (the drawer, a project,
a session) with the paths, lock name and history name it owns. Both are pure: nothing
here touches the disk. How a directory becomes a project key is `memd.keys`; which
sessions and memory directories a home holds is `memd.discovery`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

DEFAULT_HOME = "~/.deepcode"


def resolve_home(explicit: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None,
                 cwd: str | None = None) -> Path:  # fmt: skip
    """The home memd works on: `--home`, else `$DEEPCODE_HOME`, else `~/.deepcode`; a relative one from the
    cwd. `environ` and `cwd` are a process's (default this one's: the daemon passes a hook's; `~` is always
    this process's `$HOME`)."""
    raw = explicit or (os.environ if environ is None else environ).get("DEEPCODE_HOME") or DEFAULT_HOME
    path = Path(raw).expanduser()
    return path.absolute() if cwd is None else Path(cwd) / path


@lru_cache(maxsize=4096, typed=True)  # typed: a root of another Path class gets paths of its class
def _under(root: Path, *parts: str) -> Path:
    """`root / parts[0] / …`, made once for each (root, parts): a `Path` join is a few µs, and a run-now over
    21 scopes asked for a home's paths about 800 times. Paths are immutable: one object serves every caller."""
    path = root
    for part in parts:
        path = path / part
    return path


@dataclass(frozen=True)
class Home:
    """The paths of SPEC §1 under one home. Pure: nothing here touches the disk."""

    root: Path

    @property
    def settings_file(self) -> Path:
        return _under(self.root, "settings.json")

    @property
    def global_memory(self) -> Path:
        return _under(self.root, "memory")

    @property
    def projects(self) -> Path:
        return _under(self.root, "projects")

    @property
    def memd_dir(self) -> Path:
        return _under(self.root, "memd")

    @property
    def state_db(self) -> Path:
        return _under(self.root, "memd", "state.sqlite")

    @property
    def search_db(self) -> Path:
        return _under(self.root, "memd", "search.sqlite")

    @property
    def locks_dir(self) -> Path:
        return _under(self.root, "memd", "locks")

    @property
    def logs_dir(self) -> Path:
        return _under(self.root, "memd", "logs")

    @property
    def log_file(self) -> Path:
        return _under(self.root, "memd", "logs", "memd.jsonl")

    @property
    def history_dir(self) -> Path:
        return _under(self.root, "memd", "history")

    @property
    def pid_file(self) -> Path:
        return _under(self.root, "memd", "daemon.json")

    @property
    def drawer_render(self) -> Path:
        """What agents inject at session start (§6.2): beside the drawer, not in it."""
        return _under(self.root, "memory.md")

    def project_dir(self, key: str) -> Path:
        return _under(self.root, "projects", key)

    def project_memory(self, key: str) -> Path:
        return _under(self.root, "projects", key, "memory")

    def memory_link(self, key: str | None) -> Path | None:
        """The first symlink on the way to a memory directory (`memory/`; `projects/`, `projects/<key>/`,
        its `memory/`), or None. memd never writes through one: the files would land outside the home,
        as a link at `memd/` is refused (`fsutil.ensure_own_dir`)."""
        steps = [self.global_memory] if key is None else [self.projects, self.projects / key, self.project_memory(key)]
        return next((p for p in steps if os.path.islink(p)), None)

    def summary_file(self, key: str, session_id: str) -> Path:
        return self.projects / key / session_id / "session-memory" / "summary.md"


PlaceKind = Literal["global", "project", "session"]
_RANK: dict[str, int] = {"global": 0, "project": 1, "session": 2}
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9-]{1,200}$")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9-]")
_LOCK_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_LOCK_PART_MAX = 60  # keeps every lock file name far below NAME_MAX (255)


@dataclass(frozen=True)
class Place:
    """One place memd works on: `global` (the drawer), `project:<key>`, or `session:<key>:<sid>`.

    The one value for a job's target, a lock's scope and a history's scope, with
    the one grammar and the paths it owns. A key or session id is one path
    component (never `/`, `.` or `..`) so no Place can name a path outside the home.
    """

    kind: PlaceKind
    key: str | None = None
    session_id: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _RANK:
            raise ValueError(f"unknown place kind {self.kind!r}")
        if self.kind == "global" and (self.key or self.session_id):
            raise ValueError("the global place takes no key or session id")
        if self.kind in ("project", "session") and not _component(self.key):
            raise ValueError(f"a {self.kind} place needs a project key that is one path component: {self.key!r}")
        if self.kind == "project" and self.session_id:
            raise ValueError("a project place takes no session id")
        if self.kind == "session" and not _component(self.session_id):
            raise ValueError(f"a session place needs a session id that is one path component: {self.session_id!r}")

    @classmethod
    def global_(cls) -> Place:
        return cls("global")

    @classmethod
    def project(cls, key: str) -> Place:
        return cls("project", key)

    @classmethod
    def session(cls, key: str, session_id: str) -> Place:
        return cls("session", key, session_id)

    @classmethod
    def memory(cls, key: str | None) -> Place:
        """The memory directory's place: the drawer for None, else the project."""
        return cls("global") if key is None else cls("project", key)

    @classmethod
    def parse(cls, text: str) -> Place:
        """Inverse of `str(place)`. Keys never hold `:` (the agent's keys are `[A-Za-z0-9-]`)."""
        kind, _, rest = text.partition(":")
        try:
            if kind == "global" and not rest:
                return cls("global")
            if kind == "project" and rest:
                return cls("project", rest)
            if kind == "session" and ":" in rest:
                key, _, sid = rest.partition(":")
                return cls("session", key, sid)
        except ValueError as exc:
            raise ValueError(f"not a place: {text!r} ({exc})") from None
        raise ValueError(f"not a place: {text!r} (global, project:<key>, session:<key>:<sid>)")

    def __str__(self) -> str:
        if self.kind == "global":
            return "global"
        if self.kind == "project":
            return f"project:{self.key}"
        return f"session:{self.key}:{self.session_id}"

    @property
    def is_global(self) -> bool:
        return self.kind == "global"

    @property
    def rank(self) -> int:
        return _RANK[self.kind]

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """Canonical order: global, then projects, then sessions (locks are taken in it)."""
        return (_RANK[self.kind], self.key or "", self.session_id or "")

    def memory_dir(self, home: Home) -> Path:
        """The drawer, or the project's memory directory (a session's is its project's)."""
        return home.global_memory if self.kind == "global" else home.project_memory(self.key or "")

    def summary_path(self, home: Home) -> Path:
        if self.kind != "session":
            raise ValueError(f"{self}: only a session has a summary")
        return home.summary_file(self.key or "", self.session_id or "")

    @property
    def history_name(self) -> str:
        """A directory name for history and journals; odd keys get a hash, never a path."""
        if self.kind == "global":
            return "global"
        key = self.key or ""
        base = f"project-{key}" if _PLAIN_KEY.match(key) else (
            f"project-{_NAME_UNSAFE.sub('_', key)[:160]}-{_digest(key, 12)}")  # fmt: skip
        if self.kind == "session":
            return f"{base}.{_NAME_UNSAFE.sub('_', self.session_id or '')[:80]}-{_digest(str(self), 8)}"
        return base

    @property
    def lock_name(self) -> str:
        """A lock file name safe whatever the key holds: a readable part plus a hash of the exact place."""
        if self.kind == "global":
            return "global.lock"
        readable = _LOCK_UNSAFE.sub("_", self.key or "")[:_LOCK_PART_MAX]
        if self.session_id:
            readable += "." + _LOCK_UNSAFE.sub("_", self.session_id)[:_LOCK_PART_MAX]
        return f"{self.kind}.{readable}.{_digest(str(self), 16)}.lock"


def _component(text: str | None) -> bool:
    return bool(text) and "/" not in text and "\0" not in text and text not in (".", "..")  # type: ignore[operator]


def _digest(text: str, n: int) -> str:
    import hashlib  # noqa: PLC0415 - start-up: the hooks never hash (OpenSSL's start costs them 2 ms)

    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:n]
