"""A memory directory packed into one file (`files.pack`): a dream's or an undo's snapshot.

Why one file: a snapshot of n memories as n files costs n creates, n chmods, n utimes and a flush
of every one of them (about a third of an offline dream over 5,000 memories). Packed, the same
bytes go out in one sequential write with one `fsync`; the crash guarantee is the entry's as
before: a history entry only counts once its `run.json` exists (`memd.history.store`), and the pack
is renamed into place, fsynced, before anyone writes that.

Layout (version 1), every integer big-endian:

    MAGIC
    the members' bytes, one after another
    the manifest: JSON (UTF-8) {"version": 1, "root": {...}, "entries": [...]}
    the trailer: manifest offset (8), manifest length (8), sha256 of the manifest (32), END (8)

`root` and each entry hold what a byte-exact copy keeps: `mode` (st_mode & 0o7777), `mtime_ns`,
`atime_ns`; an entry also has `path` (relative, "/"-separated) and `kind`: "file" (with
`offset`, `size`, `sha256` of its bytes), "dir", or "link" (with `target`, never followed).
Entries come in walk order (a directory before what it holds, names sorted). Nothing here
trusts the file: paths are checked (no absolute, empty, "." or ".." parts, a parent listed
before its children) and every member is checked against its sha256 when read.

Reading and writing only: the layout-independent view of a snapshot (this or the older
`files/` directory) is `memd.history.kept`'s.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memd.fsutil import fsync_dir
from memd.history.treecopy import SpecialFile

PACK_FILE = "files.pack"
MAGIC = b"memd snapshot pack\x00v1\n"
END = b"MDPKEND\n"
_TRAILER = struct.Struct(">QQ32s8s")
_WRITE_CHUNK = 1 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class PackError(ValueError):
    """A pack that cannot be read as written (cut short, damaged, or not a pack): one line."""


#: What a scan already read of a top-level file, by name: (inode, size, mtime_ns, ctime_ns, bytes).
#: Used instead of reading the file again only while its lstat still shows that inode, size, mtime and ctime.
Known = Mapping[str, tuple[int, int, int, int, bytes]]


class _Out:
    """Sequential buffered writes to one descriptor; `pos` is the offset of the next byte."""

    def __init__(self, fd: int) -> None:
        self.fd, self.pos, self._held = fd, 0, 0
        self._buf: list[bytes] = []

    def add(self, data: bytes) -> int:
        at = self.pos
        self._buf.append(data)
        self.pos += len(data)
        self._held += len(data)
        if self._held >= _WRITE_CHUNK:
            self.flush()
        return at

    def flush(self) -> None:
        view = memoryview(b"".join(self._buf))
        self._buf, self._held = [], 0
        while view:
            view = view[os.write(self.fd, view) :]


def write_pack(src: Path, entry: Path, known: Known | None = None,
               stats: Mapping[str, os.stat_result] | None = None) -> dict[str, str]:  # fmt: skip
    """Pack the directory `src` into `entry/files.pack`, durable (the file and `entry` fsynced);
    returns the sha256 of every regular file by relative path. Raises `SpecialFile` on a FIFO,
    socket or device (the directory is left alone). A file removed while we walk is left out, as
    the per-file copy did: the dream's signature check before its swap sees that change.

    `stats` (name → lstat of every top-level entry, just taken: the dream's check under the scope's
    lock that the directory is as planned) stands for the top level's listing and stats; the
    same check after staging sees any change made since, as it sees one made during the walk."""

    tmp = entry / f".{PACK_FILE}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    try:
        out = _Out(fd)
        out.add(MAGIC)
        entries: list[dict[str, Any]] = []
        sums: dict[str, str] = {}
        _walk(src, "", out, entries, sums, known or {}, stats)
        st = os.stat(src, follow_symlinks=False)
        manifest = _manifest({"version": 1, "root": _times(st), "entries": entries})
        at = out.add(manifest)
        out.add(_TRAILER.pack(at, len(manifest), hashlib.sha256(manifest).digest(), END))
        out.flush()
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.rename(tmp, entry / PACK_FILE)
    fsync_dir(entry)
    return sums


def _manifest(data: dict[str, Any]) -> bytes:
    """The manifest as compact JSON: orjson's (a few ms, not json's ten at 5,000 entries; the same
    bytes for ASCII names, UTF-8 rather than `\\u` escapes for others), json's for a name orjson
    refuses (one not valid UTF-8, kept by the OS's surrogate escapes). Readers take either."""
    import orjson  # noqa: PLC0415 - start-up: orjson only where JSON is written

    try:
        return orjson.dumps(data)
    except orjson.JSONEncodeError:
        return json.dumps(data, separators=(",", ":")).encode()


def _times(st: os.stat_result) -> dict[str, int]:
    return {"mode": st.st_mode & 0o7777, "mtime_ns": st.st_mtime_ns, "atime_ns": st.st_atime_ns}


def _walk(src: Path, rel: str, out: _Out, entries: list[dict[str, Any]], sums: dict[str, str], known: Known,
          stats: Mapping[str, os.stat_result] | None = None) -> None:  # fmt: skip
    """Entries of `src` in name order (a directory's before what it holds); `stats`: see `write_pack`."""
    listed: Iterator[tuple[str, str, os.stat_result | os.DirEntry[str]]]
    if stats is None:
        with os.scandir(src) as it:
            found = sorted(it, key=lambda e: e.name)
        listed = ((e.name, e.path, e) for e in found)
    else:
        base = os.path.join(src, "")
        listed = ((name, base + name, stats[name]) for name in sorted(stats))
    for name, full, got in listed:
        path = rel + name
        try:
            st = got if type(got) is os.stat_result else got.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                entries.append({"path": path, "kind": "link", "target": os.readlink(full)})
            elif stat.S_ISDIR(st.st_mode):
                entries.append({"path": path, "kind": "dir", **_times(st)})
                _walk(Path(full), path + "/", out, entries, sums, known)
            elif stat.S_ISREG(st.st_mode):
                data, st = _file_bytes(full, st, None if rel else known.get(name))
                digest = hashlib.sha256(data).hexdigest()
                sums[path] = digest
                entries.append({"path": path, "kind": "file", "mode": st.st_mode & 0o7777, "mtime_ns": st.st_mtime_ns,
                                "atime_ns": st.st_atime_ns, "offset": out.add(data), "size": len(data),
                                "sha256": digest})  # fmt: skip  # `_times` inlined: thousands a pack
            else:
                raise SpecialFile(f"{full}: not a regular file, directory or symlink; the directory is left alone")
        except FileNotFoundError:
            continue


def _file_bytes(path: str, st: os.stat_result, seen: tuple[int, int, int, int, bytes] | None) -> tuple[bytes, os.stat_result]:
    """A regular file's bytes: those the scan read when the file is still that inode, size, mtime
    and ctime; else read now, without following a link or blocking on a FIFO swapped in."""

    if seen is not None and seen[:4] == (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) \
            and len(seen[4]) == st.st_size:  # ctime too: an edit that put its mtime back (`touch -r`, `cp -p`)
        return seen[4], st
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SpecialFile(f"{path}: not a regular file, directory or symlink; the directory is left alone")
        chunks = []
        while chunk := os.read(fd, max(st.st_size + 1, 1 << 16)):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks), st


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Pack:
    """A pack's manifest, checked; members are read on demand (`read`)."""

    path: Path
    root: dict[str, int]
    entries: list[dict[str, Any]]

    @classmethod
    def open(cls, path: Path) -> Pack:
        """The pack at `path`; `PackError` when it is not a whole, undamaged pack (OSError when unreadable)."""
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
        try:
            size = os.fstat(fd).st_size
            if not stat.S_ISREG(os.fstat(fd).st_mode) or size < len(MAGIC) + _TRAILER.size:
                raise PackError(f"{path}: not a snapshot pack (too short or not a file)")
            at, length, digest, end = _TRAILER.unpack(os.pread(fd, _TRAILER.size, size - _TRAILER.size))
            if end != END or os.pread(fd, len(MAGIC), 0) != MAGIC or at + length + _TRAILER.size != size:
                raise PackError(f"{path}: not a whole snapshot pack (cut short or overwritten)")
            manifest = os.pread(fd, length, at)
        finally:
            os.close(fd)
        if hashlib.sha256(manifest).digest() != digest:
            raise PackError(f"{path}: its manifest does not match its checksum")
        try:
            data = json.loads(manifest)
            root, entries = data["root"], data["entries"]
            _check(entries, at)
            int(root["mode"]), int(root["mtime_ns"]), int(root["atime_ns"])
        except (ValueError, KeyError, TypeError) as exc:
            raise PackError(f"{path}: its manifest is unreadable ({exc})") from None
        return cls(path, root, entries)

    def files(self) -> Iterator[dict[str, Any]]:
        return (e for e in self.entries if e["kind"] == "file")

    def member(self, rel: str) -> dict[str, Any] | None:
        return next((e for e in self.entries if e["path"] == rel), None)

    def read(self, e: dict[str, Any], fd: int | None = None) -> bytes:
        """A file member's bytes, checked against its sha256 (`PackError` when they differ)."""
        own = fd is None
        fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK) if fd is None else fd
        try:
            data = os.pread(fd, e["size"], e["offset"])
        finally:
            if own:
                os.close(fd)
        if len(data) != e["size"] or hashlib.sha256(data).hexdigest() != e["sha256"]:
            raise PackError(f"{self.path}: {e['path']} does not match its checksum in the pack")
        return data

    def all_files(self) -> Iterator[tuple[dict[str, Any], bytes]]:
        """Every file member with its checked bytes, the pack opened once."""
        fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
        try:
            for e in self.files():
                yield e, self.read(e, fd)
        finally:
            os.close(fd)


def _check(entries: Any, data_end: int) -> None:
    """Every entry well formed and inside the tree: a path of plain parts whose parent came first."""
    if not isinstance(entries, list):
        raise ValueError("entries is not a list")
    dirs, seen = {""}, set()
    for e in entries:
        path, kind = e["path"], e["kind"]
        parts = path.split("/") if isinstance(path, str) else [""]
        if any(p in ("", ".", "..") or "\x00" in p for p in parts) or path in seen:
            raise ValueError(f"bad path {path!r}")
        if "/".join(parts[:-1]) not in dirs:
            raise ValueError(f"{path!r} comes before its directory")
        seen.add(path)
        if kind == "dir":
            dirs.add(path)
        elif kind == "file":
            if not (int(e["offset"]) >= 0 and int(e["size"]) >= 0 and e["offset"] + e["size"] <= data_end):
                raise ValueError(f"{path!r} lies outside the pack")
            str(e["sha256"])
        elif kind == "link":
            str(e["target"])
            continue
        else:
            raise ValueError(f"{path!r}: unknown kind {kind!r}")
        int(e["mode"]), int(e["mtime_ns"]), int(e["atime_ns"])


def extract(pack: Pack, dst: Path) -> list[Path]:
    """Write `pack` as the new directory `dst`: bytes, modes and times as packed, links as links;
    no fsync (the caller's `durable`/`seal` batches it). Returns the files written."""

    os.mkdir(dst, 0o700)
    written: list[Path] = []
    dirs: list[tuple[Path, dict[str, Any]]] = []
    for e, data in _in_order(pack):
        target = dst.joinpath(*e["path"].split("/"))
        if e["kind"] == "dir":
            os.mkdir(target, 0o700)
            dirs.append((target, e))
        elif e["kind"] == "link":
            os.symlink(e["target"], target)
        else:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, e["mode"] & 0o777)
            finally:
                os.close(fd)
            os.utime(target, ns=(e["atime_ns"], e["mtime_ns"]), follow_symlinks=False)
            written.append(target)
    for d, e in reversed(dirs):  # deepest first: a child's entries set its parent's mtime
        os.chmod(d, e["mode"] & 0o777)
        os.utime(d, ns=(e["atime_ns"], e["mtime_ns"]))
    os.chmod(dst, pack.root["mode"] & 0o777)
    os.utime(dst, ns=(pack.root["atime_ns"], pack.root["mtime_ns"]))
    return written


def _in_order(pack: Pack) -> Iterator[tuple[dict[str, Any], bytes]]:
    fd = os.open(pack.path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
    try:
        for e in pack.entries:
            yield e, pack.read(e, fd) if e["kind"] == "file" else b""
    finally:
        os.close(fd)
