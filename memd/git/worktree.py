"""The live memory directories as the memory repository's work tree (the design: `memd.git.commits`).

There is no second copy of the files: a commit reads the live directories here
(`scan_place`: memory files of at most 1 MB, each scanned for secrets, a file
that fails is refused and recorded, never staged); a sync, an import or a project
first linked on this machine writes into them here (`write_live`, one undoable
history run per scope; the caller commits them).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memd.fsutil import ensure_private_dir, fsync_dir, read_at_most
from memd.git.layout import (
    FILE_MODE,
    MAX_FILE_BYTES,
    dir_files,
    is_memory_name,
)
from memd.git.plumbing import Entries, blob_sha
from memd.logs.lazy import lazy_logger
from memd.settings import Settings
from memd.tree import Home, Place

log = lazy_logger("memd.gitmem")

def scan_place(d: str, live: Path, new: Entries, wanted: set[str] | None, puts: dict[str, bytes], out: Commit,
               exclude: set[str], refused: dict[str, Any]) -> None:  # fmt: skip
    """Stage the live files of one directory into `new` (secrets refused), deletions included.

    `refused` is the state file's record of files kept out (path → file, reason, since)."""

    present: dict[str, Path] = {}
    if wanted is None:
        try:
            with os.scandir(live) as it:
                for e in it:
                    if is_memory_name(e.name) and e.is_file(follow_symlinks=False):
                        present[e.name] = Path(e.path)
        except OSError:
            pass
        names = set(present) | set(dir_files(new, d))
    else:
        names = {n for n in wanted if is_memory_name(n)}
        for n in names:
            p = live / n
            if p.is_file() and not p.is_symlink():
                present[n] = p
    from memd.redact.redactor import find_secrets  # noqa: PLC0415 - start-up
    for name in sorted(names - exclude):
        path = f"{d}/{name}"
        if name not in present:
            if (refused.get(path) or {}).get("incoming"):
                continue  # kept aside when it arrived (`memd.git.quarantine`): absent here is no deletion
            if path in new:
                del new[path]
                out.changed.append(path)
            refused.pop(path, None)
            continue
        try:
            data = read_capped(present[name])
        except OSError:
            continue
        if data is None:
            _refuse(refused, path, present[name], "larger than 1 MB", out)
            continue
        sha = blob_sha(data)
        if new.get(path, ("", ""))[1] == sha:
            refused.pop(path, None)
            continue
        found = sorted({rule for rule, _span in find_secrets(data.decode("utf-8", "replace"))})
        if found:
            _refuse(refused, path, present[name], "holds what looks like a secret (" + ", ".join(found) + ")", out)
            continue
        refused.pop(path, None)
        new[path] = (FILE_MODE, sha)
        puts[path] = data  # exactly the bytes that were scanned
        out.changed.append(path)


def _refuse(refused: dict[str, Any], path: str, file: Path, why: str, out: Commit) -> None:
    prev = refused.get(path)
    refused[path] = {"file": str(file), "reason": why, "since": (prev or {}).get("since") or _now_iso()}
    out.refused[str(file)] = why
    if not prev or prev.get("reason") != why:
        log.warning("git.file_refused", file=str(file), reason=why)


def read_capped(path: Path) -> bytes | None:
    """The file's bytes, or None when it is over MAX_FILE_BYTES."""
    data = read_at_most(path, MAX_FILE_BYTES)
    return None if len(data) > MAX_FILE_BYTES else data


def _now_iso() -> str:
    from memd.clock import iso, system_clock  # noqa: PLC0415 - start-up
    return iso(system_clock())


IndexHold = Callable[[Place, float], None]  # `JobContext.index_held`: a MEMORY.md rewrite left for later


def write_live(home: Home, place: Place, writes: dict[str, bytes | None], *, job: str, reason: str,
               settings: Settings | None = None, extra: dict[str, Any] | None = None,
               mtimes: dict[str, int] | None = None, aside: list[dict[str, str]] | None = None,
               hold: IndexHold | None = None) -> list[str]:  # fmt: skip
    """Write (bytes) or delete (None) memory files of one live directory as one history run.

    Every file written comes from elsewhere (a remote, a tar, the repository): each must pass
    the checks of any memd write (`memd.memory.incoming.vet`); one that fails is kept aside
    (`memd.git.quarantine`, its event appended to `aside`) and never reaches the live directory.
    The caller holds the place's scope lock. The run is undoable like any write
    (`memd undo`); it is not committed to git here (the caller commits). `hold` (the daemon's sync):
    the rewrite of a project's MEMORY.md waits while an agent works there (`memd.index.hold`), and a
    held one is handed to `hold` with the seconds left, for the daemon's index job to do then.
    """

    if not writes:
        return []
    live = place.memory_dir(home)
    if link := home.memory_link(place.key):
        log.warning("git.symlink_skipped", dir=str(live), link=str(link))
        return []
    from memd.clock import system_clock  # noqa: PLC0415 - start-up
    writes = _vetted(home, place, writes, f"{job}: {reason}", aside)
    if not writes:
        return []
    from memd.history.writes import Recorder  # noqa: PLC0415 - start-up
    rec = Recorder(home, place, job, reason, system_clock(), extra=extra or {})
    done: list[str] = []
    staged: list[tuple[str, str, Path]] = []
    try:
        import tempfile  # noqa: PLC0415 - start-up
        for name, data in sorted(writes.items()):
            target = live / name
            if not is_memory_name(name) or target.is_symlink():
                continue
            rec.before(target)
            if data is None:
                if target.exists():
                    target.unlink()
                    done.append(name)
                continue
            # Each file is replaced atomically (temporary file, fsync, rename) as atomic_write does;
            # the directory is fsynced once for the whole batch (a first pull writes hundreds).
            ensure_private_dir(live)
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=live)
            staged.append((name, tmp, target))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o600)
        for name, tmp, target in staged:
            os.replace(tmp, target)
            if mtimes and name in mtimes:
                os.utime(target, ns=(mtimes[name], mtimes[name]))
            done.append(name)
        staged = []
    finally:
        for _name, tmp, _target in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    if done:
        fsync_dir(live)
    rec.commit()  # no git commit here: the sync or import that called this commits itself
    if settings is not None and done:
        from memd.history.writes import refresh_recorded  # noqa: PLC0415 - start-up
        result = refresh_recorded(home, settings, place, system_clock(), hold=hold is not None)
        if hold is not None and result.index_held > 0:
            hold(place, result.index_held)
    return done


def _vetted(home: Home, place: Place, writes: dict[str, bytes | None], source: str,
            aside: list[dict[str, str]] | None) -> dict[str, bytes | None]:  # fmt: skip
    """`writes` without the incoming files that fail `vet`, which are kept aside instead."""
    from memd.git.quarantine import keep_aside  # noqa: PLC0415 - start-up
    from memd.memory.incoming import vet  # noqa: PLC0415 - start-up
    out: dict[str, bytes | None] = {}
    for name, data in writes.items():
        why = None if data is None else vet(name, data)
        if why is None:
            out[name] = data
            continue
        ev = keep_aside(home, place, name, data, why, source, _now_iso())
        if aside is not None:
            aside.append(ev)
    return out


@dataclass
class Commit:
    """What a commit took in: its id, the files staged and those refused."""

    sha: str | None
    changed: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    written: dict[Place, list[str]] = field(default_factory=dict)  # files written into live directories
