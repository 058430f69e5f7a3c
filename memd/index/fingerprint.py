"""The nothing-changed check of a directory's refresh: file stats and search.sqlite, no file read.

A refresh (`memd.index.refresh.refresh_dir`) reads every memory file that search.sqlite does not
already hold, renders MEMORY.md (and, for the drawer, its injection render) and compares them with
the files on disk. When all of that found nothing to change, the refresh leaves a *record* in
search.sqlite's `meta` table: a digest of everything the outcome depended on besides the files'
bytes — each candidate entry's name, mode, inode, size and mtime (nanoseconds), MEMORY.md's and
the drawer render's, the settings that shape the views and, for the drawer, the day its ages are
counted from — with what it found (problems, notes, the over-budget warning). The next refresh
first computes that digest again from one `listdir` and one stat per entry; when it equals the
record's, and the directory's count of search rows is the recorded one, the outcome is the recorded
one and nothing is read or rendered. An update or delete of any of the directory's search rows drops
its record (search.sqlite's triggers, `memd.index.schema.RECORD_TRIGGERS`, in the writing transaction,
whoever writes) and an insert changes the count: a record still there vouches for the rows, unread.

Why this is exact: a memory file's bytes cannot change without its size, mtime or inode changing
(the same rule `scan_dir` uses to reuse an indexed row), MEMORY.md's likewise, and the renders are
pure functions of the memories, the files as found, the settings and the day. A record is left
only by a refresh that wrote nothing and whose stats were the same before and after it, so a write
racing the refresh leaves no record; a record that no longer matches is ignored and the refresh
runs whole. The records live in the database they describe: set aside or rebuilt, it has none.
Each file's own stat is taken: an edit in place changes only the file's inode, never its directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from collections.abc import Iterable
from functools import partial
from itertools import starmap
from operator import attrgetter, itemgetter
from pathlib import Path
from stat import S_ISDIR
from typing import Any

from memd.collector import paused
from memd.memory.names import INDEX_NAME, candidate_names

# bump when a refresh's outcome starts to depend on something the digest omits (3: the rows are
# vouched for by the triggers and their count, not digested; the entries packed as bytes)
RECORD_VERSION = 3
_SIG_FIELDS = attrgetter("st_mode", "st_ino", "st_size", "st_mtime_ns")
# The four fields as native 64-bit integers: the bytes `array("q", …)` wrote for records version 3, packed
# by struct with no per-item format parsing (array's `q` items go through PyArg_Parse: 187 → 108 M
# instructions for 50,000 files).
_PACK_SIG = struct.Struct("4q").pack
_MODE = itemgetter(0)  # of a `_SIG_FIELDS` tuple


def record_key(scope: str, key: str | None) -> str:
    """The `meta` key of one directory's record."""
    return f"views:{scope}:{key or ''}"


def _sig(st: os.stat_result) -> str:
    return f"{st.st_mode:o}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _path_sig(path: Path) -> str | None:
    """A file's stat signature ("-" when absent); None when it cannot be stat'ed (no record then)."""
    try:
        return _sig(os.lstat(path))
    except (FileNotFoundError, NotADirectoryError):
        return "-"
    except OSError:
        return None


def state_digest(directory: Path, params: dict[str, Any], views: Iterable[Path],
                 listing: list[str] | None = None) -> str | None:  # fmt: skip
    """The digest of what a refresh of `directory` depends on besides file contents (see the
    module docstring); None when an entry cannot be stat'ed (then there is no fast path).
    `listing`: the directory's names as the caller listed them just now (else listed here)."""
    parts = [json.dumps(params, sort_keys=True), f"v{RECORD_VERSION}"]
    for view in (directory / INDEX_NAME, *views):
        sig = _path_sig(view)
        if sig is None:
            return None
        parts.append(sig)
    files = _entries(directory, listing)
    if files is None:
        return None
    digest = hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape"))
    digest.update(files)
    return digest.hexdigest()


def _entries(directory: Path, listing: list[str] | None = None) -> bytes | None:
    """The candidate entries (directories aside) as bytes: their count, their names in name order
    (unique in a directory) joined by NUL, then (mode, inode, size, mtime ns) of each as 64-bit
    integers; b"absent" for a missing directory; None when listing or a stat failed (an entry gone
    meanwhile). One `listdir` (or the caller's listing) and one `lstat` a candidate relative to the
    directory's descriptor (no path built a file); the fields taken and packed in C (`attrgetter`,
    `struct`), not a Python step a file."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return None if os.path.lexists(directory) else b"absent"
    except OSError:
        return None
    try:
        names = sorted(candidate_names(os.listdir(fd) if listing is None else listing))
        # A `stat_result` a file and no cycle: paused, the collector neither walks them (~4 % of a check at
        # 50,000 memories) nor finds them all alive after, as they are gone when `_packed` returns.
        with paused():
            return _packed(fd, names)
    except OSError:
        return None
    finally:
        os.close(fd)


def _packed(fd: int, names: list[str]) -> bytes:
    """`_entries`' bytes of `names` (sorted candidates in the directory open as `fd`); OSError when a
    stat fails. Each `stat_result` gives its four fields and is freed at once (one small tuple a file
    kept, not a 20-field result)."""
    sigs = list(map(_SIG_FIELDS, map(partial(os.lstat, dir_fd=fd), names)))
    if any(map(S_ISDIR, map(_MODE, sigs))):  # a directory named like a memory: rare, not a memory
        kept = [(n, sig) for n, sig in zip(names, sigs, strict=True) if not S_ISDIR(sig[0])]
        names, sigs = [n for n, _sig in kept], [sig for _n, sig in kept]
    head = f"{len(names)}\0".encode() + "\0".join(names).encode("utf-8", "surrogateescape") + b"\0"
    try:
        return head + b"".join(starmap(_PACK_SIG, sigs))
    except struct.error:  # an inode number past 2**63 (some file systems): the same fields as text
        return head + repr(sigs).encode()


def make_record(state: str, rows: list[int], outcome: dict[str, Any]) -> str:
    """A record: the state digest, the directory's search rows (count, sum of ids), the outcome."""
    return json.dumps({"state": state, "rows": rows, "outcome": outcome}, sort_keys=True)


def read_record(text: str | None) -> dict[str, Any] | None:
    """A stored record, or None when absent or not one of ours."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    ok = isinstance(data, dict) and isinstance(data.get("outcome"), dict)
    rows = data.get("rows") if ok else None  # a bare count: a record made before the ids' sum, not trusted
    ok = ok and type(rows) is list and len(rows) == 2 and all(type(n) is int for n in rows)
    return data if ok and isinstance(data.get("state"), str) else None


__all__ = ["RECORD_VERSION", "make_record", "read_record", "record_key", "state_digest"]
