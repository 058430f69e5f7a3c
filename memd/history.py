"""Dream history: snapshots of a memory directory, the atomic swap, crash recovery, undo.

A dream rewrites many files of one memory directory at once. A reader (an
agent starting a session) and a crash (`kill -9`, power loss) must both see the
directory wholly old or wholly new, and the user must be able to take any run
back. So a change to a whole directory goes like this, always under the
scope's lock:

1. `snapshot`: the live directory is copied byte-exact (mtimes kept) to
   `$HOME/memd/history/<scope-name>/<run-id>/files/`, and fsynced;
2. `stage`: a sibling `.memory.dream-<run-id>` is filled (unchanged files are
   hard links, which costs no data copy and keeps their mtimes; changed files
   are written atomically) and fsynced — the live directory is untouched;
3. `write_run_info`: `run.json` beside the snapshot says what the run changes;
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

Undo is the same machinery in the other direction: the present is snapshotted
first (so an undo is itself undoable), the chosen snapshot is copied (never
linked: a snapshot must stay independent of later in-place edits) into a
staging directory, and swapped in.

Snapshots are checked before they are restored: `snapshot` hashes every file as
it copies it, `write_run_info` records the hashes in `run.json`
(`snapshot_sha256`), and `undo` refuses a snapshot that no longer matches them
(a file changed, missing or added since), restoring nothing. An entry whose
`run.json` cannot be read is listed by `memd history` as damaged (never hidden)
and cannot be undone.

Callers hold the scope's lock for everything here, except `recover` and `undo`,
which take it themselves.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from memd.clock import iso
from memd.discovery import list_memory_dirs
from memd.errors import UsageError
from memd.fsutil import (
    UnusableFile,
    atomic_write,
    check_own_tree,
    ensure_own_dir,
    ensure_private_dir,
    fsync_dir,
    read_regular,
)
from memd.locks import LockBusy, acquire
from memd.logs import lazy_logger
from memd.tree import Home, Place

log = lazy_logger("memd.history")

STAGE_PREFIX = ".memory.dream-"
OLD_PREFIX = ".memory.old-"
FILES_DIR = "files"
RUN_FILE = "run.json"
SUMS_FILE = "sha256.json"  # the snapshot's hashes until write_run_info puts them in run.json
MAX_JSON_BYTES = 64 << 20  # run.json, modes, journals: memd's own small files; larger is damage
SWAPS_DIR = "swaps"
RUN_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9-]{1,200}$")
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9-]")


class HistoryError(UsageError):
    """A history request that cannot be met (unknown run, no snapshot); exit code 2."""


class SpecialFile(OSError):
    """A memory directory holding a FIFO, socket or device: never copied, never swapped."""


# --------------------------------------------------------------------------- scopes




def new_run_id(now: datetime) -> str:
    """Sortable by time (history lists and pruning rely on it), unique by a random tail."""
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def history_root(home: Home, ref: Place) -> Path:
    return home.history_dir / ref.history_name


def journal_path(home: Home, ref: Place) -> Path:
    return home.memd_dir / SWAPS_DIR / f"{ref.history_name}.json"


def staging_dir(home: Home, ref: Place, run_id: str) -> Path:
    return ref.memory_dir(home).parent / f"{STAGE_PREFIX}{run_id}"


def old_dir(home: Home, ref: Place, run_id: str) -> Path:
    return ref.memory_dir(home).parent / f"{OLD_PREFIX}{run_id}"


# --------------------------------------------------------------------------- copying


@dataclass
class Copied:
    """What a copy wrote: the regular files with new data and every directory, to fsync."""

    files: list[Path]
    dirs: list[Path]


def _copy_tree(src: Path, dst: Path, *, link: bool, out: Copied | None = None,
               modes: dict[str, int] | None = None, rel: str = "", sums: dict[str, str] | None = None) -> Copied:  # fmt: skip
    """Copy `src` into the new directory `dst`: regular files byte-exact with mtimes
    (or hard-linked when `link`), symlinks as symlinks (never followed), sub-directories
    recursively. A FIFO, socket or device raises `SpecialFile`: such a directory is left alone.

    With `modes` (a snapshot into memd's private history), the copy is private (0700/0600)
    and the original modes are collected there by relative path, to be put back on restore;
    with `sums`, the sha256 of every file copied, hashed as it is copied (no second read).
    """
    out = out or Copied([], [])
    os.mkdir(dst, 0o700)
    out.dirs.append(dst)
    with os.scandir(src) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        s, d = Path(e.path), dst / e.name
        try:
            if e.is_symlink():
                os.symlink(os.readlink(s), d)
            elif e.is_dir(follow_symlinks=False):
                _copy_tree(s, d, link=link, out=out, modes=modes, rel=f"{rel}{e.name}/", sums=sums)
            elif e.is_file(follow_symlinks=False):
                if not (link and _hard_link(s, d)):
                    st = e.stat(follow_symlinks=False)
                    digest = _copy_file(s, d, st, digest=sums is not None)
                    if sums is not None and digest is not None:
                        sums[rel + e.name] = digest
                    out.files.append(d)
                    if modes is not None:
                        modes[rel + e.name] = st.st_mode & 0o7777
                        os.chmod(d, 0o600)
            else:
                raise SpecialFile(f"{s}: not a regular file, directory or symlink; the directory is left alone")
        except FileNotFoundError:
            continue  # removed while we copied: the pre-swap signature check catches the change
    shutil.copystat(src, dst, follow_symlinks=False)
    if modes is not None:
        modes[rel or "."] = os.stat(src).st_mode & 0o7777
        os.chmod(dst, 0o700)
    return out


MODES_FILE = "modes.json"


def _restore_modes(snapshot_entry: Path, staging: Path) -> None:
    """Give a restored copy the modes its files had when they were snapshotted (kept beside it)."""
    try:
        modes = json.loads(read_regular(snapshot_entry / MODES_FILE, MAX_JSON_BYTES, follow=False).decode("utf-8"))
    except (OSError, ValueError):
        return  # an entry from before modes were kept: its copy already has them
    for rel, mode in modes.items() if isinstance(modes, dict) else ():
        target = staging if rel == "." else staging / rel
        if isinstance(mode, int) and ".." not in Path(rel).parts and target.exists() and not target.is_symlink():
            os.chmod(target, mode & 0o777)


def _copy_file(src: Path, dst: Path, st: os.stat_result, *, digest: bool = False) -> str | None:
    """Bytes, mode and mtime (to the nanosecond); no fsync here (`_durable` batches them).
    With `digest`, returns the sha256 of the bytes copied.

    Leaner than `shutil.copy2` (no xattr probing), which matters at 1,000 files a run.
    """
    h = hashlib.sha256() if digest else None
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with open(src, "rb", buffering=0) as fh:
            while chunk := fh.read(1 << 20):
                if h is not None:
                    h.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
        os.fchmod(fd, st.st_mode & 0o7777)
        if os.utime in os.supports_fd:
            os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(fd)
    if os.utime not in os.supports_fd:
        os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
    return None if h is None else h.hexdigest()


def _hard_link(src: Path, dst: Path) -> bool:
    """A hard link when the file system has them; False means: copy instead."""
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
            return False
        raise
    return True


def _durable(copied: Copied) -> None:
    """Batch fsync: all data first, then the directories (much cheaper than write+fsync per file)."""
    for f in copied.files:
        fd = os.open(f, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for d in reversed(copied.dirs):
        fsync_dir(d)


def _rmtree(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


Signature = dict[str, tuple[int, int, int, int]]


def signature(directory: Path) -> Signature:
    """(inode, size, mtime_ns, mode) of every entry: one stat each, enough to see any edit."""
    out: Signature = {}
    try:
        with os.scandir(directory) as it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                out[e.name] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
    except FileNotFoundError:
        pass
    return out


# --------------------------------------------------------------------------- snapshot, stage, swap


def snapshot(home: Home, ref: Place, run_id: str) -> Path:
    """Copy the live directory into a new history entry; returns the entry (without run.json yet)."""
    entry = history_root(home, ref) / run_id
    ensure_own_dir(entry.parent, home.memd_dir)  # memd/history is memd's own: never through a link
    os.mkdir(entry, 0o700)
    live = ref.memory_dir(home)
    sums: dict[str, str] = {}
    if live.is_dir() and not live.is_symlink():
        modes: dict[str, int] = {}
        copied = _copy_tree(live, entry / FILES_DIR, link=False, modes=modes, sums=sums)
        atomic_write(entry / MODES_FILE, json.dumps(modes, sort_keys=True))
    else:
        os.mkdir(entry / FILES_DIR, 0o700)
        copied = Copied([], [entry / FILES_DIR])
    atomic_write(entry / SUMS_FILE, json.dumps(sums, sort_keys=True))
    copied.dirs.append(entry)
    _durable(copied)
    return entry


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
        copied = _copy_tree(source, staging, link=link)
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
    _durable(Copied([f for f in staged.copied.files if f.exists()], dirs))


def write_run_info(entry: Path, info: dict[str, Any]) -> None:
    """Complete a history entry. `seq` orders runs of a scope even within one second (run ids
    only have seconds); it is race-free because entries are only written under the scope's lock."""
    seqs = [r.get("seq") for r in _runs_in(entry.parent)]
    seq = 1 + max([x for x in seqs if isinstance(x, int)], default=0)
    data = {"seq": seq, **{k: v for k, v in info.items() if k != "seq"}}
    sums = _read_json(entry / SUMS_FILE)
    if isinstance(sums, dict) and "snapshot_sha256" not in data:
        data["snapshot_sha256"] = sums  # what `undo` checks the snapshot against before restoring it
    atomic_write(entry / RUN_FILE, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def _read_json(path: Path) -> Any:
    """A small JSON file of memd's own, or None when absent, unreadable, not JSON (never a FIFO read)."""
    try:
        return json.loads(read_regular(path, MAX_JSON_BYTES, follow=False).decode("utf-8"))
    except (OSError, ValueError):
        return None


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
        shutil.rmtree(old)
    _clear_journal(home, ref)
    log.info("memory_dir.swapped", scope=str(ref), run=run_id)
    from memd.gitmem import after_swap

    after_swap(home, ref, run_id)  # the swapped-in directory as one commit when memd.git is on; never raises


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


def _remove_entry(home: Home, ref: Place, run_id: str) -> None:
    _rmtree(history_root(home, ref) / run_id)


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
        _remove_entry(home, ref, run_id)
        _rmtree(staging)
        outcome = "rolled_back"
    elif live.exists():
        _rmtree(old)
        outcome = "completed"
    elif old.exists():
        os.rename(old, live)
        _remove_entry(home, ref, run_id)
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
                _remove_entry(home, ref, run_id)
            _rmtree(live.parent / name)
            removed.append(name)
        elif name.startswith(OLD_PREFIX):
            if live.exists():
                _rmtree(live.parent / name)
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
            _rmtree(entry)  # a snapshot interrupted before its run.json (a damaged one is listed, never removed)
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


# --------------------------------------------------------------------------- listing, pruning


def read_run(entry: Path) -> dict[str, Any] | None:
    try:
        return _run_info(entry)
    except (OSError, ValueError):
        return None


def _run_info(entry: Path) -> dict[str, Any]:
    """An entry's run.json; OSError when there is none, ValueError when it is not a JSON object."""
    try:
        raw = read_regular(entry / RUN_FILE, MAX_JSON_BYTES, follow=False)
    except UnusableFile as exc:
        raise ValueError(str(exc).removeprefix(f"{entry / RUN_FILE}: ")) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError("a symlink") from None
        raise
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    return data


def _runs_in(root: Path, *, damaged: bool = False, scope: str | None = None) -> list[dict[str, Any]]:
    """The completed entries of one scope's history, oldest first; with `damaged`, also those whose
    run.json exists but cannot be read (`kind: "damaged"`, with the reason)."""
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    runs, bad = [], []
    for name in names:
        if not RUN_ID.match(name):
            continue
        try:
            info = _run_info(root / name)
        except ValueError as exc:
            if damaged:
                bad.append((name, str(exc)))
            continue
        except OSError:
            continue  # no run.json: a snapshot cut short, swept by recovery
        runs.append({**info, "run": name, "path": str(root / name)})
    runs.sort(key=lambda r: (r["seq"] if isinstance(r.get("seq"), int) else 0, r["run"]))
    if bad:
        where = scope or next((str(r["scope"]) for r in runs if isinstance(r.get("scope"), str)), None) or _scope_of(root.name)
        for name, why in bad:  # in its place by time: before the first run that started later
            at = next((i for i, r in enumerate(runs) if r["run"] > name), len(runs))
            runs.insert(at, {"run": name, "scope": where, "kind": "damaged", "time": _time_of(name),
                             "path": str(root / name),
                             "reason": f"run.json is damaged ({why}); this run cannot be undone"})  # fmt: skip
    return runs


def _scope_of(history_name: str) -> str:
    """The scope a history directory's name spells, when it spells one plainly (else the name)."""
    if history_name == "global":
        return "global"
    if history_name.startswith("project-") and _PLAIN_KEY.match(history_name[len("project-") :]):
        return f"project:{history_name[len('project-') :]}"
    return history_name


def _time_of(run_id: str) -> str:
    """A run id's time (`20261201T070905Z-…`) in the ISO form run.json uses."""
    t = run_id[:16]
    return f"{t[0:4]}-{t[4:6]}-{t[6:8]}T{t[9:11]}:{t[11:13]}:{t[13:15]}Z"


def list_runs(home: Home, ref: Place | None = None, *, damaged: bool = False) -> list[dict[str, Any]]:
    """Completed history entries (those with a run.json), oldest first; all scopes when `ref` is None.

    With `damaged` (`memd history`, `undo`): also entries whose run.json exists but cannot be
    read, as `{"run", "scope", "kind": "damaged", "time", "reason", "path"}` — listed, never hidden.
    """
    if ref is not None:
        return _runs_in(history_root(home, ref), damaged=damaged, scope=str(ref))
    runs = [r for root in _all_roots(home) for r in _runs_in(root, damaged=damaged)]
    return sorted(runs, key=lambda r: (str(r.get("time") or r["run"]), r["seq"] if isinstance(r.get("seq"), int) else 0))


def _all_roots(home: Home) -> list[Path]:
    try:
        return [home.history_dir / n for n in sorted(os.listdir(home.history_dir))]
    except OSError:
        return []


def prune(home: Home, ref: Place, keep: int) -> list[str]:
    """Keep the newest `keep` entries of a scope; returns the run ids removed."""
    runs = [r["run"] for r in list_runs(home, ref)]
    doomed = runs[: max(0, len(runs) - max(1, keep))]
    for run_id in doomed:
        _remove_entry(home, ref, run_id)
    if doomed:
        log.info("history.pruned", scope=str(ref), removed=len(doomed), kept=keep)
    return doomed


# --------------------------------------------------------------------------- undo


def _file_bytes(directory: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for n in names:
        p = directory / n
        if n.endswith(".md") and n != "MEMORY.md" and p.is_file() and not p.is_symlink():
            out[n] = p.read_bytes()
    return out


def diff_files(before: Path, after: Path) -> dict[str, list[str]]:
    """Which memory files an undo brings back, removes and restores to other bytes.

    MEMORY.md is left out: it is derived, and the refresh after the swap rebuilds it.
    """
    a, b = _file_bytes(before), _file_bytes(after)
    return {
        "restored": sorted(n for n in b if n in a and a[n] != b[n]),
        "removed": sorted(n for n in a if n not in b),
        "brought_back": sorted(n for n in b if n not in a),
    }


def undo(
    home: Home,
    settings: Any,
    ref: Place,
    run_id: str | None,
    *,
    now: datetime,
    lock_timeout: float,
    on_wait: Any = None,
    logger: Any = None,
) -> dict[str, Any]:
    """Put the scope back exactly as it was before `run_id` (default: its latest run).

    The present is snapshotted first as a run of kind "undo", so an undo can be
    undone. Bytes, file set and mtimes of the snapshot are restored; then the
    indexes are refreshed (MEMORY.md only changes if the snapshot's was stale).
    """
    logger = logger or log
    check_own_tree(home.memd_dir)  # memd/history through a link would restore (and snapshot) elsewhere
    with acquire(home, [ref], timeout=lock_timeout, on_wait=on_wait):
        recover_scope(home, ref, logger)
        chosen = _choose_run(home, ref, run_id)
        if chosen.get("kind") == "write":
            return _undo_write(home, settings, ref, chosen, now, logger)
        source = Path(chosen["path"]) / FILES_DIR
        if not source.is_dir() or source.is_symlink():
            raise HistoryError(f"run {chosen['run']} of {ref} has no snapshot (files/ is missing)")
        mismatch = verify_snapshot(source, chosen)
        if mismatch:
            raise HistoryError(f"run {chosen['run']} of {ref}: its snapshot does not match the checksums recorded "
                               f"with it ({mismatch}); nothing restored")  # fmt: skip
        new_id = new_run_id(now)
        while (history_root(home, ref) / new_id).exists():
            new_id = new_run_id(now)
        entry = snapshot(home, ref, new_id)
        try:
            staged = stage(home, ref, new_id, source=source, link=False)
            _restore_modes(Path(chosen["path"]), staged.path)
            seal(staged)
            staging = staged.path
            changes = diff_files(entry / FILES_DIR, staging)
            info = {"run": new_id, "scope": str(ref), "kind": "undo", "time": iso(now), "undo_of": chosen["run"],
                    "provider": None, "changes": changes}  # fmt: skip
            write_run_info(entry, info)
            swap_in(home, ref, new_id, staging)
        except BaseException:
            recover_scope(home, ref, logger)
            raise
        refresh_scope(home, settings, ref, now)
        prune(home, ref, int(settings.get("memd.historyKeep")))
    logger.info("dream.undone", scope=str(ref), run=new_id, undo_of=chosen["run"], **{k: len(v) for k, v in changes.items()})
    return info


def _undo_write(home: Home, settings: Any, ref: Place, chosen: dict[str, Any], now: datetime,
                logger: Any) -> dict[str, Any]:  # fmt: skip
    """A write run (extraction, remember, forget, …): its files back as they were (memd.changes)."""
    from memd.changes import UndoConflict, undo_write

    try:
        info = undo_write(home, ref, chosen, now)
    except UndoConflict as exc:
        raise HistoryError(str(exc)) from None
    refresh_scope(home, settings, ref, now)
    prune(home, ref, int(settings.get("memd.historyKeep")))
    logger.info("write.undone", scope=str(ref), run=info.get("run"), undo_of=chosen["run"])
    return info


def _choose_run(home: Home, ref: Place, run_id: str | None) -> dict[str, Any]:
    runs = list_runs(home, ref, damaged=True)
    if not runs:
        raise HistoryError(f"no history for {ref} (memd has not changed it yet)")
    good = [r for r in runs if r.get("kind") != "damaged"]
    if run_id is None:
        latest = max(runs, key=lambda r: r["run"])  # run ids sort by time
        if latest.get("kind") == "damaged":
            raise HistoryError(f"the latest run of {ref}, {latest['run']}: {latest['reason']}; undo an earlier run "
                               "by its id (`memd history`)")  # fmt: skip
        return good[-1]
    for r in runs:
        if r["run"] == run_id:
            if r.get("kind") == "damaged":
                raise HistoryError(f"run {run_id} of {ref}: {r['reason']}")
            return r
    raise HistoryError(f"no run {run_id!r} in the history of {ref} (see `memd history`)")


def verify_snapshot(files: Path, run: dict[str, Any]) -> str | None:
    """What differs between a snapshot's files and the sha256 sums its run recorded, or None when
    they match. An entry from before sums were recorded has none to check: None."""
    sums = run.get("snapshot_sha256")
    if sums is None:
        return None
    if not isinstance(sums, dict) or not all(isinstance(v, str) for v in sums.values()):
        return "its checksums in run.json are unreadable"
    found: dict[str, str] = {}
    for dirpath, _dirs, names in os.walk(files):
        for n in names:
            p = Path(dirpath) / n
            if p.is_symlink():
                continue  # kept as a link, never followed
            rel = p.relative_to(files).as_posix()
            try:
                found[rel] = _sha256(p)
            except OSError as exc:
                return f"{rel}: unreadable ({exc.strerror or exc})"
    for rel in sorted(set(sums) | set(found)):
        if rel not in found:
            return f"{rel} is missing"
        if rel not in sums:
            return f"{rel} was not in it"
        if found[rel] != sums[rel]:
            return f"{rel} changed"
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(f"{path}: not a regular file")
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def find_runs(home: Home, run_id: str) -> list[Place]:
    """The scopes a run id belongs to, for `memd undo RUN` without a scope option: one write
    (an extraction into the drawer and a project) is one run id in each scope it changed."""
    hits = [r for r in list_runs(home) if r["run"] == run_id]
    if not hits:
        raise HistoryError(f"no run {run_id!r} in the history (see `memd history`)")
    return sorted({Place.parse(str(r.get("scope"))) for r in hits}, key=lambda p: p.sort_key)


def refresh_scope(home: Home, settings: Any, ref: Place, now: datetime) -> None:
    """MEMORY.md, the drawer render and search rows of one scope, as `memwrite.refresh` does for jobs."""
    from memd.indexer import refresh_dir

    refresh_dir(
        home, ref.kind, ref.key, ref.memory_dir(home),
        max_bytes_drawer=int(settings.get("memory.global.maxBytes")), today=now.date(),
        write_index=bool(settings.get("memory.indexConsolidation.enabled")),
        write_drawer=bool(settings.get("memory.global.enabled")),
    )  # fmt: skip
