"""Atomic, private file writes.

Every file memd writes that an agent or a user reads is replaced atomically
(SPEC §1.3): write a temporary file in the same directory, fsync it, rename it
over the target, fsync the directory. A reader therefore sees the old bytes or
the new bytes, never half a file, and a crash at any point leaves the old file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from memd.errors import MemdError

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


class UnusableFile(OSError, MemdError):
    """A path memd reads or keeps its own files in is not what it must be: a FIFO, socket or
    device where a regular file belongs, a file over its size limit, or a symlink in memd's own
    directory. An `OSError` (jobs fail with its one-line reason) and a `MemdError` (a command
    prints it as one line, exit 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unusable file"


def utf8_name(name: str) -> bool:
    """Whether a name from the OS encodes as UTF-8: False for one whose bytes are not (the OS's surrogate
    escapes hold them in a `str`), which no SQLite row, JSON answer or view of memd's can carry."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(path: Path | str) -> str:
    """`path` as text every writer takes (UTF-8 JSON, SQLite, a log line): a name whose bytes are not
    valid UTF-8 — kept in a `str` by the OS's surrogate escapes, which strict encoders refuse — shows
    those bytes as `\\xNN`. Any other path is itself. For display only: it may name no file."""
    text = str(path)
    if text.isascii():
        return text
    return os.fsencode(text).decode("utf-8", "backslashreplace")


def kind_of(mode: int) -> str:
    """What a file type is called in a refusal: `a FIFO`, `a directory`, ..."""
    for test, name in ((stat.S_ISREG, "a file"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink")):  # fmt: skip
        if test(mode):
            return name
    return "an unknown kind of file"


def open_regular(path: Path | str, *, follow: bool = True) -> int:
    """A read-only descriptor of `path`, which must be a regular file (after links, unless not `follow`).

    Opened with O_NONBLOCK, so a FIFO planted in a file's place cannot hang the caller (an open
    for reading would wait for a writer forever), then checked with fstat: a FIFO, socket,
    device (`/dev/zero` behind a link) or directory raises `UnusableFile` with one line.
    A missing file raises FileNotFoundError; a link with `follow=False` the OSError ELOOP.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP):  # a socket cannot be opened at all
            raise UnusableFile(f"{path}: a socket, not a regular file; memd reads only regular files") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnusableFile(f"{path}: {kind_of(mode)}, not a regular file; memd reads only regular files")
    return fd


def read_regular(path: Path | str, limit: int | None = None, *, follow: bool = True) -> bytes:
    """The bytes of the regular file `path` (see `open_regular`); over `limit` bytes: `UnusableFile`.

    Reads at most `limit` + 1 bytes, so an oversized file costs no more than its limit.
    """
    fd = open_regular(path, follow=follow)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise UnusableFile(f"{path}: over {_size(limit)}; memd does not read a file this large")
    return data


def read_at_most(path: Path | str, cap: int) -> bytes:
    """At most `cap` + 1 bytes of `path`, never through a link at the last hop nor blocking on a
    FIFO: a caller that gets more than `cap` knows the file is over its cap without reading it all."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        chunks: list[bytes] = []
        left = cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _size(n: int) -> str:
    return f"{n // (1 << 20)} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n:,} bytes"


def check_regular_or_absent(path: Path | str) -> None:
    """Nothing, or a regular file (not followed through a link): what must hold before SQLite opens
    a database there (it would block on a FIFO, and read a device or a directory as garbage)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise UnusableFile(f"{path}: {kind_of(mode)}, not a regular file; memd opens only regular files")


def ensure_own_dir(path: Path | str, own_root: Path | str) -> Path:
    """`path` (`own_root` or a directory below it) as a real directory, created 0700 where missing.

    memd's own directory (`<home>/memd`) and everything below it are never followed through a
    symlink: a link there (`memd/`, `memd/logs`, `memd/history`, ...) would send memd's state,
    log or history outside the home. A link, or a file where a directory belongs, raises
    `UnusableFile` (one line) and nothing is created beyond it.
    """
    path, own_root = Path(path), Path(own_root)
    rel = path.relative_to(own_root)
    if not own_root.parent.exists():
        ensure_private_dir(own_root.parent)
    current = own_root
    for part in ("", *rel.parts):
        current = current / part if part else current
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            try:
                current.mkdir(mode=PRIVATE_DIR)
                os.chmod(current, PRIVATE_DIR)
            except FileExistsError:
                pass
            mode = os.lstat(current).st_mode
        if stat.S_ISLNK(mode):
            raise UnusableFile(f"{current}: is a symlink; memd never follows a link in its own directory "
                               f"({own_root}): replace it with a real directory")  # fmt: skip
        if not stat.S_ISDIR(mode):
            raise UnusableFile(f"{current}: {kind_of(mode)}, where memd keeps a directory of its own")
    return path


def own_links(own_root: Path | str, below: tuple[str, ...] = ("history",)) -> list[Path]:
    """Symlinks at `own_root` itself, among its entries, and among the entries of its sub-directories
    `below`: what `check_own_tree` refuses (cheap: one scandir of each, no recursion)."""
    own_root = Path(own_root)
    if os.path.islink(own_root):
        return [own_root]
    found: list[Path] = []
    for d in (own_root, *(own_root / b for b in below)):
        try:
            with os.scandir(d) as it:
                found += [Path(e.path) for e in it if e.is_symlink()]
        except (FileNotFoundError, NotADirectoryError):
            continue
    return sorted(found)


def check_own_tree(own_root: Path | str) -> None:
    """Refuse (one line, `UnusableFile`) when memd's own directory is a symlink or holds one
    (`memd/logs`, `memd/history`, a scope's history, ...): memd never follows a link there."""
    links = own_links(own_root)
    if links:
        more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
        raise UnusableFile(f"{links[0]}: is a symlink{more}; memd never follows a link in its own directory "
                           f"({own_root}): replace it with a real directory")  # fmt: skip


def ensure_private_dir(path: Path) -> Path:
    """Create `path` and every missing parent with mode 0700 (whatever the umask).

    Existing directories are left as they are: memd does not change modes the
    user chose. `Path.mkdir(parents=True)` would give new parents the umask's mode.
    """
    path = Path(path)
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            continue
        os.chmod(d, PRIVATE_DIR)
    return path


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | str, mode: int = PRIVATE_FILE) -> None:
    """Replace `path` with `data` atomically and durably.

    The target must not be a symlink: memd never writes through a link planted
    in a memory directory (it would let a link redirect the write out of the tree).
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    path = Path(path)
    if path.is_symlink():
        raise OSError(f"{path}: refusing to replace a symlink")
    parent = path.parent
    ensure_private_dir(parent)
    tmp = durable_temp(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(parent)


def durable_temp(path: Path, data: bytes, mode: int) -> Path:
    """`data` in a new temporary file beside `path` (`.<name>.<random>.tmp`, the naming the view
    sweeps know), written, fsynced and given `mode`; removed again if any of that fails. The caller
    renames (or exchanges) it into place."""
    import tempfile  # noqa: PLC0415 - start-up

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return Path(tmp)


STALE_TEMP_SECONDS = 60.0  # an atomic write takes milliseconds: a temporary older than a minute was left by a kill


def temp_names(listed: list[str], wanted: Callable[[str], bool]) -> list[str]:
    """The names of `listed` that end in `.tmp` and `wanted` accepts: a writer's temporaries. Names only,
    and one C search first: a memory directory holds thousands of names, and most hold no temporary."""
    return [n for n in listed if n.endswith(".tmp") and wanted(n)] if ".tmp\0" in "\0".join(listed) + "\0" else []


def sweep_stale_temps(directory: Path | str, now: float, wanted: Callable[[str], bool],
                      listed: list[str] | None = None) -> int:  # fmt: skip
    """Remove the regular files directly in `directory` whose name ends in `.tmp` and `wanted` accepts
    (a writer's own `.<target>.<random>.tmp` temporaries) and that are older than STALE_TEMP_SECONDS at `now`: what a
    writer killed mid-write left, once no live writer can still own it. Never anything else; a
    directory that cannot be read sweeps nothing. Returns how many were removed. `listed`: the
    directory's names as the caller just listed them (else listed here)."""
    removed = 0
    try:
        names = temp_names(os.listdir(directory) if listed is None else listed, wanted)
    except OSError:
        return 0
    for name in names:
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > STALE_TEMP_SECONDS:
                os.unlink(path)
                removed += 1
        except OSError:
            continue
    return removed
