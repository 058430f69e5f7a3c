"""Discovery: which sessions, project keys and memory directories a home holds.

Discovery only lists paths; it never reads transcript content except the first
record of a stray `agent-*.jsonl`, which says which session it belongs to (and
`session_cwd`, which reads a session's first lines for its working directory).
`classify_path` maps a watcher's file event to what it concerns, from the path alone.

MewCode keeps a project's sessions in the project itself (its seed, §1):
`<project>/.mewcode/sessions/{id}.jsonl`, a `{id}.meta` beside each. `project_sessions` finds
those directories from the places it is given (configured roots and the projects memd knows,
`memd.ledger.outside`); a symbolic link on the way is followed only when it ends inside one of
those places, never out of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memd.fsutil import shown, utf8_name
from memd.keys import project_key
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


def discover_sessions(home: Home, key: str | None = None, outside: Sequence[ProjectSessions] = ()) -> list[SessionFile]:
    """Main transcripts of every project (or one), with their sub-agent files attached.

    Sub-agent transcripts are never sessions: `<sid>/subagents/agent-*.jsonl`
    (2.1.x) belong to `<sid>`; `agent-*.jsonl` beside the sessions (2.0.x) belong
    to the session their records name. MewCode sessions live under
    `projects/<key>/.mewcode/sessions/` when a home is laid out that way, and in the
    projects' own `.mewcode/sessions/` given as `outside` (`project_sessions`).
    Unreadable directories are skipped; the caller's scan reports them.
    """
    sessions: list[SessionFile] = []
    keys = [key] if key else list_project_keys(home)
    for k in keys:
        sessions.extend(_sessions_of_project(home, k))
    for ps in outside:
        if key is None or ps.key == key:
            sessions.extend(ps.session_files())
    return sessions


MEW_DIR = ".mewcode"
MEW_SESSIONS = os.path.join(MEW_DIR, "sessions")
_SEP_MEW = os.sep + MEW_DIR
_SEP_SESSIONS = os.sep + MEW_SESSIONS


@dataclass(frozen=True)
class ProjectSessions:
    """A project's own `.mewcode/sessions/` (MewCode seed §1) and the key memd files its sessions under.

    `sessions` is the directory's real path (links resolved), so a project found by two routes
    (a root and a link in the home) is one place, and its transcripts have one identity in the
    ledger. The key is the project's (its canonical git root's, `memd.keys.project_key`), or the
    home's `projects/<key>` that links to it.
    """

    key: str
    project: str  # the project directory, real path (`sessions` is `<project>/.mewcode/sessions`)
    sessions: str

    def session_files(self) -> list[SessionFile]:
        """The regular `{id}.jsonl` files of the directory (a linked transcript is not followed)."""
        files, _dirs = _jsonl_entries(self.sessions)
        out = []
        for e in sorted(files, key=lambda x: x.name):
            sf = SessionFile(self.key, e.name[: -len(".jsonl")], e.path)
            st = _stat(e)
            if st is not None:
                sf.stats[e.path] = st
            out.append(sf)
        return out


def within(path: str, places: Iterable[str]) -> bool:
    """Whether real path `path` is one of `places` (real paths) or inside one."""
    return any(path == p or path.startswith(p.rstrip(os.sep) + os.sep) for p in places)


def project_sessions(
    home: Home, roots: Sequence[str], known: Sequence[str], keys: Mapping[str, str] | None = None
) -> list[ProjectSessions]:
    """Every project's own `.mewcode/sessions/` reachable from `roots` (each a project, or a folder
    whose direct sub-directories are projects), from `known` project directories, and from a
    `projects/<key>/.mewcode` link in the home.

    Links are followed only within the places: a sessions directory whose real path lies outside
    every root and known project is skipped (whatever route led there). Hidden sub-directories of a
    root are not looked in. `keys` (real sessions directory → key) holds the keys the ledger already
    files directories under: a session keeps its key even if its project's git layout changes.
    Listing only: no transcript is read.
    """
    keys = keys or {}
    given = [os.path.abspath(os.path.expanduser(p)) for p in (*roots, *known)]
    resolved: list[str] = []  # the places' real paths, only when a given spelling does not already match
    home_real = os.path.realpath(home.root)
    seen: set[str] = set()
    out: list[ProjectSessions] = []

    def inside(real: str) -> bool:
        # A fully resolved path that starts with a place's spelling proves that spelling holds no link.
        if within(real, given):
            return True
        if not resolved:
            resolved.extend(_real_dirs(given))
        return within(real, resolved)

    def add(project: str, key: str | None) -> None:
        sdir = project + _SEP_SESSIONS
        if not os.path.isdir(sdir):
            return
        real = os.path.realpath(sdir)
        if real in seen or within(real, [home_real]) or not inside(real):
            return
        seen.add(real)
        out.append(ProjectSessions(keys.get(real) or key or project_key(project), os.path.dirname(os.path.dirname(real)),
                                   real))  # fmt: skip

    pdir = str(home.projects) + os.sep
    for k in list_project_keys(home):  # one lstat a key: string joins, no Path (a home has thousands)
        if os.path.islink(pdir + k + _SEP_MEW):
            add(pdir + k, k)
    for project in [*_candidates(roots), *given[len(roots):]]:
        add(project, None)
    return out


def _real_dirs(paths: Iterable[str]) -> list[str]:
    out = []
    for p in paths:
        real = os.path.realpath(os.path.expanduser(p))
        if os.path.isdir(real):
            out.append(real)
    return out


def _candidates(roots: Sequence[str]) -> list[str]:
    """Each root, then its direct sub-directories (hidden ones skipped), in name order."""
    out: list[str] = []
    for root in roots:
        base = os.path.abspath(os.path.expanduser(root))
        out.append(base)
        try:
            with os.scandir(base) as it:
                out += sorted(e.path for e in it if not e.name.startswith(".") and e.is_dir())
        except OSError:
            continue
    return out


def list_project_keys(home: Home) -> list[str]:
    """The home's project directories' names, but those not valid UTF-8 (`unreadable_names`)."""
    try:
        with os.scandir(home.projects) as it:
            return sorted(e.name for e in it if e.is_dir(follow_symlinks=False) and utf8_name(e.name))
    except OSError:
        return []


def unreadable_names(home: Home) -> list[str]:
    """The project directories and transcripts under `projects/` that memd skips because their names are not
    valid UTF-8 (no ledger row, search row or JSON answer can carry them), home-relative and `shown`;
    `memd doctor` names them. A copied or restored tree can hold such names; Claude Code writes none."""
    out: list[str] = []
    try:
        with os.scandir(home.projects) as it:
            dirs = sorted((e.name for e in it if e.is_dir(follow_symlinks=False)), key=os.fsencode)
    except OSError:
        return out
    for key in dirs:
        if not utf8_name(key):
            out.append(shown(f"projects/{key}"))
            continue
        try:
            with os.scandir(os.path.join(home.projects, key)) as it:
                names = sorted((e.name for e in it if not utf8_name(e.name) and e.name.endswith(".jsonl")), key=os.fsencode)
        except OSError:
            continue
        out += [shown(f"projects/{key}/{n}") for n in names]
    return out


def _jsonl_entries(directory: str) -> tuple[list[os.DirEntry[str]], set[str]]:
    """Regular `.jsonl` files (links are not followed) and sub-directory names of `directory`."""
    files: list[os.DirEntry[str]] = []
    dirs: set[str] = set()
    try:
        with os.scandir(directory) as it:
            for e in it:
                if not utf8_name(e.name):  # `unreadable_names`: skipped, named by `memd doctor`
                    continue
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


def classify_path(home: Home, path: str | os.PathLike[str], outside: Sequence[ProjectSessions] = ()) -> PathKind:
    """Map a file event to what it concerns, from the path alone (no I/O). A transcript in a
    project's own sessions directory is known by that directory (`outside`, as watched: real paths)."""
    p = Path(path)
    name = p.name
    if name.startswith(".") or name.endswith(".tmp") or name == "MEMORY.md":
        return PathKind("other")
    if outside and name.endswith(".jsonl"):
        parent = os.path.dirname(os.fspath(path))
        for ps in outside:
            if ps.sessions == parent:
                return PathKind("transcript", ps.key, name[: -len(".jsonl")])
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


def session_file(
    home: Home, key: str, session_id: str, outside: Sequence[ProjectSessions] = ()
) -> SessionFile | None:
    """One session's files, found without listing the whole project when possible."""
    for s in _sessions_of_project(home, key) if _has_stray_agents(home, key) else _direct(home, key, session_id):
        if s.session_id == session_id:
            return s
    for ps in outside:
        main = os.path.join(ps.sessions, f"{session_id}.jsonl")
        if ps.key == key and os.path.isfile(main) and not os.path.islink(main):
            return SessionFile(key, session_id, main)
    return None


def _has_stray_agents(home: Home, key: str) -> bool:
    try:
        with os.scandir(home.project_dir(key)) as it:
            return any(e.name.startswith("agent-") and e.name.endswith(".jsonl") for e in it)
    except OSError:
        return False


def _direct(home: Home, key: str, sid: str) -> list[SessionFile]:
    pdir = home.project_dir(key)
    mains = [pdir / f"{sid}.jsonl"]
    if not (pdir / MEW_DIR).is_symlink():  # a linked `.mewcode` is a project's own (`project_sessions`)
        mains.append(pdir / MEW_DIR / "sessions" / f"{sid}.jsonl")
    for main in mains:
        if main.is_file() and not main.is_symlink():
            sf = SessionFile(key, sid, str(main))
            subdir = pdir / sid / "subagents"
            if subdir.is_dir():
                sf.subagents = sorted(p for p in subdir.glob("*.jsonl") if p.is_file() and not p.is_symlink())
            return [sf]
    return []
