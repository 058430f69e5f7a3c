"""Discovery: which sessions, project keys and memory directories a home holds.

Discovery only lists paths; it never reads transcript content except the first
record of a stray `agent-*.jsonl`, which says which session it belongs to (and
`session_cwd`, which reads a session's first lines for its working directory).
`classify_path` maps a watcher's file event to what it concerns, from the path alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from memd.tree import Home

_SESSION_SUFFIXES = (".jsonl",)


@dataclass
class SessionFile:
    """One session: its main transcript and the sub-agent transcripts attached to it.

    `main` is a plain string and `stats` carries what discovery's scandir already
    learned, so checking 10,000 idle sessions costs no Path objects and no extra stat.
    """

    key: str
    session_id: str
    main: str
    subagents: list[Path] = field(default_factory=list)
    stats: dict[str, os.stat_result] = field(default_factory=dict, repr=False, compare=False)

    @property
    def path(self) -> Path:
        return Path(self.main)

    def paths(self) -> list[str]:
        return [self.main, *map(str, self.subagents)]

    def rel(self, path: str) -> str:
        """A file's path under the home (`projects/<key>/…`): its identity in the ledger, so a
        moved or copied home is the same home. A path outside any home stays as it is."""
        mark = f"{os.sep}projects{os.sep}{self.key}{os.sep}"
        i = path.rfind(mark, 0, len(path) - len(os.path.basename(path)))
        return path[i + 1 :] if i >= 0 else path


def _first_session_id(path: Path) -> str | None:
    """The `sessionId` of a stray sub-agent file's first record (2.0.x layout)."""
    return _first_string(path, "sessionId", 5)


def session_cwd(path: str | os.PathLike[str], max_lines: int = 64) -> str | None:
    """The working directory a session's records name (Claude Code writes `cwd` on each record).

    Only the first lines are read (a few KB): enough for the first record that carries
    it. None for formats without one (MewCode) and for unreadable files.
    """
    return _first_string(path, "cwd", max_lines)


def _first_string(path: str | os.PathLike[str], field: str, max_lines: int) -> str | None:
    """The first non-empty string `field` among a transcript's first `max_lines` records."""

    try:
        with open(path, "rb") as fh:
            import orjson  # noqa: PLC0415 - start-up: orjson only where JSON is read (the hooks skip it)
            for _ in range(max_lines):
                line = fh.readline(1 << 20)
                if not line:
                    return None
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                value = rec.get(field) if isinstance(rec, dict) else None
                if isinstance(value, str) and value:
                    return value
    except OSError:
        return None
    return None
    return None


def discover_sessions(home: Home, key: str | None = None) -> list[SessionFile]:
    """Main transcripts of every project (or one), with their sub-agent files attached.

    Sub-agent transcripts are never sessions: `<sid>/subagents/agent-*.jsonl`
    (2.1.x) belong to `<sid>`; `agent-*.jsonl` beside the sessions (2.0.x) belong
    to the session their records name. MewCode sessions live under
    `projects/<key>/.mewcode/sessions/` when a home is laid out that way.
    Unreadable directories are skipped; the caller's scan reports them.
    """
    sessions: list[SessionFile] = []
    keys = [key] if key else list_project_keys(home)
    for k in keys:
        sessions.extend(_sessions_of_project(home, k))
    return sessions


def list_project_keys(home: Home) -> list[str]:
    try:
        with os.scandir(home.projects) as it:
            return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def _jsonl_entries(directory: str) -> tuple[list[os.DirEntry[str]], set[str]]:
    """Regular `.jsonl` files (links are not followed) and sub-directory names of `directory`."""
    files: list[os.DirEntry[str]] = []
    dirs: set[str] = set()
    try:
        with os.scandir(directory) as it:
            for e in it:
                if e.name.endswith(".jsonl"):
                    if e.is_file(follow_symlinks=False):
                        files.append(e)
                elif e.is_dir(follow_symlinks=False):
                    dirs.add(e.name)
    except OSError:
        pass
    return files, dirs


def _stat(e: os.DirEntry[str]) -> os.stat_result | None:
    try:
        return e.stat(follow_symlinks=False)
    except OSError:
        return None


def _sessions_of_project(home: Home, key: str) -> list[SessionFile]:
    pdir = os.path.join(home.projects, key)
    files, dirs = _jsonl_entries(pdir)
    if ".mewcode" in dirs:
        mew, _ = _jsonl_entries(os.path.join(pdir, ".mewcode", "sessions"))
        files += mew
    by_id: dict[str, SessionFile] = {}
    strays: list[str] = []
    for e in files:
        if e.name.startswith("agent-"):
            if os.path.dirname(e.path) == pdir:
                strays.append(e.path)
            continue
        sid = e.name[: -len(".jsonl")]
        sf = SessionFile(key, sid, e.path)
        st = _stat(e)
        if st is not None:
            sf.stats[e.path] = st
        by_id[sid] = sf
    for sid, sf in by_id.items():
        if sid in dirs:
            subs, _ = _jsonl_entries(os.path.join(pdir, sid, "subagents"))
            for e in sorted(subs, key=lambda x: x.name):
                sf.subagents.append(Path(e.path))
                st = _stat(e)
                if st is not None:
                    sf.stats[e.path] = st
    for p in sorted(strays):
        owner = _first_session_id(Path(p))
        if owner in by_id:
            by_id[owner].subagents.append(Path(p))
    return sorted(by_id.values(), key=lambda s: s.session_id)


def list_memory_dirs(home: Home) -> list[tuple[str, str | None, Path]]:
    """Every memory directory: ("global", None, path) and ("project", key, path)."""
    out: list[tuple[str, str | None, Path]] = [("global", None, home.global_memory)]
    for k in list_project_keys(home):
        mdir = home.project_memory(k)
        if mdir.is_dir() and not mdir.is_symlink():
            out.append(("project", k, mdir))
    return out


@dataclass(frozen=True)
class PathKind:
    """What a changed path under the home is, for the watcher."""

    kind: str  # "transcript", "memory", "other"
    key: str | None = None  # project key; None for the global drawer
    session_id: str | None = None


def classify_path(home: Home, path: str | os.PathLike[str]) -> PathKind:
    """Map a file event to what it concerns, from the path alone (no I/O)."""
    p = Path(path)
    name = p.name
    if name.startswith(".") or name.endswith(".tmp") or name == "MEMORY.md":
        return PathKind("other")
    try:
        rel = p.relative_to(home.global_memory)
        return PathKind("memory") if len(rel.parts) == 1 and name.endswith(".md") else PathKind("other")
    except ValueError:
        pass
    try:
        parts = p.relative_to(home.projects).parts
    except ValueError:
        return PathKind("other")
    if len(parts) < 2:
        return PathKind("other")
    key = parts[0]
    if parts[1] == "memory":
        ok = len(parts) == 3 and name.endswith(".md")
        return PathKind("memory", key) if ok else PathKind("other")
    if not name.endswith(".jsonl"):
        return PathKind("other")
    if len(parts) == 2:
        if name.startswith("agent-"):
            return PathKind("transcript", key, None)
        return PathKind("transcript", key, name[: -len(".jsonl")])
    if len(parts) == 4 and parts[2] == "subagents":
        return PathKind("transcript", key, parts[1])
    if len(parts) == 4 and parts[1] == ".mewcode" and parts[2] == "sessions":
        return PathKind("transcript", key, name[: -len(".jsonl")])
    return PathKind("other")


def session_file(home: Home, key: str, session_id: str) -> SessionFile | None:
    """One session's files, found without listing the whole project when possible."""
    for s in _sessions_of_project(home, key) if _has_stray_agents(home, key) else _direct(home, key, session_id):
        if s.session_id == session_id:
            return s
    return None


def _has_stray_agents(home: Home, key: str) -> bool:
    try:
        with os.scandir(home.project_dir(key)) as it:
            return any(e.name.startswith("agent-") and e.name.endswith(".jsonl") for e in it)
    except OSError:
        return False


def _direct(home: Home, key: str, sid: str) -> list[SessionFile]:
    pdir = home.project_dir(key)
    for main in (pdir / f"{sid}.jsonl", pdir / ".mewcode" / "sessions" / f"{sid}.jsonl"):
        if main.is_file() and not main.is_symlink():
            sf = SessionFile(key, sid, str(main))
            subdir = pdir / sid / "subagents"
            if subdir.is_dir():
                sf.subagents = sorted(p for p in subdir.glob("*.jsonl") if p.is_file() and not p.is_symlink())
            return [sf]
    return []
