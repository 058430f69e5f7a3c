"""What a history entry's snapshot kept, whichever its layout.

Snapshots since issue 27 are one `files.pack` (`memd.history.pack`); runs made before are a
`files/` directory (plus `modes.json`), and existing users' history holds those: both are read,
forever. Every reader of a snapshot (undo, `memd history --file`'s views, `memd why`, the dream's
check of its own copy) goes through here, so no other module assumes a layout.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from memd.history.pack import PACK_FILE, Pack, PackError
from memd.history.store import FILES_DIR

Listing = dict[str, tuple[int, int, int]]


def pack_of(entry: Path) -> Pack | None:
    """The entry's pack, None for an entry of the older layout; `PackError`/`OSError` when damaged."""
    path = entry / PACK_FILE
    if not os.path.lexists(path):
        return None
    return Pack.open(path)


def has_snapshot(entry: Path) -> bool:
    """Whether the entry holds a snapshot of either layout (a pack, or a real `files/` directory)."""
    files = entry / FILES_DIR
    return os.path.lexists(entry / PACK_FILE) or (files.is_dir() and not files.is_symlink())


def read_file(entry: Path, rel: str) -> tuple[bytes, int] | None:
    """A regular file's bytes and mtime (ns) as the snapshot kept it; None when it kept none
    (or it cannot be read: a damaged pack, a link in `files/`)."""
    try:
        pack = pack_of(entry)
        if pack is not None:
            e = pack.member(rel)
            return None if e is None or e["kind"] != "file" else (pack.read(e), int(e["mtime_ns"]))
        path = entry / FILES_DIR / rel
        if path.is_symlink() or not path.is_file():
            return None
        return path.read_bytes(), path.stat().st_mtime_ns
    except (OSError, PackError):
        return None


def top_files(entry: Path, wanted: Any) -> dict[str, bytes]:
    """Every regular file directly in the snapshot whose name `wanted(name)` accepts, by name."""
    pack = pack_of(entry)
    if pack is not None:
        return {e["path"]: data for e, data in pack.all_files() if "/" not in e["path"] and wanted(e["path"])}
    files, out = entry / FILES_DIR, {}
    try:
        names = os.listdir(files)
    except OSError:
        return {}
    for n in names:
        p = files / n
        if wanted(n) and p.is_file() and not p.is_symlink():
            out[n] = p.read_bytes()
    return out


def listing(entry: Path) -> Listing | None:
    """Every path the snapshot holds: its type, and a regular file's size and mtime (ns), as
    `walk_listing` sees a live directory; None when there is no readable snapshot."""
    try:
        pack = pack_of(entry)
    except (OSError, PackError):
        return None
    if pack is None:
        return walk_listing(entry / FILES_DIR) if has_snapshot(entry) else None
    kinds = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "link": stat.S_IFLNK}
    return {e["path"]: (kinds[e["kind"]], e.get("size", 0) if e["kind"] == "file" else 0,
                        e["mtime_ns"] if e["kind"] == "file" else 0) for e in pack.entries}  # fmt: skip


def walk_listing(directory: Path) -> Listing:
    """Every entry under `directory` by relative path: its type, and a regular file's size and mtime (what a
    byte-exact copy keeps; modes and inodes it does not). Both a kept copy and a live directory are read so."""
    out: Listing = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            regular = stat.S_ISREG(st.st_mode)
            out[Path(os.path.relpath(path, directory)).as_posix()] = (
                stat.S_IFMT(st.st_mode), st.st_size if regular else 0, st.st_mtime_ns if regular else 0)  # fmt: skip
    return out


def found_sums(entry: Path) -> dict[str, str] | str:
    """The sha256 of every regular file the snapshot holds, hashed from its bytes now (links are
    kept as links, never followed); a one-line reason when the snapshot cannot be read."""
    try:
        pack = pack_of(entry)
    except PackError as exc:
        return str(exc).removeprefix(f"{entry / PACK_FILE}: ")
    except OSError as exc:
        return f"{PACK_FILE}: unreadable ({exc.strerror or exc})"
    if pack is not None:
        found: dict[str, str] = {}
        fd = os.open(pack.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            for e in pack.files():
                data = os.pread(fd, e["size"], e["offset"])
                found[e["path"]] = hashlib.sha256(data).hexdigest() if len(data) == e["size"] else "cut short"
        finally:
            os.close(fd)
        return found
    return _dir_sums(entry / FILES_DIR)


def _dir_sums(files: Path) -> dict[str, str] | str:
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
    return found


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(f"{path}: not a regular file")
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
