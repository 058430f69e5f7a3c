"""Where things are: the `$DEEPCODE_HOME` tree of SPEC §1, project keys (§1.1), discovery.

Discovery only lists paths; it never reads transcript content except the first
record of a stray `agent-*.jsonl`, which says which session it belongs to.
"""

from __future__ import annotations

import os
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

DEFAULT_HOME = "~/.deepcode"
KEY_MAX = 200
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
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:n]


def canonical_root(path: str | os.PathLike[str]) -> Path:
    """The directory whose key names a project's memory (SPEC §1.1a).

    The realpath's nearest ancestor holding `.git`; for a `git worktree` (a `.git`
    file whose git directory has a `commondir`) the main repository's root; outside
    git, the path itself. A submodule's `.git` file has no `commondir`: it is its own
    root. Only files are read: no `git` process, so a hook can afford it.
    """
    start = Path(os.path.realpath(Path(path).expanduser()))
    for candidate in (start, *start.parents):
        dot_git = candidate / ".git"
        if dot_git.is_dir():
            return candidate
        if dot_git.is_file():
            return _worktree_main(candidate, dot_git) or candidate
    return start


def _worktree_main(root: Path, dot_git: Path) -> Path | None:
    """The main repository of a linked worktree whose `.git` file is `dot_git`, else None.

    As Claude Code checks it: the git directory sits in `<common>/worktrees/` and its
    `gitdir` file points back at this `.git`; a submodule (no `commondir`) is its own root.
    """
    try:
        text = dot_git.read_text(encoding="utf-8", errors="replace")[:4096].strip()
        if not text.startswith("gitdir:"):
            return None
        gitdir = Path(os.path.normpath(root / text[len("gitdir:"):].strip()))
        common = Path(os.path.normpath(gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()))
        if gitdir.parent != common / "worktrees":
            return None
        back = (gitdir / "gitdir").read_text(encoding="utf-8").strip()
        if os.path.realpath(back) != os.path.join(os.path.realpath(root), ".git"):
            return None
    except (OSError, UnicodeDecodeError):
        return None  # a submodule (no commondir), or an unreadable git directory
    return common.parent if common.name == ".git" else common


# Kept for callers that only need "the repository this path belongs to".
find_repo_root = canonical_root


def key_for_root(root: str | os.PathLike[str]) -> str:
    """The agent's directory name for an absolute path (SPEC §1.1), exactly as Claude Code spells it.

    Every UTF-16 code unit outside `[A-Za-z0-9]` becomes `-` (so an emoji becomes two);
    past 200 units the first 200 are kept, then `-` and base 36 of |djb2| over the units.
    """
    text = os.fspath(root)
    units = _utf16_units(text)
    key = "".join(chr(u) if _ALNUM_UNIT[u] else "-" for u in units) if units else ""
    if len(key) > KEY_MAX:
        key = f"{key[:KEY_MAX]}-{_base36(abs(djb2(units)))}"
    return key


def _utf16_units(text: str) -> list[int]:
    """UTF-16 code units of `text`; undecodable bytes (surrogateescape) count as one unit each."""
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2)]


_ALNUM_UNIT = bytearray(0x10000)
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789":
    _ALNUM_UNIT[_c] = 1


def djb2(units: list[int]) -> int:
    """JavaScript's `h = (h << 5) - h + unit | 0` over UTF-16 units: a signed 32-bit result."""
    h = 0
    for u in units:
        h = (h * 31 + u) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def cwd_key(path: str | os.PathLike[str]) -> str:
    """The transcript directory an agent started in `path` writes to: the key of its realpath."""
    return key_for_root(os.path.realpath(Path(path).expanduser()))


def project_key(path: str | os.PathLike[str]) -> str:
    """The key of the memory directory for a working directory: its canonical git root's (§1.1a)."""
    return key_for_root(canonical_root(path))


def memory_key_for_session(cwd: str | None, transcript_key: str) -> str:
    """Where a session's memories go (§1.1a): its cwd's canonical root, else its transcript directory.

    The cwd comes from the session's records; a relative, missing or vanished one
    falls back to the directory the transcript lives in, which is what the agent
    keyed it by.
    """
    if not cwd or not os.path.isabs(cwd) or not os.path.isdir(cwd):
        return transcript_key
    return project_key(cwd)


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


def session_cwd(path: str | os.PathLike[str], max_lines: int = 64) -> str | None:
    """The working directory a session's records name (Claude Code writes `cwd` on each record).

    Only the first lines are read (a few KB): enough for the first record that carries
    it. None for formats without one (MewCode) and for unreadable files.
    """
    import orjson

    try:
        with open(path, "rb") as fh:
            for _ in range(max_lines):
                line = fh.readline(1 << 20)
                if not line:
                    return None
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                cwd = rec.get("cwd") if isinstance(rec, dict) else None
                if isinstance(cwd, str) and cwd:
                    return cwd
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
