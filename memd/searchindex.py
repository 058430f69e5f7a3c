"""The writer of the search database (`<home>/memd/search.sqlite`): schema, sync, rebuild.

Only memd writes here, through one `SearchIndex` per process; the reader side
(`open_readonly`, `query_index`, query parsing, snippets) and the contract for
read-only readers are in memd/search.py, which does not import this module. The
database is derived data: on a schema or segmenter mismatch it is dropped and
rebuilt; when SQLite cannot use it at all — not a database, truncated, a damaged
page anywhere (found at open or by any later statement), a FIFO or directory in
its place — it is moved aside (`search.sqlite.corrupt-<time>`, the last few
kept for a look) and rebuilt from the memory files, and the statement is retried
once. A database created afresh (first use, or after a kill left a half-made
one) is filled from every memory directory on its first sync, not only from the
directory that sync names, so search is whole without waiting for an index run.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from memd.fsutil import PRIVATE_FILE, UnusableFile, check_regular_or_absent, ensure_private_dir
from memd.logs import lazy_logger
from memd.memories import Memory
from memd.search import BUSY_TIMEOUT_S, SEGMENTER, Hit, query_index, segment
from memd.tree import Home

log = lazy_logger("memd.search")  # the search DB's events keep the logger name they always had

SCHEMA_VERSION = 1
DirKey = tuple[str, str | None]

_SCHEMA = """
CREATE TABLE memories (
    id          INTEGER PRIMARY KEY,
    scope       TEXT NOT NULL CHECK (scope IN ('global', 'project')),
    project_key TEXT,
    file        TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL,
    description TEXT NOT NULL,
    type        TEXT NOT NULL,
    body        TEXT NOT NULL,
    mtime       REAL NOT NULL,
    size        INTEGER NOT NULL
);
CREATE INDEX memories_scope ON memories (scope, project_key);
CREATE VIRTUAL TABLE memories_fts USING fts5 (
    name, description, body, tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(frozen=True)
class SyncStats:
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


# --------------------------------------------------------------------------- damage

T = TypeVar("T")
KEEP_CORRUPT = 3  # damaged copies kept beside the database, newest first


def damaged(exc: BaseException) -> bool:
    """Whether an error means the database file itself is unusable (so: set it aside and rebuild),
    as opposed to a busy or locked database, a full disk or a read-only one (the same file works
    later), or a bug (a constraint, API misuse). A non-regular file in its place counts."""
    if isinstance(exc, UnusableFile):
        return True
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    if isinstance(exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError)):
        return False
    text = str(exc)
    return not any(w in text for w in ("locked", "busy", "full", "readonly", "read-only", "interrupted"))


def set_aside(path: Path | str, reason: str) -> Path | None:
    """Move a damaged search database (and its -wal and -shm, which belong to it) to
    `<name>.corrupt-<UTC time>`, keep the last `KEEP_CORRUPT` such copies, and say so in one log
    line. Returns where it went (None: nothing was there). A failure to move is an OSError."""
    path = Path(path)
    if not os.path.lexists(path):
        for suffix in ("-wal", "-shm"):  # left without their database: a new one must not adopt them
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while os.path.lexists(dest):
        n += 1
        dest = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    os.rename(path, dest)
    _private(dest)  # it holds memory text: as private as the database was meant to be
    for suffix in ("-wal", "-shm"):
        side = Path(f"{path}{suffix}")
        if os.path.lexists(side):
            try:
                os.rename(side, f"{dest}{suffix}")
                _private(Path(f"{dest}{suffix}"))
            except OSError:
                side.unlink(missing_ok=True)
    _prune_corrupt(path)
    log.warning("search_db.set_aside", path=str(path), moved_to=str(dest), reason=" ".join(reason.split())[:300])
    return dest


LAYOUT = "an older or newer layout"  # not damage: the writer rebuilds such a database in place


def problem(path: Path | str) -> str | None:
    """Why the search database at `path` cannot serve searches (None: it can, or it is absent);
    a reason starting with `LAYOUT` means an older or newer layout, not damage.

    Read-only and cheap enough for a command to ask first (`memd search`, `memd recall`) and for
    the index job's reconcile: the file type, the version and segmenter, the columns readers
    use, and `PRAGMA quick_check` (every page; a search database holds only memories, so it is
    small) — damage in a page no statement has touched yet is found too.
    """
    import stat

    from memd.fsutil import kind_of
    from memd.search import open_readonly

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(mode):
        return f"{kind_of(mode)}, not a regular file"
    try:
        conn = open_readonly(path)
    except sqlite3.Error as exc:
        return str(exc)
    try:
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            return f"{LAYOUT} (schema {version}, not {SCHEMA_VERSION})"
        conn.execute("SELECT id, scope, project_key, file, name, description, type, body, mtime, size FROM memories LIMIT 0")
        conn.execute("SELECT rowid, name, description, body FROM memories_fts LIMIT 0")
        row = conn.execute("SELECT value FROM meta WHERE key = 'segmenter'").fetchone()
        if row is None or row[0] != SEGMENTER:
            return f"{LAYOUT} (segmenter {row[0] if row else None!r}, not {SEGMENTER!r})"
        checked = str(conn.execute("PRAGMA quick_check").fetchone()[0])
        return None if checked == "ok" else " ".join(checked.split())[:300]
    except sqlite3.Error as exc:
        return str(exc) if damaged(exc) else None
    finally:
        conn.close()


def _private(path: Path) -> None:
    try:
        if path.is_symlink():
            return
        os.chmod(path, 0o700 if path.is_dir() else PRIVATE_FILE)
    except OSError:
        pass


def _prune_corrupt(path: Path) -> None:
    prefix = f"{path.name}.corrupt-"
    try:
        names = sorted((n for n in os.listdir(path.parent) if n.startswith(prefix) and not n.endswith(("-wal", "-shm"))),
                       reverse=True)  # fmt: skip
    except OSError:
        return
    for name in names[KEEP_CORRUPT:]:
        for suffix in ("", "-wal", "-shm"):
            victim = path.parent / f"{name}{suffix}"
            try:
                if victim.is_dir() and not victim.is_symlink():
                    import shutil

                    shutil.rmtree(victim)
                else:
                    victim.unlink(missing_ok=True)
            except OSError:
                continue


# --------------------------------------------------------------------------- writing


def _create_private(path: Path) -> None:
    """Create the DB file 0600 before SQLite does (it would use the umask);
    SQLite gives its -wal and -shm files the same mode as the database."""
    ensure_private_dir(path.parent)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE)
    except FileExistsError:
        return
    os.close(fd)


class SearchIndex:
    """The writer side of the search DB. One per process; not thread-safe.

    `root` is the home the `file` column is relative to; by default the parent
    of the `memd/` directory holding the database, where `Home` puts it.
    """

    def __init__(self, path: Path | str, *, root: Path | str | None = None) -> None:
        self.path = Path(path)
        self.root = Path(root) if root is not None else self.path.parent.parent
        self._root_prefix = str(self.root).rstrip("/") + "/"
        self._fresh = False  # created (or re-created) by this object: its first sync fills it from every directory
        self.repaired = 0  # how many times a damaged database was set aside and rebuilt
        try:
            self._conn = self._open()
        except (sqlite3.DatabaseError, UnusableFile) as exc:
            if not damaged(exc):
                raise  # locked, full, read-only: not ours to destroy
            # Not a database, a malformed one, a FIFO: it is a cache, start afresh.
            set_aside(self.path, str(exc))
            self.repaired += 1
            self._conn = self._open()

    def _open(self) -> sqlite3.Connection:
        for suffix in ("", "-wal", "-shm"):
            check_regular_or_absent(f"{self.path}{suffix}")  # SQLite would block on a FIFO forever
        _create_private(self.path)
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._conn = conn
            self._ensure_schema()
        except BaseException:
            conn.close()
            raise
        return conn

    def _recovering(self, what: str, fn: Callable[[], T]) -> T:
        """`fn()`; if the database turns out damaged (any statement may find a bad page), set it
        aside, rebuild it from the memory files, and run `fn` once more on the new one."""
        try:
            return fn()
        except (sqlite3.DatabaseError, UnusableFile) as exc:
            if not damaged(exc):
                raise
            with suppress(sqlite3.Error):
                self._conn.close()
            set_aside(self.path, f"{what}: {exc}")
            self.repaired += 1
            self._conn = self._open()
        return fn()

    def _unnamed(self, named: Mapping[DirKey, Sequence[Memory]]) -> dict[DirKey, list[Memory]]:
        """For a database this object created (it holds nothing yet): the memories of every memory
        directory `named` leaves out, so a partial sync leaves no directory missing from search."""
        from memd.discovery import list_memory_dirs
        from memd.memscan import scan_dir

        out = {(scope, key): scan_dir(d, scope, key).memories
               for scope, key, d in list_memory_dirs(Home(self.root)) if (scope, key) not in named}  # fmt: skip
        log.info("search_db.filled", path=str(self.path), directories=len(out))
        return out

    @classmethod
    def for_home(cls, home: Home) -> SearchIndex:
        return cls(home.search_db, root=home.root)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> SearchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema

    def _schema_current(self) -> bool:
        (version,) = self._conn.execute("PRAGMA user_version").fetchone()
        if version != SCHEMA_VERSION:
            return False
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'segmenter'").fetchone()
        return row is not None and row[0] == SEGMENTER

    def _ensure_schema(self) -> None:
        with self._transaction():
            if self._schema_current():
                return
            tables = [
                r[0]
                for r in self._conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                    "AND name NOT LIKE 'memories_fts_%'"
                )
            ]
            if tables:
                log.info("search_db.rebuilt", path=str(self.path), reason="schema or segmenter changed")
            self._fresh = True
            for name in tables:
                self._conn.execute(f'DROP TABLE IF EXISTS "{name}"')
            # Statement by statement: executescript() would COMMIT the open transaction.
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._conn.execute(statement)
            self._conn.execute("INSERT INTO meta (key, value) VALUES ('segmenter', ?)", (SEGMENTER,))
            self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: readers see all of it or none of it."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    # -- rows

    def relative(self, path: Path | str) -> str:
        """The `file` key of a memory path: relative to the home, '/'-separated."""
        text = str(path)
        prefix = self._root_prefix
        if text.startswith(prefix) and os.sep == "/":  # the common case, without pathlib's parsing
            return text[len(prefix) :]
        p = Path(path)
        if not p.is_absolute():
            return p.as_posix()
        try:
            return p.relative_to(self.root).as_posix()
        except ValueError:
            return p.as_posix()

    def _insert(self, mem: Memory, file: str) -> None:
        cur = self._conn.execute(
            "INSERT INTO memories (scope, project_key, file, name, description, type, body, mtime, size) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (mem.scope, mem.project_key, file, mem.name, mem.description, mem.type, mem.body, mem.mtime, mem.size),
        )
        self._insert_fts(cur.lastrowid, mem)

    def _insert_fts(self, rowid: int | None, mem: Memory) -> None:
        self._conn.execute(
            "INSERT INTO memories_fts (rowid, name, description, body) VALUES (?, ?, ?, ?)",
            (rowid, segment(mem.name), segment(mem.description), segment(mem.body)),
        )

    def _update(self, rowid: int, mem: Memory) -> None:
        self._conn.execute(
            "UPDATE memories SET scope = ?, project_key = ?, name = ?, description = ?, type = ?, "
            "body = ?, mtime = ?, size = ? WHERE id = ?",
            (mem.scope, mem.project_key, mem.name, mem.description, mem.type, mem.body, mem.mtime, mem.size, rowid),
        )
        self._conn.execute("DELETE FROM memories_fts WHERE rowid = ?", (rowid,))
        self._insert_fts(rowid, mem)

    def _delete(self, rowid: int) -> None:
        self._conn.execute("DELETE FROM memories WHERE id = ?", (rowid,))
        self._conn.execute("DELETE FROM memories_fts WHERE rowid = ?", (rowid,))

    # -- public writes

    def known(self, scope: str, project_key: str | None) -> dict[str, Memory]:
        """The memories of one directory as indexed (path → Memory, without extra metadata).

        The indexer passes these to `scan_dir`, which reuses a row whose size and
        mtime still match its file instead of reading and parsing the file again.
        """
        def read() -> dict[str, Memory]:
            rows = self._conn.execute(
                "SELECT file, name, description, type, body, mtime, size FROM memories "
                "WHERE scope = ? AND project_key IS ?",
                (scope, project_key),
            )
            out: dict[str, Memory] = {}
            for file, name, desc, mtype, body, mtime, size in rows:
                path = self.root / file
                out[str(path)] = Memory(path, name, desc, mtype, body, mtime, size, scope, project_key, {})
            return out

        return self._recovering("reading rows", read)

    def sync(self, memories_by_dir: Mapping[DirKey, Sequence[Memory]], *, prune: bool = False) -> SyncStats:
        """Make the rows of the given directories match their memories.

        Keys are `(scope, project_key)`: ("global", None) or ("project", key).
        A memory whose (file, size, mtime, scope, key) matches its row is left
        alone; rows of those directories whose file is gone are removed. With
        `prune`, rows of every directory *not* given are removed too (the full
        refresh, where a vanished project must leave the index). One
        transaction: a reader sees the old state or the new one.
        """

        def run() -> SyncStats:
            extra = self._unnamed(memories_by_dir) if self._fresh and not prune else {}
            stats = self._sync({**extra, **memories_by_dir}, prune=prune)
            self._fresh = False
            return stats

        return self._recovering("syncing", run)

    def _sync(self, memories_by_dir: Mapping[DirKey, Sequence[Memory]], *, prune: bool) -> SyncStats:
        added = updated = removed = unchanged = 0
        with self._transaction() as conn:
            rows = {
                r[1]: r
                for r in conn.execute("SELECT id, file, size, mtime, scope, project_key FROM memories")
            }
            seen: set[str] = set()
            for memories in memories_by_dir.values():
                for mem in memories:
                    file = self.relative(mem.path)
                    seen.add(file)
                    row = rows.get(file)
                    if row is None:
                        self._insert(mem, file)
                        added += 1
                    elif (row[2], row[3], row[4], row[5]) == (mem.size, mem.mtime, mem.scope, mem.project_key):
                        unchanged += 1
                    else:
                        self._update(row[0], mem)
                        updated += 1
            dirs = set(memories_by_dir)
            for file, row in rows.items():
                if file not in seen and (prune or (row[4], row[5]) in dirs):
                    self._delete(row[0])
                    removed += 1
        stats = SyncStats(added, updated, removed, unchanged)
        if stats.changed:
            log.info("search_db.synced", added=added, updated=updated, removed=removed, unchanged=unchanged)
        return stats

    def sync_one(self, memory: Memory) -> str:
        """Insert or rewrite one memory's row now; returns "added" or "updated"."""
        file = self.relative(memory.path)

        def run() -> str:
            if self._fresh:
                self.sync({})
            with self._transaction() as conn:
                row = conn.execute("SELECT id FROM memories WHERE file = ?", (file,)).fetchone()
                if row is None:
                    self._insert(memory, file)
                    return "added"
                self._update(row[0], memory)
                return "updated"

        return self._recovering("writing a row", run)

    def remove(self, file: Path | str) -> bool:
        """Drop one memory's row (by home-relative file or absolute path)."""
        key = self.relative(file)

        def run() -> bool:
            if self._fresh:
                self.sync({})
            with self._transaction() as conn:
                row = conn.execute("SELECT id FROM memories WHERE file = ?", (key,)).fetchone()
                if row is None:
                    return False
                self._delete(row[0])
            return True

        done = self._recovering("removing a row", run)
        if done:
            log.info("search_db.removed", file=key)
        return done

    def count(self) -> int:
        return self._recovering("counting", lambda: int(self._conn.execute("SELECT count(*) FROM memories").fetchone()[0]))

    def search(
        self,
        query: str,
        *,
        project_key: str | None,
        limit: int = 10,
        all_scopes: bool = False,
        marks: tuple[str, str] = ("**", "**"),
    ) -> list[Hit]:
        """`query_index` on the writer's connection (see there)."""
        return self._recovering("searching", lambda: query_index(
            self._conn, query, project_key=project_key, limit=limit, all_scopes=all_scopes, marks=marks))  # fmt: skip


__all__ = [
    "SCHEMA_VERSION",
    "DirKey",
    "SearchIndex",
    "SyncStats",
    "damaged",
    "problem",
    "set_aside",
]
