"""One-time moves of memories memd wrote where the agent never reads them (SPEC §1.1a).

Before memd keyed memory by the canonical git root, a session started in a
sub-directory or a `git worktree` had its memories written under its transcript
directory's key; Claude Code reads only the root's `projects/<key>/memory/`. At
daemon start, once, each such directory's memory files move to the root's
directory — through the history, so `memd undo RUN` puts them back — and a
name that exists there already is kept as it is: the same bytes are not copied
twice, other bytes arrive under a new name (`-2`, `-3`, …), never overwriting.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from memd.discovery import list_project_keys, session_cwd
from memd.fsutil import atomic_write, ensure_private_dir, fsync_dir
from memd.history.writes import Recorder, refresh_recorded
from memd.keys import memory_key_for_session
from memd.locks import LockBusy, acquire
from memd.memory.names import is_candidate_name
from memd.settings import Settings
from memd.state import get_kv, set_kv
from memd.tree import Home, Place

DONE_KEY = "migration:memory-keys:1"
LOCK_WAIT = 5.0


def planned_moves(home: Home) -> list[tuple[str, str]]:
    """(from key, to key) for every project memory directory that is not where its sessions' memory goes."""
    moves = []
    for key in list_project_keys(home):
        mdir = home.project_memory(key)
        if mdir.is_symlink() or not _memory_files(mdir):
            continue
        cwd = _a_session_cwd(home.project_dir(key))
        target = memory_key_for_session(cwd, key)
        if target != key:
            moves.append((key, target))
    return moves


def _memory_files(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir()
                      if is_candidate_name(p.name) and p.is_file() and not p.is_symlink())  # fmt: skip
    except OSError:
        return []


def _a_session_cwd(project_dir: Path) -> str | None:
    try:
        transcripts = sorted(p for p in project_dir.glob("*.jsonl") if not p.name.startswith("agent-"))
    except OSError:
        return None
    for t in transcripts[:5]:
        cwd = session_cwd(t)
        if cwd:
            return cwd
    return None


def free_name(directory: Path, name: str) -> str:
    """`name` if free in `directory`, else `stem-2.md`, `stem-3.md`, … (case-insensitively free)."""
    taken = {n.lower() for n in os.listdir(directory)} if directory.is_dir() else set()
    if name.lower() not in taken:
        return name
    stem = name[: -len(".md")]
    n = 2
    while f"{stem}-{n}.md".lower() in taken:
        n += 1
    return f"{stem}-{n}.md"


def move_memories(home: Home, settings: Settings, src_key: str, dst_key: str, now: datetime) -> dict[str, Any]:
    """Move one directory's memory files into another's, as one history run in both scopes."""

    src, dst = Place.project(src_key), Place.project(dst_key)
    reason = f"memories of {src_key} moved to {dst_key}, the directory the agent reads"
    with acquire(home, [src, dst], timeout=LOCK_WAIT):
        out = Recorder(home, src, "migrate", reason, now)
        into = Recorder(home, dst, "migrate", reason, now, run_id=out.run_id)
        ddir = dst.memory_dir(home)
        ensure_private_dir(ddir)
        moved, same = [], []
        for f in _memory_files(src.memory_dir(home)):
            data = f.read_bytes()
            existing = ddir / f.name
            if existing.is_file() and existing.read_bytes() == data:
                same.append(f.name)
            else:
                target = ddir / free_name(ddir, f.name)
                into.before(target)
                atomic_write(target, data)
                st = f.stat()
                os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
                moved.append(target.name)
            out.before(f)
            f.unlink()
        fsync_dir(src.memory_dir(home))
        infos = []
        from memd.git.commits import after_run  # noqa: PLC0415 - start-up: git only when a write lands
        for place, rec in ((src, out), (dst, into)):
            info = rec.commit()
            after_run(home, place, info, settings)  # one commit per scope's run when memd.git is on
            infos += [info] if info is not None else []
        for place in (src, dst):
            refresh_recorded(home, settings, place, now)  # a MEMORY.md shared with the agent: a history run
    return {"from": src_key, "to": dst_key, "run": out.run_id if infos else None, "moved": moved, "same": same}


def migrate_memory_keys(home: Home, settings: Settings, conn: Any, now: datetime, log: Any) -> list[dict[str, Any]]:
    """Run the moves once per home; a move that could not take its locks is tried at the next start."""

    if get_kv(conn, DONE_KEY):
        return []
    done, pending = [], False
    for src_key, dst_key in planned_moves(home):
        try:
            done.append(move_memories(home, settings, src_key, dst_key, now))
            log.warning("memory.migrated", **{k: v for k, v in done[-1].items() if k in ("from", "to", "run")},
                        moved=len(done[-1]["moved"]), same=len(done[-1]["same"]))  # fmt: skip
        except (LockBusy, OSError) as exc:
            pending = True
            log.warning("memory.migration_postponed", source=src_key, target=dst_key, reason=str(exc))
    if not pending:
        set_kv(conn, DONE_KEY, now.isoformat())
    return done
