"""Locks on what memd writes (DESIGN "Locks"); the daemon's own lock is in memd/daemon/lock.py.

Invariants this module keeps:

* One lock file per written scope — the global drawer, a project's memory, a
  session's summary — under `memd/locks/` (directory 0700, files 0600). Agents
  never take these locks (SPEC §1.3); they serialise memd's own writers: the
  daemon's jobs and `memd run-now` from a shell.
* Scopes are always taken in the canonical order global → project → session
  (and by key within a kind), whatever order the caller lists them in, so two
  writers can never hold one lock each while waiting for the other's.
* Every wait is bounded. A caller that cannot lock gets `LockBusy` and retries
  later; it never runs unlocked.
* A lock path is never followed through a symlink: filelock opens with
  O_NOFOLLOW, so a link planted at a lock path fails to open instead of
  truncating or creating its target. We turn that failure into one clear line.

The locks are `flock(2)` locks: the kernel drops them when the holder exits,
however it exits, so there is no stale-lock cleanup to get wrong. The
primitives (`file_lock`, `try_lock`, `check_not_symlink`) are shared with
memd/daemon/lock.py.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from memd.errors import BusyError, MemdError
from memd.fsutil import PRIVATE_FILE, ensure_private_dir
from memd.tree import Home, Place

if TYPE_CHECKING:
    from filelock import BaseFileLock


_POLL_S = 0.05


class LockError(MemdError):
    """A lock could not be taken for a reason a user can act on."""


class UnsafeLockPath(LockError):
    """A lock path (or the locks directory) is a symlink or not a regular file.

    Someone planted it; following it could truncate or create a file elsewhere.
    """


class LockBusy(LockError, BusyError):
    """Another memd process holds the scope longer than the caller may wait.

    Exit code 75 is EX_TEMPFAIL: try again later (a job is retried, never run
    unlocked).
    """

    def __init__(self, scope: Place, waited_s: float, path: Path) -> None:
        self.scope = scope
        self.waited_s = waited_s
        self.path = path
        super().__init__(
            f"lock busy: {scope} is held by another memd process "
            f"(waited {waited_s:.1f}s; lock file {path})"
        )


GLOBAL = Place("global")


def canonical_order(scopes: Sequence[Place]) -> list[Place]:
    """Scopes deduplicated and sorted global → project → session."""
    return sorted(set(scopes), key=lambda s: s.sort_key)


def lock_file_name(scope: Place) -> str:
    """A file name that is safe whatever the key or session id holds (see `Place.lock_name`)."""
    return scope.lock_name


def lock_path(home: Home, scope: Place) -> Path:
    return home.locks_dir / lock_file_name(scope)


def ensure_locks_dir(home: Home) -> Path:
    """The locks directory, private, and not a symlink (a planted link would move every lock);
    nor is memd's own directory above it (`fsutil.ensure_own_dir`)."""
    from memd.fsutil import UnusableFile, ensure_own_dir  # noqa: PLC0415 - start-up

    try:
        ensure_own_dir(home.memd_dir, home.memd_dir)
    except UnusableFile as exc:
        raise UnsafeLockPath(str(exc)) from None
    d = home.locks_dir
    if d.is_symlink():
        raise UnsafeLockPath(f"{d}: the locks directory is a symlink; refusing to use it")
    ensure_private_dir(d)
    if not d.is_dir():
        raise UnsafeLockPath(f"{d}: the locks path is not a directory")
    return d


def file_lock(path: Path) -> BaseFileLock:
    """A fresh, non-reentrant-across-calls flock on `path`.

    filelock is imported here so that importing this module (e.g. for its
    exception classes) stays cheap for `memd status`. thread_local=False: the
    object is used from the thread that created it, and a fresh instance per
    acquisition means two threads of one process contend like two processes
    (flock locks belong to the open file description).
    """
    from filelock import FileLock  # noqa: PLC0415 - start-up: filelock only when a lock is taken

    return FileLock(path, mode=PRIVATE_FILE, thread_local=False, fallback_to_soft=False)


def check_not_symlink(path: Path) -> None:
    # An early, readable refusal. The real guarantee is O_NOFOLLOW in filelock,
    # which also covers a link planted between this check and the open.
    if path.is_symlink():
        raise UnsafeLockPath(f"{path}: lock file is a symlink; refusing to follow it (remove it)")


def try_lock(lock: BaseFileLock, path: Path, timeout: float) -> bool:
    """One bounded attempt; False on contention, UnsafeLockPath on a planted link."""
    from filelock import Timeout  # noqa: PLC0415 - start-up: filelock only when a lock is taken

    try:
        if timeout <= 0:
            lock.acquire(blocking=False)
        else:
            lock.acquire(timeout=timeout, poll_interval=_POLL_S)
    except Timeout:
        return False
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeLockPath(
                f"{path}: lock file is a symlink; refusing to follow it (remove it)"
            ) from exc
        raise
    _tighten(path)
    return True


def _tighten(path: Path) -> None:
    """Lock files are 0600 even if one was created under another umask or by hand.

    Opened with O_NOFOLLOW and changed through the descriptor, so a link swapped
    in after the lock was taken cannot redirect the chmod.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o777 != PRIVATE_FILE and st.st_uid == os.geteuid():
            os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)


@dataclass
class Held:
    """What `acquire` took: the scopes in acquisition order and how long it waited."""

    scopes: list[Place] = field(default_factory=list)
    waited_s: dict[Place, float] = field(default_factory=dict)

    @property
    def total_wait_s(self) -> float:
        return sum(self.waited_s.values())


def _take_one(
    home: Home,
    scope: Place,
    deadline: float,
    on_wait: Callable[[Place], None] | None,
    clock: Callable[[], float],
) -> tuple[BaseFileLock, float]:
    path = lock_path(home, scope)
    check_not_symlink(path)
    lock = file_lock(path)
    start = clock()
    if try_lock(lock, path, 0):
        return lock, 0.0
    left = deadline - clock()
    if left <= 0:
        raise LockBusy(scope, clock() - start, path)  # no budget: do not announce a wait that won't happen
    # Held by someone else: say so once, visibly, then wait what is left of the budget.
    if on_wait is not None:
        on_wait(scope)
    if try_lock(lock, path, max(0.0, deadline - clock())):
        return lock, clock() - start
    raise LockBusy(scope, clock() - start, path)


@contextmanager
def acquire(
    home: Home,
    scopes: Sequence[Place],
    *,
    timeout: float,
    on_wait: Callable[[Place], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[Held]:
    """Hold every scope in `scopes` for the body of the `with`.

    `timeout` bounds the whole acquisition (all scopes together), so a caller
    knows the worst case. `on_wait(scope)` is called once for each scope found
    held by someone else, before waiting for it. On any failure every lock
    taken so far is released before the exception propagates.
    """
    ordered = canonical_order(scopes)
    ensure_locks_dir(home)
    deadline = clock() + max(0.0, timeout)
    held = Held()
    with ExitStack() as stack:
        for scope in ordered:
            lock, waited = _take_one(home, scope, deadline, on_wait, clock)
            stack.callback(lock.release)
            held.scopes.append(scope)
            held.waited_s[scope] = waited
        yield held


__all__ = [
    "GLOBAL",
    "Held",
    "LockBusy",
    "LockError",
    "UnsafeLockPath",
    "acquire",
    "canonical_order",
    "check_not_symlink",
    "ensure_locks_dir",
    "file_lock",
    "lock_file_name",
    "lock_path",
    "try_lock",
]
