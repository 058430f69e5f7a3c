"""Where things are: the `$DEEPCODE_HOME` tree of SPEC §1, project keys (§1.1), discovery.

Discovery only lists paths; it never reads transcript content except the first
record of a stray `agent-*.jsonl`, which says which session it belongs to.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_HOME = "~/.deepcode"
KEY_MAX = 200
KEY_KEEP = 180
_UNSAFE = re.compile(r"[^A-Za-z0-9]")
_SESSION_SUFFIXES = (".jsonl",)


def resolve_home(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The home memd works on: `--home`, else `$DEEPCODE_HOME`, else `~/.deepcode`."""
    raw = explicit or os.environ.get("DEEPCODE_HOME") or DEFAULT_HOME
    return Path(raw).expanduser().absolute()


@dataclass(frozen=True)
class Home:
    """The paths of SPEC §1 under one home. Pure: nothing here touches the disk."""

    root: Path

    @property
    def settings_file(self) -> Path:
        return self.root / "settings.json"

    @property
    def global_memory(self) -> Path:
        return self.root / "memory"

    @property
    def projects(self) -> Path:
        return self.root / "projects"

    @property
    def memd_dir(self) -> Path:
        return self.root / "memd"

    @property
    def state_db(self) -> Path:
        return self.memd_dir / "state.sqlite"

    @property
    def search_db(self) -> Path:
        return self.memd_dir / "search.sqlite"

    @property
    def locks_dir(self) -> Path:
        return self.memd_dir / "locks"

    @property
    def logs_dir(self) -> Path:
        return self.memd_dir / "logs"

    @property
    def log_file(self) -> Path:
        return self.logs_dir / "memd.jsonl"

    @property
    def history_dir(self) -> Path:
        return self.memd_dir / "history"

    @property
    def pid_file(self) -> Path:
        return self.memd_dir / "daemon.json"

    @property
    def drawer_render(self) -> Path:
        """What agents inject at session start (§6.2): beside the drawer, not in it."""
        return self.root / "memory.md"

    def project_dir(self, key: str) -> Path:
        return self.projects / key

    def project_memory(self, key: str) -> Path:
        return self.projects / key / "memory"

    def summary_file(self, key: str, session_id: str) -> Path:
        return self.projects / key / session_id / "session-memory" / "summary.md"


def find_repo_root(path: str | os.PathLike[str]) -> Path:
    """Nearest ancestor holding `.git` (directory or file); else the path itself (§1.1)."""
    start = Path(path).expanduser().absolute()
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return start


def key_for_root(root: str | os.PathLike[str]) -> str:
    """The project key of an absolute root path (§1.1)."""
    text = str(root)
    key = _UNSAFE.sub("-", text)
    if len(key) > KEY_MAX:
        digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]
        key = f"{key[:KEY_KEEP]}-{digest}"
    return key


def project_key(path: str | os.PathLike[str]) -> str:
    """The key of the project a working directory belongs to."""
    return key_for_root(find_repo_root(path))


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


def _first_session_id(path: Path) -> str | None:
    """The `sessionId` of a stray sub-agent file's first record (2.0.x layout)."""
    import orjson

    try:
        with open(path, "rb") as fh:
            for _ in range(5):
                line = fh.readline(1 << 20)
                if not line:
                    return None
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(rec, dict) and isinstance(rec.get("sessionId"), str):
                    return rec["sessionId"]
    except OSError:
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
