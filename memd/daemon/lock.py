"""The one-daemon-per-home lock and its pid file (DESIGN "Locks").

Invariants this module keeps:

* `memd run` holds `memd/locks/daemon.lock` for the daemon's whole life; a
  second daemon on the same home gets `AlreadyRunning` naming the holder.
* Liveness is "is that lock held", never "does the pid in daemon.json exist"
  (pids are reused). The pid file is informational: written after the lock is
  taken, removed only by the process it names.
* Probing (`daemon_alive`, used by `memd status` and `memd doctor`) creates
  nothing in a home where no daemon ever ran.

It is a `flock(2)` lock taken with the primitives of memd/locks.py, so the
same symlink refusal and 0600 mode apply and the kernel drops it however the
daemon exits.
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memd.errors import AlreadyRunningError
from memd.fsutil import atomic_write, ensure_private_dir
from memd.locks import LockError, check_not_symlink, ensure_locks_dir, file_lock, try_lock
from memd.tree import Home

if TYPE_CHECKING:
    from filelock import BaseFileLock

DAEMON_LOCK_NAME = "daemon.lock"
# How long DaemonLock waits before declaring "already running": long enough to
# ride out a `memd status` probe that holds the lock for microseconds, short
# enough to be non-blocking to a human.
DAEMON_GRACE_S = 0.25


class AlreadyRunning(LockError, AlreadyRunningError):
    """A daemon already runs on this home: one daemon per DEEPCODE_HOME."""

    def __init__(self, home: Home, info: dict[str, Any] | None) -> None:
        self.home = home
        self.info = info or {}
        pid = self.info.get("pid")
        since = self.info.get("since")
        who = f"pid {pid}" if pid is not None else "pid unknown"
        if since:
            who += f", since {since}"
        super().__init__(f"memd is already running for {home.root} ({who})")


def daemon_lock_path(home: Home) -> Path:
    return home.locks_dir / DAEMON_LOCK_NAME


def write_pid_file(home: Home, *, pid: int | None = None, version: str | None = None,
                   now: datetime | None = None) -> dict[str, Any]:
    """Record who holds the daemon lock, atomically (a reader never sees half of it).

    Written after the lock is taken, so its contents describe the holder; it is
    informational only — liveness comes from the lock, not from this file.
    """
    from memd import __version__  # noqa: PLC0415 - start-up

    info = {
        "pid": os.getpid() if pid is None else pid,
        "since": (now or datetime.now(UTC)).isoformat(timespec="seconds"),
        "version": version or __version__,
        "home": str(home.root),
    }
    ensure_private_dir(home.memd_dir)
    atomic_write(home.pid_file, json.dumps(info, sort_keys=True) + "\n")
    return info


def read_pid_file(home: Home) -> dict[str, Any] | None:
    """The pid file's record, or None if it is missing or unreadable (never raises)."""
    try:
        with open(home.pid_file, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remove_pid_file(home: Home, *, pid: int | None = None) -> None:
    """Remove the pid file if it names `pid` (default: this process), so we never delete a successor's."""
    info = read_pid_file(home)
    if info is not None and info.get("pid") != (os.getpid() if pid is None else pid):
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(home.pid_file)


class DaemonLock:
    """The single-instance lock of `memd run`, held for the daemon's life.

    `acquire()` only locks; used as a context manager it also writes the pid
    file on entry and removes it on exit.
    """

    def __init__(self, home: Home, *, grace_s: float = DAEMON_GRACE_S) -> None:
        self.home = home
        self.path = daemon_lock_path(home)
        self.grace_s = grace_s
        self._lock: BaseFileLock | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None

    def acquire(self) -> None:
        """Take the lock or raise AlreadyRunning naming the holder's pid."""
        if self._lock is not None:
            return
        ensure_locks_dir(self.home)
        check_not_symlink(self.path)
        lock = file_lock(self.path)
        if not try_lock(lock, self.path, self.grace_s):
            raise AlreadyRunning(self.home, read_pid_file(self.home))
        self._lock = lock

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> DaemonLock:
        self.acquire()
        try:
            write_pid_file(self.home)
        except BaseException:
            self.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            remove_pid_file(self.home)
        finally:
            self.release()


def daemon_alive(home: Home) -> dict[str, Any] | None:
    """The running daemon's pid-file record, or None if no daemon holds the lock.

    Liveness is tested by trying the daemon lock without waiting, never by the
    pid (a dead daemon's pid may belong to another process by now). If the lock
    is held but the pid file is not written yet, the record is `{"pid": None}`.
    The probe holds the lock for microseconds; DaemonLock's grace rides that out.
    """
    path = daemon_lock_path(home)
    if not home.locks_dir.is_dir() or not os.path.lexists(path):
        return None  # no daemon ever ran here; do not create anything for a probe
    check_not_symlink(path)
    lock = file_lock(path)
    if try_lock(lock, path, 0):
        lock.release()
        return None
    return read_pid_file(home) or {"pid": None}


__all__ = [
    "DAEMON_GRACE_S",
    "DAEMON_LOCK_NAME",
    "AlreadyRunning",
    "DaemonLock",
    "daemon_alive",
    "daemon_lock_path",
    "read_pid_file",
    "remove_pid_file",
    "write_pid_file",
]
