"""Atomic, private file writes.

Every file memd writes that an agent or a user reads is replaced atomically
(SPEC §1.3): write a temporary file in the same directory, fsync it, rename it
over the target, fsync the directory. A reader therefore sees the old bytes or
the new bytes, never half a file, and a crash at any point leaves the old file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(parent)
