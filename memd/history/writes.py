"""One history for every memd write: the files a write changes, before and after, and their undo.

Dream rewrites a whole directory and keeps a whole snapshot (`memd.history.runs`).
Every other write — an extraction run, `memd remember`/`edit`/`forget`, an
accepted proposal, an MCP write, a key migration — changes a few files, so its
history entry keeps just those: the bytes (and mtime) each file had before, and
a hash of what the write left. It lives beside the dream entries, in
`memd/history/<scope>/<run-id>/` with `run.json` (`kind: "write"`) and `before/`.

Order, under the scope's lock: the before-images are copied and fsynced before a
file is replaced, and `run.json` is written last, so an entry that exists is
complete; a write that crashed midway leaves an entry without `run.json`, which
`memd history` does not list and the next recovery sweeps.

Undo of a write run restores exactly the files it changed, byte for byte, if
they still hold what the run left; a file changed since (by a later run or by
hand) stops the undo with the file's name, nothing restored. The undo is itself
a write run, so it can be undone.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memd.clock import iso
from memd.fsutil import atomic_write, ensure_private_dir, fsync_dir
from memd.tree import Home, Place

BEFORE_DIR = "before"


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        if path.is_symlink() or not path.is_file():
            return None
        return path.read_bytes()
    except OSError:
        return None


@dataclass
class Recorder:
    """Collects before-images of the files one write touches in one scope; `commit` completes the entry."""

    home: Home
    place: Place
    job: str
    reason: str
    now: datetime
    run_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    directory: Path | None = None  # where the files live when not the scope's memory directory (`memd init`)
    _before: dict[str, tuple[str | None, int | None]] = field(default_factory=dict)  # sha, mode
    _entry: Path | None = None

    def __post_init__(self) -> None:
        from memd.history.store import history_root, new_run_id  # noqa: PLC0415 - start-up
        if not self.run_id:
            self.run_id = new_run_id(self.now)
        root = history_root(self.home, self.place)
        while not self._entry and (root / self.run_id).exists():
            self.run_id = new_run_id(self.now)

    @property
    def entry(self) -> Path:
        from memd.history.store import history_root  # noqa: PLC0415 - start-up
        return history_root(self.home, self.place) / self.run_id

    def before(self, path: Path) -> None:
        """Keep `path`'s current bytes (if any) before it is replaced or deleted. Call before each write."""
        name = path.name
        if name in self._before:
            return
        data = _read(path)
        mode = None
        if data is not None:
            entry = self._open()
            copy = entry / BEFORE_DIR / name
            import shutil  # noqa: PLC0415 - start-up: a run that keeps no file imports neither shutil nor its compressors

            shutil.copy2(path, copy, follow_symlinks=False)  # bytes and mtime
            mode = os.stat(copy).st_mode & 0o777
            os.chmod(copy, 0o600)  # memd's history is private, whatever the memory file's mode
            with open(copy, "rb") as fh:
                os.fsync(fh.fileno())
            fsync_dir(copy.parent)
        self._before[name] = (_sha(data), mode)

    def _open(self) -> Path:
        if self._entry is None:
            ensure_private_dir(self.entry.parent)
            os.mkdir(self.entry, 0o700)
            os.mkdir(self.entry / BEFORE_DIR, 0o700)
            self._entry = self.entry
        return self._entry

    def commit(self) -> dict[str, Any] | None:
        """Write `run.json` if anything changed; an entry where nothing changed is removed."""

        directory = self.directory or self.place.memory_dir(self.home)
        files: dict[str, dict[str, Any]] = {}
        changes: dict[str, list[str]] = {"added": [], "updated": [], "deleted": []}
        for name, (before, mode) in sorted(self._before.items()):
            after = _sha(_read(directory / name))
            if after == before:
                continue
            files[name] = {"before": before, "after": after, **({"mode": mode} if mode is not None else {})}
            changes["added" if before is None else "deleted" if after is None else "updated"].append(name)
        if not files:
            self.discard()
            return None
        entry = self._open()
        info = {"run": self.run_id, "scope": str(self.place), "kind": "write", "job": self.job, "reason": self.reason,
                "time": iso(self.now), "files": files, "changes": changes, **self.extra}  # fmt: skip
        if self.directory is not None:
            info["directory"] = str(self.directory)
        from memd.history.store import write_run_info  # noqa: PLC0415 - start-up
        write_run_info(entry, info)
        return info  # the writer passes it to `memd.git.commits.after_run` (a commit when memd.git is on)

    def discard(self) -> None:
        if self._entry is not None:
            import shutil  # noqa: PLC0415 - start-up

            shutil.rmtree(self._entry, ignore_errors=True)
            self._entry = None


def refresh_recorded(home: Home, settings: Any, place: Place, now: datetime, also: Any = (),
                     hold: bool = False, listing: list[str] | None = None, index: Any = None) -> Any:  # fmt: skip
    """`refresh_place`, with a rewrite of a MEMORY.md that holds lines memd did not write (Claude
    Code's auto-memory, `/memory`, a hand edit) kept as a write run of job `index` (SPEC §14):
    `memd undo` brings the file's bytes back. A MEMORY.md that is memd's own output untouched is
    derived from the memory files, whose runs already cover it, and records nothing. `hold` (the
    daemon's jobs): a project's MEMORY.md waits for its agent to go quiet (`memd.index.hold`).
    `listing`: the directory's names as just listed, `index`: an open search index writer to use
    (`refresh_dir`)."""
    from memd.index.refresh import refresh_place  # noqa: PLC0415 - start-up

    rec = Recorder(home, place, "index", "MEMORY.md rebuilt beside lines memd did not write", now)
    try:
        result = refresh_place(home, settings, place, now.date(), record=rec.before, also=also,
                               hold_at=now if hold else None, listing=listing, index=index)  # fmt: skip
    except BaseException:
        rec.discard()
        raise
    info = rec.commit()
    if info is not None:
        result.index_run = info["run"]
    return result


class UndoConflict(Exception):
    """A file a run changed was changed again since: undoing would lose that change."""


def undo_write(home: Home, place: Place, run: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Restore the files a write run changed to their bytes before it. The caller holds the scope's lock."""
    outside = run.get("directory")  # a write outside the memory directory (`memd init`'s instruction file)
    directory = Path(outside) if isinstance(outside, str) and outside else place.memory_dir(home)
    files: dict[str, dict[str, Any]] = run.get("files") or {}
    entry = Path(run["path"])
    for name, sums in files.items():
        _check_name(name)
        if _sha(_read(directory / name)) != sums.get("after"):
            raise UndoConflict(f"{directory / name} changed after run {run['run']}; undo the later change first "
                               "(`memd history`) or edit the file by hand")  # fmt: skip
        if sums.get("before") is not None and _sha(_read(entry / BEFORE_DIR / name)) != sums["before"]:
            raise UndoConflict(f"run {run['run']}: the kept copy of {name} is damaged (checksum mismatch); "
                               "nothing restored")  # fmt: skip
    rec = Recorder(home, place, job="undo", reason=f"undo of {run['run']}", now=now, extra={"undo_of": run["run"]},
                   directory=directory if outside else None)  # fmt: skip
    for name, sums in sorted(files.items()):
        target = directory / name
        rec.before(target)
        if sums.get("before") is None:
            if target.exists():
                target.unlink()
                fsync_dir(directory)
        else:
            kept = entry / BEFORE_DIR / name
            mode = sums.get("mode")
            atomic_write(target, kept.read_bytes(), mode=mode if isinstance(mode, int) else 0o600)
            st = kept.stat()
            os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    return rec.commit() or {"run": None, "scope": str(place), "kind": "write", "changes": {}}


def _check_name(name: str) -> None:
    if "/" in name or name in ("", ".", "..") or not name.endswith(".md"):
        raise UndoConflict(f"run entry names {name!r}, which is not a memory file; refusing to restore it")


def describe(info: dict[str, Any]) -> str:
    """One line for `memd history`: the job, why, and counts."""
    ch = info.get("changes") or {}
    counts = ", ".join(f"{len(v)} {k}" for k, v in ch.items() if isinstance(v, list) and v)
    return f"{info.get('job', '?')}: {info.get('reason', '')} ({counts or 'nothing'})"


def dumps(info: dict[str, Any]) -> str:
    return json.dumps(info, ensure_ascii=False)
