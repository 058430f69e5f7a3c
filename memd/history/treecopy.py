"""Copying a memory directory for the dream swap (`memd.history.snapshots`): byte-exact, mtimes kept, never a link followed.

A FIFO, socket or device in the directory raises `SpecialFile` (such a
directory is left alone). Copies are made durable in one batch (`durable`: one `syncfs` for a whole scope);
`signature` sees any edit made to a directory since it was taken.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memd.fsutil import fsync_dir


class SpecialFile(OSError):
    """A memory directory holding a FIFO, socket or device: never copied, never swapped."""


@dataclass
class Copied:
    """What a copy wrote: the regular files with new data and every directory, to fsync."""

    files: list[Path]
    dirs: list[Path]


def copy_tree(src: Path, dst: Path, *, link: bool, out: Copied | None = None,
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
    fds = _dir_fds(src, dst) if link else None
    try:
        for e in entries:
            if fds is not None and e.is_file(follow_symlinks=False) and _link_at(e.name, fds):
                continue  # the common case of a dream's staging: one linkat, no paths built
            _copy_entry(e, dst, link=link, out=out, modes=modes, rel=rel, sums=sums)
    finally:
        for fd in fds or ():
            os.close(fd)
    shutil.copystat(src, dst, follow_symlinks=False)
    if modes is not None:
        modes[rel or "."] = os.stat(src).st_mode & 0o7777
        os.chmod(dst, 0o700)
    return out


def _dir_fds(src: Path, dst: Path) -> tuple[int, int]:
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(src, flags)
    try:
        return fd, os.open(dst, flags)
    except BaseException:
        os.close(fd)
        raise


def _link_at(name: str, fds: tuple[int, int]) -> bool:
    """A hard link of `name` from one open directory to the other; False means: copy instead
    (no hard links here, or the file went: the per-entry path below decides)."""
    try:
        os.link(name, name, src_dir_fd=fds[0], dst_dir_fd=fds[1], follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOENT):
            return False
        raise
    return True


def _copy_entry(e: os.DirEntry[str], dst: Path, *, link: bool, out: Copied, modes: dict[str, int] | None, rel: str,
                sums: dict[str, str] | None) -> None:  # fmt: skip
    """One entry of `copy_tree`: a symlink as a symlink, a directory recursively, a file copied (or linked)."""
    s, d = Path(e.path), dst / e.name
    try:
        if e.is_symlink():
            os.symlink(os.readlink(s), d)
        elif e.is_dir(follow_symlinks=False):
            copy_tree(s, d, link=link, out=out, modes=modes, rel=f"{rel}{e.name}/", sums=sums)
        elif e.is_file(follow_symlinks=False):
            if not (link and _hard_link(s, d)):
                st = e.stat(follow_symlinks=False)
                digest = _copy_file(s, d, st, digest=sums is not None, mode=None if modes is None else 0o600)
                if sums is not None and digest is not None:
                    sums[rel + e.name] = digest
                out.files.append(d)
                if modes is not None:
                    modes[rel + e.name] = st.st_mode & 0o7777
        else:
            raise SpecialFile(f"{s}: not a regular file, directory or symlink; the directory is left alone")
    except FileNotFoundError:
        return  # removed while we copied: the pre-swap signature check catches the change


def _copy_file(src: Path, dst: Path, st: os.stat_result, *, digest: bool = False, mode: int | None = None) -> str | None:
    """Bytes, mode (the source's, or `mode`) and mtime (to the nanosecond); no fsync here
    (`durable` batches them). With `digest`, returns the sha256 of the bytes copied.

    Leaner than `shutil.copy2` (no xattr probing, no file objects, one chmod), which matters at
    thousands of files a run.
    """
    h = hashlib.sha256() if digest else None
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fd_in = os.open(src, os.O_RDONLY)
        try:
            while chunk := os.read(fd_in, min(max(st.st_size + 1, 1 << 16), 1 << 22)):  # most files: one read
                if h is not None:
                    h.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
        finally:
            os.close(fd_in)
        os.fchmod(fd, st.st_mode & 0o7777 if mode is None else mode)
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


#: Up to this many files, one fsync each; beyond, one `syncfs` of their file system is cheaper.
FSYNC_EACH_UP_TO = 16


def durable(copied: Copied) -> None:
    """Make every copied file's data and every directory durable before anyone names them.

    Few files: fsync each, then the directories. Many (a scope copied whole): one `syncfs`
    per file system the directories live on. On Linux `syncfs` waits for the writeback and,
    in the words of sync(2), "provides the same guarantees as fsync() called on every file
    in the filesystem", directory entries included, and reports write errors since 5.8; so
    the crash guarantee is the batch's, at the cost of one flush instead of one journal
    commit per file. Where `syncfs` is missing (not Linux), or fails, each file is fsynced.
    """
    if len(copied.files) > FSYNC_EACH_UP_TO and _sync_file_systems(copied.dirs):
        return
    for f in copied.files:
        fd = os.open(f, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for d in reversed(copied.dirs):
        fsync_dir(d)


def _sync_file_systems(dirs: list[Path]) -> bool:
    """`syncfs` once per file system holding `dirs`; False when it is unavailable or failed."""
    call = _syncfs()
    if call is None or not dirs:
        return False
    one: dict[int, Path] = {}
    for d in dirs:
        one.setdefault(os.stat(d, follow_symlinks=False).st_dev, d)
    for d in one.values():
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            if call(fd) != 0:
                return False
        finally:
            os.close(fd)
    return True


_SYNCFS: list[Any] = []


def _syncfs() -> Any:
    """libc's `syncfs(fd)` on Linux (looked up once), else None."""
    if not _SYNCFS:
        found = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes  # noqa: PLC0415 - only a dream's whole-scope copy needs it

                found = ctypes.CDLL(None, use_errno=True).syncfs
                found.argtypes, found.restype = [ctypes.c_int], ctypes.c_int
            except (OSError, AttributeError):
                found = None
        _SYNCFS.append(found)
    return _SYNCFS[0]


def rmtree(path: Path) -> None:
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


Signature = dict[str, tuple[int, int, int, int]]


def signature(directory: Path, stats: dict[str, os.stat_result] | None = None) -> Signature:
    """(inode, size, mtime_ns, mode) of every entry: one stat each, enough to see any edit.
    `stats` (file name → lstat) receives those stats, for a caller that packs the directory next."""
    stats = {} if stats is None else stats
    try:
        with os.scandir(directory) as it:
            for e in it:
                try:
                    stats[e.name] = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
    except FileNotFoundError:
        pass
    return signature_of(stats)


def signature_of(stats: dict[str, os.stat_result]) -> Signature:
    """A signature from lstats taken already (the dream's scan takes one an entry: `scan_dir(stats=…)`)."""
    return {name: (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode) for name, st in stats.items()}
