"""What the ledger knows of a transcript file: its row, a fingerprint of the bytes already read
(which tells an append from a rewrite), and the stat checks that say which sessions have new bytes.
"""

from __future__ import annotations

import os
import sqlite3
import stat as stat_mod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

try:  # hashlib's own blake2b, without hashlib's start-up (it loads OpenSSL for the other hashes: 5 ms)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b

from memd.discovery import ProjectSessions, SessionFile, discover_sessions, list_project_keys
from memd.fsutil import utf8_name
from memd.tree import Home

FP_WINDOW = 4096


@dataclass
class FileRow:
    """A transcript file as the ledger knows it: its identity, stat and how far it was read."""

    path: str  # absolute, for reading
    rel: str  # under the home, the file's identity in the ledger
    role: str
    dev: int = 0
    inode: int = 0
    size: int = 0
    mtime_ns: int = 0
    offset: int = 0
    line_no: int = 0
    bad_lines: int = 0
    format: str | None = None
    known: bool = False
    fp: str | None = None


def file_rows(conn: sqlite3.Connection, sid: int | None, sf: SessionFile) -> list[FileRow]:
    """The session's files as the ledger knows them (none known for a session without a row)."""
    rows = () if sid is None else conn.execute("SELECT * FROM files WHERE session=?", (sid,))
    known = {r["path"]: r for r in rows}
    out = []
    for path, role in [(sf.main, "main"), *((str(p), "sub") for p in sf.subagents)]:
        rel = sf.rel(path)
        r = known.get(rel)
        if r is None:
            out.append(FileRow(path, rel, role))
        else:
            out.append(
                FileRow(
                    path,
                    rel,
                    role,
                    r["dev"],
                    r["inode"],
                    r["size"],
                    r["mtime_ns"],
                    r["offset"],
                    r["line_no"],
                    r["bad_lines"],
                    r["format"],
                    True,
                    r["fp"],
                )
            )
    return out


def fingerprint(path: str, offset: int) -> str | None:
    """What the first `offset` bytes of a file looked like: their first and last 4 KiB, hashed.

    Two preads, not a re-hash of everything read, so it can be checked on every append;
    an edit strictly inside a long transcript's middle goes unnoticed (the agent only appends).
    """
    if offset <= 0:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        head = os.pread(fd, min(FP_WINDOW, offset), 0)
        tail = os.pread(fd, min(FP_WINDOW, offset), max(0, offset - FP_WINDOW))
    except OSError:
        return None
    finally:
        os.close(fd)
    return fingerprint_of(head, tail, offset)


def fingerprint_of(head: bytes, tail: bytes, offset: int) -> str:
    """`fingerprint` of bytes already in hand: `head` the first min(FP_WINDOW, offset) bytes, `tail`
    the last min(FP_WINDOW, offset) before `offset` (a first read has them both from its chunks)."""
    return blake2b(head + b"\0" + tail + str(offset).encode(), digest_size=10).hexdigest()


def read_fingerprint(path: str, offset: int, head: bytes | None, window: Callable[[int, int], bytes | None]) -> str | None:
    """`fingerprint(path, offset)` from what a reader just read where it has the bytes — `head`, the
    file's first FP_WINDOW bytes (None unless the read began at 0), and `window(start, end)` for
    the tail — else read again (an append read never saw the head)."""
    if offset > 0 and head is not None:
        tail = window(max(0, offset - FP_WINDOW), offset)
        if tail is not None and len(head) >= min(FP_WINDOW, offset):
            return fingerprint_of(head[:FP_WINDOW][:offset], tail, offset)
    return fingerprint(path, offset)


def reset_needed(files: list[FileRow], stats: list[os.stat_result | None]) -> bool:
    """Whether a known file no longer starts with the bytes the ledger read (shrunk or rewritten).

    A new inode alone is not a rewrite (a copied or restored home): the fingerprint decides.
    Rows from before fingerprints fall back to the inode rule once.
    """
    for f, st in zip(files, stats):
        if not f.known or st is None or f.offset <= 0:
            continue
        if st.st_size < f.offset:
            return True
        if f.fp is None:
            if st.st_ino != f.inode or st.st_dev != f.dev:
                return True
            continue
        unchanged = st.st_size == f.size and st.st_mtime_ns == f.mtime_ns and st.st_ino == f.inode
        if not unchanged and fingerprint(f.path, f.offset) != f.fp:
            return True
    return False


def resume_at(f: FileRow, st: os.stat_result, tail: Any) -> int | None:
    """Where to go on scanning an over-long unterminated line, if the bytes scanned are still there."""
    if not (isinstance(tail, list) and len(tail) == 3 and tail[0] == f.offset and isinstance(tail[1], int)):
        return None
    if st.st_size < tail[1] or fingerprint(f.path, tail[1]) != tail[2]:
        return None
    return tail[1]


def stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


FileSig = tuple[int, int, int]


def known_files(conn: sqlite3.Connection, key: str | None = None) -> dict[str, FileSig]:
    """(size, mtime_ns, inode) of every file the ledger has read, by path under the home, in one query."""
    if key is None:
        rows = conn.execute("SELECT path, size, mtime_ns, inode FROM files")
    else:
        rows = conn.execute(
            "SELECT f.path, f.size, f.mtime_ns, f.inode FROM files f JOIN sessions s ON s.id=f.session WHERE s.key=?",
            (key,),
        )
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def _changed_in(home: Home, rel_dir: str, known: dict[str, FileSig]) -> bool:
    """Whether any regular `.jsonl` directly in `rel_dir` (under the home) differs from what the ledger read."""
    return _dir_changed(os.path.join(home.root, rel_dir), lambda name, _path: f"{rel_dir}/{name}", known)


def _dir_changed(directory: str, key_of: Callable[[str, str], str], known: dict[str, FileSig]) -> bool:
    """Whether a regular `.jsonl` directly in `directory` differs from `known[key_of(name, path)]` (size,
    mtime, inode); a directory that cannot be read has nothing new."""
    try:
        with os.scandir(directory) as it:
            for e in it:
                if not e.name.endswith(".jsonl") or not utf8_name(e.name):  # discovery skips those too
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                sig = (st.st_size, st.st_mtime_ns, st.st_ino)
                if stat_mod.S_ISREG(st.st_mode) and known.get(key_of(e.name, e.path)) != sig:
                    return True
    except OSError:
        return False
    return False


def project_changed(home: Home, key: str, known: dict[str, FileSig]) -> bool:
    """One pass of `stat`s over a project's transcripts (sub-agent and MewCode ones included),
    building nothing: an idle home of 10,000 sessions is checked without a SessionFile each."""
    rel = f"projects/{key}"
    if _changed_in(home, rel, known):
        return True
    if not os.path.islink(os.path.join(home.projects, key, ".mewcode")) and _changed_in(
        home, f"{rel}/.mewcode/sessions", known
    ):  # a linked `.mewcode` is a project's own sessions directory: `outside_changed`
        return True
    try:
        with os.scandir(os.path.join(home.projects, key)) as it:
            subdirs = [e.name for e in it if e.is_dir(follow_symlinks=False) and not e.name.startswith(".") and utf8_name(e.name)]
    except OSError:
        return False
    return any(_changed_in(home, f"{rel}/{d}/subagents", known) for d in subdirs if d != "memory")


def outside_changed(ps: ProjectSessions, known: dict[str, FileSig]) -> bool:
    """Whether a project's own sessions directory holds a regular `.jsonl` the ledger has not read as
    it is (those transcripts are known by their absolute path: they are not under the home)."""
    return _dir_changed(str(ps.sessions), lambda _name, path: path, known)


def stale_sessions(
    conn: sqlite3.Connection, home: Home, key: str | None = None, outside: Sequence[ProjectSessions] = ()
) -> list[SessionFile]:
    """The sessions with bytes the ledger has not read; projects with nothing new cost only stats.
    `outside`: the projects' own MewCode sessions directories (`memd.ledger.outside.find`)."""
    known = known_files(conn, key)
    out: list[SessionFile] = []
    for k in [key] if key else list_project_keys(home):
        if not known or project_changed(home, k, known):  # nothing read yet: every transcript is new
            out.extend(sf for sf in discover_sessions(home, k) if needs_read(conn, sf, known))
    for ps in outside:
        if (key is None or ps.key == key) and outside_changed(ps, known):
            out.extend(sf for sf in ps.session_files() if needs_read(conn, sf, known))
    return out


def needs_read(conn: sqlite3.Connection, sf: SessionFile, known: dict[str, FileSig] | None = None) -> bool:
    """Cheap check (stat only) whether a session has bytes the ledger has not seen.

    Pass `known` (from `known_files`) when checking many sessions: one query
    instead of one per session.
    """
    if known is None:
        known = known_files(conn, sf.key)
    if not known:  # nothing read yet: any file there is new
        return any(sf.stats.get(p) is not None or stat(p) is not None for p in sf.paths())
    for p in sf.paths():
        st = sf.stats.get(p) or stat(p)
        if st is None:
            continue
        if known.get(sf.rel(p)) != (st.st_size, st.st_mtime_ns, st.st_ino):
            return True
    return False
