"""Dream swap: snapshots of a memory directory, the atomic swap with a journal, crash recovery.

A dream rewrites many files of one memory directory at once. A reader (an
agent starting a session) and a crash (`kill -9`, power loss) must both see the
directory wholly old or wholly new, and the user must be able to take any run
back. So a change to a whole directory goes like this, always under the
scope's lock:

1. `snapshot`: the live directory is packed byte-exact (modes and mtimes kept) into one file,
   `$HOME/memd/history/<scope-name>/<run-id>/files.pack` (`memd.history.pack`), and fsynced
   (runs from before the pack hold a `files/` directory instead; `memd.history.kept` reads both);
2. `stage`: a sibling `.memory.dream-<run-id>` is filled (unchanged files are
   hard links, which costs no data copy and keeps their mtimes; changed files
   are written atomically) and fsynced — the live directory is untouched;
3. `write_run_info` (`memd.history.runs`): `run.json` beside the snapshot says
   what the run changes;
4. `swap_in`: a journal `$HOME/memd/swaps/<scope-name>.json` is written
   atomically, then live → `.memory.old-<run-id>`, staging → live (the
   commit point), fsync of the parent, removal of the old copy, removal of the
   journal.

`recover_scope` finishes or rolls back whatever a crash left: with the staging
directory still present the run had not committed, and is rolled back (the old
directory renamed back if it had been moved, staging and history entry
removed); with staging gone the rename to live happened, and only the old copy
is left to delete. Staging and old directories start with a dot, so
`memd.tree.list_memory_dirs` never takes them for memory directories, and no
reader ever looks into them.

The history entries themselves (listing, pruning, undo) are `memd.history.runs`'s.

Callers hold the scope's lock for everything here, except `recover`, which
takes it itself.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memd.discovery import list_memory_dirs
from memd.fsutil import atomic_write, ensure_own_dir, ensure_private_dir, fsync_dir, read_regular
from memd.history.kept import pack_of
from memd.history.pack import Known, extract, write_pack
from memd.history.store import FILES_DIR, MAX_JSON_BYTES, RUN_FILE, RUN_ID, SUMS_FILE, history_root
from memd.history.treecopy import Copied, copy_tree, durable, rmtree
from memd.locks import LockBusy, acquire
from memd.logs.lazy import lazy_logger
from memd.tree import Home, Place

log = lazy_logger("memd.history.runs")  # the name its events have always had

STAGE_PREFIX = ".memory.dream-"
OLD_PREFIX = ".memory.old-"
SWAPS_DIR = "swaps"
MODES_FILE = "modes.json"


# --------------------------------------------------------------------------- scopes




def journal_path(home: Home, ref: Place) -> Path:
    return home.memd_dir / SWAPS_DIR / f"{ref.history_name}.json"


def staging_dir(home: Home, ref: Place, run_id: str) -> Path:
    return ref.memory_dir(home).parent / f"{STAGE_PREFIX}{run_id}"


def old_dir(home: Home, ref: Place, run_id: str) -> Path:
    return ref.memory_dir(home).parent / f"{OLD_PREFIX}{run_id}"


def remove_entry(home: Home, ref: Place, run_id: str) -> None:
    rmtree(history_root(home, ref) / run_id)


# --------------------------------------------------------------------------- snapshot, stage, swap


def snapshot(home: Home, ref: Place, run_id: str, known: Known | None = None, sums: dict[str, str] | None = None,
             stats: Mapping[str, os.stat_result] | None = None) -> Path:  # fmt: skip
    """Pack the live directory into a new history entry; returns the entry (without run.json yet).

    One file (`files.pack`), fsynced once, with the entry and its parent: no per-file copies or
    flushes (the older layout's `files/` directory is still read, never written). `known` holds
    the bytes a scan already read (`memd.history.pack.Known`), used while a file is unchanged;
    `sums` receives the sha256 of every file packed, by relative path (what `write_run_info`
    would otherwise read back from the pack's manifest); `stats`, the lstat of every top-level entry
    just taken under the scope's lock (`treecopy.signature`), spares the pack a stat pass of its own.
    """
    entry = history_root(home, ref) / run_id
    ensure_own_dir(entry.parent, home.memd_dir)  # memd/history is memd's own: never through a link
    os.mkdir(entry, 0o700)
    live = ref.memory_dir(home)
    if live.is_dir() and not live.is_symlink():
        packed = write_pack(live, entry, known, stats)
        if sums is not None:
            sums.update(packed)
    else:  # nothing to keep: an empty snapshot (undo brings back an empty directory)
        os.mkdir(entry / FILES_DIR, 0o700)
        atomic_write(entry / SUMS_FILE, "{}")
    fsync_dir(entry.parent)
    return entry


def stage_snapshot(home: Home, ref: Place, run_id: str, entry: Path) -> Staged:
    """A staging directory holding what the history entry `entry` kept, either layout: bytes,
    modes and mtimes as they were (copied, never linked: a snapshot stays independent)."""
    pack = pack_of(entry)
    if pack is None:
        staged = stage(home, ref, run_id, source=entry / FILES_DIR, link=False)
        restore_modes(entry, staged.path)
        return staged
    ensure_private_dir(ref.memory_dir(home).parent)
    staging = staging_dir(home, ref, run_id)
    return Staged(staging, Copied(extract(pack, staging), []))


def restore_modes(snapshot_entry: Path, staging: Path) -> None:
    """Give a restored copy the modes its files had when they were snapshotted (kept beside it)."""
    try:
        modes = json.loads(read_regular(snapshot_entry / MODES_FILE, MAX_JSON_BYTES, follow=False).decode("utf-8"))
    except (OSError, ValueError):
        return  # an entry from before modes were kept: its copy already has them
    for rel, mode in modes.items() if isinstance(modes, dict) else ():
        target = staging if rel == "." else staging / rel
        if isinstance(mode, int) and ".." not in Path(rel).parts and target.exists() and not target.is_symlink():
            os.chmod(target, mode & 0o777)


@dataclass
class Staged:
    """A staging directory and what its copy wrote (files with new data, every directory)."""

    path: Path
    copied: Copied


def stage(home: Home, ref: Place, run_id: str, *, source: Path | None, link: bool) -> Staged:
    """A sibling staging directory holding a copy of `source` (None: empty), same mode as live.

    With `link`, regular files are hard links: no data is copied and mtimes hold.
    Anything then written into staging must replace a file (atomic_write), never
    write through it, or the live file would change too.
    """
    staging = staging_dir(home, ref, run_id)
    live = ref.memory_dir(home)
    ensure_private_dir(live.parent)
    if source is not None and source.is_dir():
        copied = copy_tree(source, staging, link=link)
    else:
        os.mkdir(staging, 0o700)
        copied = Copied([], [staging])
    if live.is_dir():
        os.chmod(staging, live.stat().st_mode & 0o7777)
    return Staged(staging, copied)


def seal(staged: Staged) -> None:
    """Make the staging directory durable before the journal names it.

    Only copies need their data flushed: hard links share inodes whose data is
    already on disk, and files written since went through `atomic_write`,
    which fsyncs. Every directory is fsynced (the links and renames in it).
    """
    dirs = [Path(r) for r, _d, _f in os.walk(staged.path)]
    durable(Copied([f for f in staged.copied.files if f.exists()], dirs))


def _write_journal(home: Home, ref: Place, data: dict[str, Any]) -> None:
    path = journal_path(home, ref)
    ensure_own_dir(path.parent, home.memd_dir)
    atomic_write(path, json.dumps(data) + "\n")


def _clear_journal(home: Home, ref: Place) -> None:
    path = journal_path(home, ref)
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_dir(path.parent)


def swap_in(home: Home, ref: Place, run_id: str, staging: Path) -> None:
    """Replace the live directory by `staging`, atomically and recoverably (see the module docstring)."""
    live = ref.memory_dir(home)
    if live.is_symlink():
        raise OSError(f"{live}: is a symlink; memd does not swap a linked memory directory")
    if staging != staging_dir(home, ref, run_id) or not staging.is_dir():
        raise ValueError(f"{staging}: not the staging directory of run {run_id}")
    had = live.exists()
    _write_journal(home, ref, {"scope": str(ref), "run": run_id, "had_memory": had})
    old = old_dir(home, ref, run_id)
    if had:
        os.rename(live, old)
    os.rename(staging, live)  # the commit point
    fsync_dir(live.parent)
    if had:
        remove_old(old)
    _clear_journal(home, ref)
    log.info("memory_dir.swapped", scope=str(ref), run=run_id)


def remove_old(path: Path) -> None:
    """`shutil.rmtree(path)` for the swapped-out copy of a scope: its files unlinked relative to
    the directory's descriptor (no path joined a file, never a link followed), any sub-directory
    by `shutil.rmtree`, then the directory itself. A scope holds thousands of files."""
    if os.scandir not in os.supports_fd or os.unlink not in os.supports_dir_fd:
        shutil.rmtree(path)
        return
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        with os.scandir(fd) as it:
            entries = list(it)
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(path / e.name)
            else:
                os.unlink(e.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


# --------------------------------------------------------------------------- recovery


def _read_journal(home: Home, ref: Place) -> dict[str, Any] | None:
    path = journal_path(home, ref)
    try:
        data = json.loads(read_regular(path, MAX_JSON_BYTES, follow=False).decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _resolve_journal(home: Home, ref: Place, journal: dict[str, Any]) -> str:
    """Finish a committed swap or roll back an uncommitted one; idempotent at every step."""
    run_id = journal.get("run")
    if not isinstance(run_id, str) or not RUN_ID.match(run_id) or journal.get("scope") != str(ref):
        _clear_journal(home, ref)  # unreadable: the orphan sweep below still cleans up
        return "discarded"
    live, staging, old = ref.memory_dir(home), staging_dir(home, ref, run_id), old_dir(home, ref, run_id)
    if staging.exists():
        if not live.exists() and old.exists():
            os.rename(old, live)
        remove_entry(home, ref, run_id)
        rmtree(staging)
        outcome = "rolled_back"
    elif live.exists():
        rmtree(old)
        outcome = "completed"
    elif old.exists():
        os.rename(old, live)
        remove_entry(home, ref, run_id)
        outcome = "rolled_back"
    else:
        outcome = "completed"
    if live.parent.exists():
        fsync_dir(live.parent)
    _clear_journal(home, ref)
    return outcome


def _sweep(home: Home, ref: Place) -> list[str]:
    """Remove what an interrupted run left without a journal: it never committed."""
    live = ref.memory_dir(home)
    removed: list[str] = []
    try:
        names = sorted(os.listdir(live.parent))
    except OSError:
        names = []
    for name in names:
        if name.startswith(STAGE_PREFIX):
            run_id = name[len(STAGE_PREFIX) :]
            if RUN_ID.match(run_id):
                remove_entry(home, ref, run_id)
            rmtree(live.parent / name)
            removed.append(name)
        elif name.startswith(OLD_PREFIX):
            if live.exists():
                rmtree(live.parent / name)
            else:
                os.rename(live.parent / name, live)
            removed.append(name)
    swaps = journal_path(home, ref).parent
    try:
        temps = [n for n in os.listdir(swaps) if n.startswith(f".{ref.history_name}.json.") and n.endswith(".tmp")]
    except OSError:
        temps = []
    for name in temps:
        (swaps / name).unlink(missing_ok=True)  # a journal write cut short: it never existed
    root = history_root(home, ref)
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        entries = []
    for name in entries:
        entry = root / name
        if entry.is_dir() and not entry.is_symlink() and not os.path.lexists(entry / RUN_FILE):
            rmtree(entry)  # a snapshot interrupted before its run.json (a damaged one is listed, never removed)
            removed.append(f"history/{name}")
    return removed


def recover_scope(home: Home, ref: Place, logger: Any = None) -> dict[str, Any] | None:
    """Finish or roll back what a crash left in one scope. The caller holds the scope's lock."""
    logger = logger or log
    journal = _read_journal(home, ref)
    outcome = None if journal is None else _resolve_journal(home, ref, journal)
    swept = _sweep(home, ref)
    if outcome is None and not swept:
        return None
    logger.warning("memory_dir.recovered", scope=str(ref), journal=outcome, removed=swept)
    return {"scope": str(ref), "journal": outcome, "removed": swept}


def _needs_recovery(home: Home, ref: Place) -> bool:
    """Cheap, lock-free check so start-up recovery locks only scopes with leftovers."""
    if journal_path(home, ref).exists():
        return True
    try:
        names = os.listdir(ref.memory_dir(home).parent)
    except OSError:
        names = []
    if any(n.startswith((STAGE_PREFIX, OLD_PREFIX)) for n in names):
        return True
    root = history_root(home, ref)
    try:
        return any(not os.path.lexists(root / n / RUN_FILE) for n in os.listdir(root))
    except OSError:
        return False


def _scopes_with_journals(home: Home) -> list[Place]:
    out = []
    try:
        names = sorted(os.listdir(home.memd_dir / SWAPS_DIR))
    except OSError:
        return []
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            data = json.loads(read_regular(home.memd_dir / SWAPS_DIR / name, MAX_JSON_BYTES, follow=False).decode("utf-8"))
            ref = Place.parse(str(data.get("scope")))
        except (OSError, ValueError, AttributeError):
            continue
        if f"{ref.history_name}.json" == name:
            out.append(ref)
    return out


def recover(home: Home, *, lock_timeout: float = 0.0, logger: Any = None) -> list[dict[str, Any]]:
    """Recover every scope (the daemon calls this at start-up); scopes whose lock is held are
    skipped, because the run holding it recovers its scope first thing."""
    refs = {Place("global") if s == "global" else Place("project", k) for s, k, _p in list_memory_dirs(home)}
    refs.update(_scopes_with_journals(home))
    done = []
    for ref in sorted(refs, key=str):
        if not _needs_recovery(home, ref):
            continue
        try:
            with acquire(home, [ref], timeout=lock_timeout):
                got = recover_scope(home, ref, logger)
        except LockBusy:
            continue
        if got:
            done.append(got)
    return done
