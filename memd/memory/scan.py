"""Reading a memory directory: every memory in it, and a `Problem` for every file it cannot use.

Reading is defensive and *never destructive*: a file memd cannot parse is reported
as a `Problem` naming the file and the reason, and left exactly where it is.
Scanning never follows a symlink (a link planted in a memory directory must not
pull outside files into an agent's context), never reads a file over
`DEFAULT_MAX_FILE_BYTES` whole, and reads every file through a descriptor opened
with `O_NOFOLLOW`, so a file swapped for a link between listing and reading is
still not followed. Parsing one file is `memd.memory.file.parse_memory`.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import NamedTuple

from memd.fsutil import read_at_most, shown, utf8_name
from memd.logs.lazy import lazy_logger
from memd.memory.file import Memory, MemoryParseError, parse_memory
from memd.memory.names import DEFAULT_MAX_FILE_BYTES, candidate_names, fold_name, is_candidate_name

log = lazy_logger("memd.memories")  # the scan's events keep the logger name they always had


@dataclass(frozen=True)
class Problem:
    """A file a scan could not use, and why; the file is left in place."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class ScanResult:
    """What a scan of one memory directory found: memories, problems and notes."""

    memories: list[Memory] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)  # memories read with a word: no front matter


@dataclass(frozen=True)
class Bare:
    """A memory read from a file without front matter, and the note that says so."""

    memory: Memory
    note: Problem


_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$")


def bare_memory(path: Path, text: str, *, mtime: float, size: int, scope: str, project_key: str | None) -> Bare:
    """A topic file without front matter as a memory of its own (SPEC §14): Claude Code's docs
    write `debugging.md` so, and its auto-memory and `/memory` share the folder.

    Named from its file name (unique in the directory, and what the agent's index links to);
    described by its first heading, else its first line; typed `project` in a project, `user`
    in the drawer. memd never rewrites such a file to add front matter: only a write through
    the write path (an edit, an extraction's update) does, and that is a history run.
    """
    body = text.removeprefix("\ufeff").strip()
    memory = Memory(path=path, name=path.stem, description=_bare_description(body, path.stem), type=_bare_type(scope),
                    body=body, mtime=mtime, size=size, scope=scope, project_key=project_key)  # fmt: skip
    return Bare(memory, bare_note(memory))


def _bare_type(scope: str) -> str:
    return "project" if scope == "project" else "user"


def _bare_description(body: str, stem: str) -> str:
    """A bare memory's description: its first heading, else its first line, else its file name."""
    lines = [ln.strip() for ln in body.split("\n") if ln.strip()]
    heading = next((m.group(1) for ln in lines[:20] if (m := _HEADING.match(ln))), None)
    first = next((ln for ln in lines if not _HEADING.match(ln)), None)
    return " ".join((heading or first or stem).split())[:200]


def could_be_bare(memory: Memory) -> bool:
    """Whether an indexed row may be a file without front matter: only such a row has the name,
    type and description `bare_memory` gives (file name, the scope's default type, the body's
    first heading or line). Any other row was parsed from front matter, and reusing it needs
    no look at the file. The name and type are compared first: they rule out nearly every row."""
    return (memory.type == _bare_type(memory.scope) and memory.name == memory.path.stem
            and memory.description == _bare_description(memory.body, memory.name))  # fmt: skip


def bare_note(memory: Memory) -> Problem:
    return Problem(memory.path, f"no front matter: indexed as a {memory.type} memory named {memory.name!r} "
                                "(from its file name); add front matter to name and type it")  # fmt: skip


def _front_matter_at_start(data: bytes) -> bool:
    return data.removeprefix(b"\xef\xbb\xbf").startswith(b"---")


def _human_size(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MB"
    if n >= 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n} B"


# A file name whose bytes are not UTF-8 (the OS's surrogate escapes hold them in a `str`): no view, search row
# or JSON answer can carry it, so the file is a problem, left as it is, not a memory.
NOT_UTF8_NAME = "file name is not valid UTF-8: rename it to read it as a memory"


def _load_entry(
    entry: os.DirEntry[str],
    scope: str,
    project_key: str | None,
    max_bytes: int,
    known: Mapping[str, Memory] | None = None,
    keep: dict[str, tuple[int, int, int, int, bytes]] | None = None,
    base: Path | None = None,
) -> Memory | Problem | Bare | None:
    """One directory entry as a Memory, a Problem, or None when it is not a candidate.

    `known` holds memories parsed before (the search index's rows): one whose size
    and mtime still match is reused without reading the file again. `keep` receives
    the bytes read, by file name, with the (inode, size, mtime_ns, ctime_ns) stat taken before the read.
    `base` is the scanned directory as a Path (the entry's path is then built from it, not parsed).
    """
    path = base / entry.name if base is not None else Path(entry.path)
    if entry.is_symlink():
        return Problem(path, "symlink not followed")
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError as exc:
        return Problem(path, f"cannot stat: {exc.strerror or exc}")
    if stat.S_ISDIR(st.st_mode):
        return None
    if not stat.S_ISREG(st.st_mode):
        return Problem(path, "not a regular file")
    if not utf8_name(entry.name):
        return Problem(path, NOT_UTF8_NAME)
    cached = known.get(entry.path) if known else None
    if cached is not None and cached.size == st.st_size and cached.mtime == st.st_mtime:
        return _cached(path, cached)
    if st.st_size > max_bytes:
        return Problem(path, f"too large ({_human_size(st.st_size)} > {_human_size(max_bytes)} cap); not read")
    try:
        data = read_at_most(path, max_bytes)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return Problem(path, "symlink not followed")
        return Problem(path, f"cannot read: {exc.strerror or exc}")
    if len(data) > max_bytes:
        return Problem(path, f"too large (grew past the {_human_size(max_bytes)} cap while reading); not read")
    if keep is not None:
        keep[entry.name] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, data)
    try:
        return parse_memory(path, data, mtime=st.st_mtime, size=len(data), scope=scope, project_key=project_key)
    except MemoryParseError as exc:
        if _front_matter_at_start(data):
            return Problem(path, exc.reason)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return Problem(path, exc.reason)
        return bare_memory(path, text, mtime=st.st_mtime, size=len(data), scope=scope, project_key=project_key)


def _cached(path: Path, cached: Memory) -> Memory | Bare:
    """A memory reused from the search index's row; a file without front matter keeps its note
    (a peek at its first bytes, not a parse, and only for a row that `could_be_bare`)."""
    if not could_be_bare(cached):
        return cached
    try:
        head = read_at_most(path, 8)
    except OSError:
        return cached
    return cached if _front_matter_at_start(head) else Bare(cached, bare_note(cached))


def _flag_duplicates(memories: list[Memory]) -> list[Problem]:
    """Names are unique within a directory (§2.2). Both files stay (neither is
    discarded behind the user's back); the later one in file-name order is
    reported so the user or dream can merge them."""
    return _duplicates([(m.name, m.path, m.path.name) for m in memories])


def _duplicates(named: list[tuple[str, Path | str, str]]) -> list[Problem]:
    """`_flag_duplicates` over (name, path, file name) in file-name order."""
    if all(n.isascii() for n, _p, _f in named):  # the common case, tens of thousands in a listing: no loop a name
        keys = [" ".join(n.casefold().split()) for n, _p, _f in named]
        if len(set(keys)) == len(keys):
            return []
    first: dict[str, str] = {}
    problems: list[Problem] = []
    for name, path, file_name in named:
        key = " ".join(name.casefold().split()) if name.isascii() else fold_name(name)  # NFKC keeps ASCII as is
        if key in first:
            other = first[key]
            other = other if other.isprintable() else repr(other)  # a reason is one line, whatever the file name holds
            problems.append(Problem(Path(path), f"duplicate name {name!r} (also in {other})"))
        else:
            first[key] = file_name
    return problems


def scan_dir(
    directory: Path | str,
    scope: str = "global",
    project_key: str | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    known: Mapping[str, Memory] | None = None,
    keep: dict[str, tuple[int, int, int, int, bytes]] | None = None,
    stats: dict[str, os.stat_result] | None = None,
) -> ScanResult:
    """Every memory of one directory, plus a Problem for every file it could not use.

    `known` (path → Memory parsed before) spares re-reading unchanged files; `keep`
    (file name → (inode, size, mtime_ns, ctime_ns, bytes)) receives every file read, for a
    caller that packs them next (the dream's snapshot, `memd.history.pack`); `stats` (file name
    → lstat) receives every entry's stat, candidate or not, each taken before the file is read
    (a `DirEntry` keeps it: a file's read uses the same one), as the dream's directory signature
    (`memd.history.treecopy.signature_of`); an entry gone before its stat is left out.

    A missing directory is an empty one (the global drawer may not exist yet).
    Nothing is ever modified or deleted here.
    """
    directory = Path(directory)
    result = ScanResult()
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return result
    except OSError as exc:
        result.problems.append(Problem(directory, f"cannot list directory: {exc.strerror or exc}"))
        return result
    for entry in entries:
        if stats is not None:
            try:
                stats[entry.name] = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                pass
        if not is_candidate_name(entry.name):
            continue
        loaded = _load_entry(entry, scope, project_key, max_bytes, known, keep, directory)
        if isinstance(loaded, Memory):
            result.memories.append(loaded)
        elif isinstance(loaded, Bare):
            result.memories.append(loaded.memory)
            result.notes.append(loaded.note)
        elif isinstance(loaded, Problem):
            result.problems.append(loaded)
    result.problems.extend(_flag_duplicates(result.memories))
    for problem in result.problems:
        log.warning("memory.rejected", path=shown(problem.path), reason=problem.reason)
    log.debug("memories.scanned", dir=str(directory), count=len(result.memories), problems=len(result.problems))
    return result


# --------------------------------------------------------------------------- listing


IndexedRow = tuple[str, str, str, str, float, int]  # file, name, description, type, mtime, size: a `Listed`'s fields, as search.sqlite holds them


class Listed(NamedTuple):
    """One memory as a listing shows it (no body, no metadata); `file` is home-relative.
    A tuple: a listing makes tens of thousands."""

    file: str
    name: str
    description: str
    type: str
    mtime: float
    size: int


_MODE = attrgetter("st_mode")
_STAT_SIZE, _STAT_MTIME = attrgetter("st_size"), attrgetter("st_mtime")
_ROW_SIZE, _ROW_MTIME = itemgetter(5), itemgetter(4)
_ROW_NAME = itemgetter(1)
_ROW_FILE = itemgetter(0)
# ASCII whitespace that `" ".join(name.split())` would change, in names joined by NUL: a tab or
# another separator, two spaces, a space at a name's start or end (`_uneven_space`).
_UNEVEN_SPACE = re.compile(r"[\t\n\r\x0b\x0c\x1c-\x1f]|  |^ | $|\0 | \0")
_UNEVEN_PARTS = ("\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "  ", "\0 ", " \0")


def _uneven_space(joined: str) -> bool:
    """Whether `_UNEVEN_SPACE` finds anything in `joined`, by a dozen substring searches (in C; the
    regex tries its alternatives at every character: 8 ms over 50,000 names)."""
    return joined.startswith(" ") or joined.endswith(" ") or any(map(joined.__contains__, _UNEVEN_PARTS))


def list_dir(
    directory: Path | str,
    scope: str,
    project_key: str | None,
    indexed: Sequence[IndexedRow],
    root: Path,
    *,
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> tuple[list[IndexedRow], list[Problem]]:
    """`scan_dir`'s memories and problems as a listing needs them, without a `Memory` or a file
    read for a file whose search row (`indexed`, rows with home-relative files) still matches its
    size and mtime: the same entries, order, problems and duplicate-name check as `scan_dir`, whose
    `_load_entry` reads every other file. Bodies and notes are not part of a listing. Each entry
    is a `Listed` or its row as it is (the same fields, in the same order).

    When `indexed` is in file order and holds exactly the directory's candidates, each a regular
    file of its row's size and mtime (the common case), the rows are the listing: the names, the
    stats and the comparison taken in C (`_rows_if_current`), not a Python step a file."""
    directory = Path(directory)
    prefix = str(root).rstrip("/") + "/"
    slots: list[Listed | None] = []  # None: a file no row stands for, parsed below in its place
    problems: list[Problem] = []
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)  # follows a linked directory, as scandir does
    except FileNotFoundError:
        return [], problems
    except OSError as exc:
        return [], [Problem(directory, f"cannot list directory: {exc.strerror or exc}")]
    try:
        names = sorted(candidate_names(os.listdir(fd)))
        base = os.path.join(str(directory), "")  # what a DirEntry's path starts with
        rel = base[len(prefix):] if base.startswith(prefix) else None
        rows = _rows_if_current(fd, names, rel, indexed)
        if rows is not None:
            return rows, _duplicate_rows(rows, prefix)
        by_file = dict(zip(map(_ROW_FILE, indexed), indexed, strict=True))
        parse: list[str] = []  # the names no row stands for, in name order
        for name in names:
            if rel is not None and (row := by_file.get(rel + name)) is not None:
                try:  # relative to the directory's descriptor: no path built, a symlink's own stat
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    st = None
                if st is not None and stat.S_ISREG(st.st_mode) and row[5] == st.st_size and row[4] == st.st_mtime:
                    slots.append(Listed._make(row))
                    continue
            parse.append(name)
            slots.append(None)
    except OSError as exc:
        return [], [Problem(directory, f"cannot list directory: {exc.strerror or exc}")]
    finally:
        os.close(fd)
    listed: list[IndexedRow]
    if parse:
        listed = list(_parse_listed(directory, scope, project_key, max_bytes, root, parse, slots, problems))
    else:
        listed = slots  # type: ignore[assignment]  # every slot a row: no None
    problems.extend(_duplicate_rows(listed, prefix))
    return listed, problems  # not logged: the listing shows them (and `memd list` sets no logging up)


def _rows_if_current(fd: int, names: list[str], rel: str | None, rows: Sequence[IndexedRow]) -> list[IndexedRow] | None:
    """`rows` as the listing of `names` (sorted, in the directory open as `fd`) when they are
    exactly its files, in order, each a regular file whose size and mtime its row holds; else None
    (and the caller goes file by file). A stat that fails (a file gone since the listing): None.
    Compared as whole columns, no object a file: the files as one NUL-joined text (no path holds a
    NUL), the sizes and the mtimes each as a list of the values the rows and stats already hold."""
    if rel is None or len(rows) != len(names):
        return None
    if not names:
        return []
    if "\0".join(map(_ROW_FILE, rows)) != rel + ("\0" + rel).join(names):
        return None
    try:
        stats = list(map(partial(os.lstat, dir_fd=fd), names))
    except OSError:
        return None
    if (not all(map(stat.S_ISREG, map(_MODE, stats))) or list(map(_STAT_SIZE, stats)) != list(map(_ROW_SIZE, rows))
            or list(map(_STAT_MTIME, stats)) != list(map(_ROW_MTIME, rows))):  # fmt: skip
        return None
    return list(rows)


def _duplicate_rows(listed: Sequence[IndexedRow], prefix: str) -> list[Problem]:
    """`_duplicates` of listed rows (file, name, …): names that are ASCII, distinct once case-folded
    and with no uneven space (the common case) are told apart on the names joined by NUL, in C."""
    names = list(map(_ROW_NAME, listed))
    joined = "\0".join(names)
    if joined.isascii() and joined.count("\0") == len(names) - 1 and not _uneven_space(joined):
        keys = joined.casefold().split("\0") if names else []
        if len(set(keys)) == len(keys):
            return []
    return _duplicates([(m[1], prefix + m[0], m[0].rpartition("/")[2]) for m in listed])


def _parse_listed(directory: Path, scope: str, project_key: str | None, max_bytes: int, root: Path,
                  names: list[str], out: list[Listed | None], problems: list[Problem]) -> list[Listed]:  # fmt: skip
    """The files of a listing no search row stands for (new, changed, unindexed), parsed as
    `scan_dir` parses them (`_load_entry` over their directory entries), in the places `out`
    keeps for them (None); a file gone meanwhile is left out, as a scan would not have seen it."""
    wanted = set(names)
    try:
        with os.scandir(directory) as it:
            entries = {e.name: e for e in it if e.name in wanted}
    except OSError as exc:
        problems.append(Problem(directory, f"cannot list directory: {exc.strerror or exc}"))
        entries = {}
    parsed = iter(names)
    done: list[Listed] = []
    for item in out:
        if item is not None:
            done.append(item)
            continue
        entry = entries.get(next(parsed))
        if entry is None:
            continue
        loaded = _load_entry(entry, scope, project_key, max_bytes)
        mem = loaded.memory if isinstance(loaded, Bare) else loaded
        if isinstance(mem, Memory):
            done.append(Listed(_relative(mem.path, root), mem.name, mem.description, mem.type, mem.mtime, mem.size))
        elif isinstance(mem, Problem):
            problems.append(mem)
    return done


def _relative(path: Path, root: Path) -> str:
    return str(path.relative_to(root))
