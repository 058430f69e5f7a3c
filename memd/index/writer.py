"""The writer of the search database (`<home>/memd/search.sqlite`): sync, rebuild.

Only memd writes here, through one `SearchIndex` per process; the reader side
(`open_readonly`, `query_index`, query parsing, snippets) and the contract for
read-only readers are in memd/index/search.py, which does not import this module. The
file itself — schema, versioning, opening, telling and setting aside damage — is
memd/index/schema.py. The database is derived data: on a schema or segmenter
mismatch it is dropped and rebuilt; when SQLite cannot use it at all — not a
database, truncated, a damaged page anywhere (found at open or by any later
statement), a FIFO or directory in its place — it is moved aside
(`search.sqlite.corrupt-<time>`, the last few kept for a look) and rebuilt from
the memory files, and the statement is retried once. A database created afresh
(first use, or after a kill left a half-made one) is filled from every memory
directory on its first sync, not only from the directory that sync names, so
search is whole without waiting for an index run.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from memd.fsutil import UnusableFile
from memd.index.schema import damaged, open_db, set_aside, transaction
from memd.index.search import Hit, query_index, segment
from memd.logs.lazy import lazy_logger
from memd.tree import Home

if TYPE_CHECKING:
    from memd.index.embeddings import EmbedStats
    from memd.memory.file import Memory

log = lazy_logger("memd.search")  # the search DB's events keep the logger name they always had

DirKey = tuple[str, str | None]
T = TypeVar("T")
_PAGES_CHECKED: set[tuple[str, int, int, int, int]] = set()  # databases whose memories table `check_pages` read whole


@dataclass(frozen=True)
class SyncStats:
    """What a search sync did to the rows: added, updated, removed, left unchanged."""

    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


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
        conn, created = open_db(self.path)
        if created:
            self._fresh = True
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

        from memd.discovery import list_memory_dirs  # noqa: PLC0415 - start-up
        from memd.memory.scan import scan_dir  # noqa: PLC0415 - start-up
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

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """One write transaction: readers see all of it or none of it."""
        return transaction(self._conn)

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

    def _insert_many(self, new: Sequence[tuple[Memory, str]]) -> None:
        """`_insert` for many rows in two statements (a fresh database takes a whole scope at once).
        The ids are those one insert at a time gets (no AUTOINCREMENT: the largest id plus one, in
        order), given explicitly so the full-text rows can name them."""
        if len(new) < 2:
            for mem, file in new:
                self._insert(mem, file)
            return
        (top,) = self._conn.execute("SELECT COALESCE(MAX(id), 0) FROM memories").fetchone()
        self._conn.executemany(
            "INSERT INTO memories (id, scope, project_key, file, name, description, type, body, mtime, size) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(top + k, m.scope, m.project_key, f, m.name, m.description, m.type, m.body, m.mtime, m.size)
             for k, (m, f) in enumerate(new, 1)],
        )  # fmt: skip
        self._conn.executemany(
            "INSERT INTO memories_fts (rowid, name, description, body) VALUES (?, ?, ?, ?)",
            [(top + k, segment(m.name), segment(m.description), segment(m.body)) for k, (m, _f) in enumerate(new, 1)],
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
        # A memory's vectors (memd[semantic]: memd/index/embeddings.py) go with it, in the same transaction.
        self._conn.execute("DELETE FROM embeddings WHERE file = (SELECT file FROM memories WHERE id = ?)", (rowid,))
        self._conn.execute("DELETE FROM memories WHERE id = ?", (rowid,))
        self._conn.execute("DELETE FROM memories_fts WHERE rowid = ?", (rowid,))

    # -- public writes

    def known(self, scope: str, project_key: str | None) -> dict[str, Memory]:
        """The memories of one directory as indexed (path → Memory, without extra metadata).

        The indexer passes these to `scan_dir`, which reuses a row whose size and
        mtime still match its file instead of reading and parsing the file again.
        """
        from memd.memory.file import Memory as memory  # noqa: PLC0415 - start-up: a nothing-changed check makes none

        def read() -> dict[str, Memory]:
            rows = self._conn.execute(
                "SELECT file, name, description, type, body, mtime, size FROM memories "
                "WHERE scope = ? AND project_key IS ?",
                (scope, project_key),
            )
            out: dict[str, Memory] = {}
            for file, name, desc, mtype, body, mtime, size in rows:
                path = self.root / file
                out[str(path)] = memory(path, name, desc, mtype, body, mtime, size, scope, project_key, {})
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
            # NOT INDEXED: the table itself, every page of it (the bodies' overflow pages too, as `mtime` and `size`
            # follow `body` in a row), so a damaged page anywhere raises here and the database is set aside and
            # rebuilt; the covering `memories_listing` would answer from its own pages and miss it.
            rows = {
                r[1]: r
                for r in conn.execute("SELECT id, file, size, mtime, scope, project_key FROM memories NOT INDEXED")
            }
            seen: set[str] = set()
            new: list[tuple[Memory, str]] = []
            for memories in memories_by_dir.values():
                for mem in memories:
                    file = self.relative(mem.path)
                    seen.add(file)
                    row = rows.get(file)
                    if row is None:
                        new.append((mem, file))
                        added += 1
                    elif (row[2], row[3], row[4], row[5]) == (mem.size, mem.mtime, mem.scope, mem.project_key):
                        unchanged += 1
                    else:
                        self._update(row[0], mem)
                        updated += 1
            self._insert_many(new)
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

    def embed(self, scope: str, project_key: str | None, *, should_stop: Callable[[], bool] = lambda: False) -> EmbedStats:
        """Bring one scope's vectors up to date (the memd[semantic] extra; memd/index/embeddings.py)."""
        from memd.index.embeddings import embed_scope  # noqa: PLC0415 - start-up

        stats = self._recovering("embedding", lambda: embed_scope(self._conn, scope, project_key, should_stop=should_stop))
        if stats.embedded or stats.removed:
            log.info("search_db.embedded", scope=scope, key=project_key, embedded=stats.embedded, kept=stats.kept,
                     removed=stats.removed)  # fmt: skip
        return stats

    # One directory's rows, how many and the sum of their ids, from the scope index alone (it holds the rowid).
    _ROWS = "count(*), coalesce(sum(id), 0) FROM memories WHERE scope = ? AND project_key IS ?"

    def scope_rows(self, scope: str, project_key: str | None) -> list[int]:
        """One directory's rows: how many, and the sum of their ids (from the scope index alone, which
        holds the rowid: no row read). An added row changes the count; a row replaced by `INSERT OR
        REPLACE` (whose implicit delete fires no trigger) gets a new id and changes the sum."""
        sql = f"SELECT {self._ROWS}"

        def run() -> list[int]:
            n, ids = self._conn.execute(sql, (scope, project_key)).fetchone()
            return [int(n), int(ids)]

        return self._recovering("counting rows", run)

    def record_and_rows(self, key: str, scope: str, project_key: str | None) -> tuple[str | None, list[int]]:
        """`meta(key)` and `scope_rows(scope, project_key)` in one statement, so from one snapshot: a
        writer's transaction (rows and the record it drops or leaves) is seen whole or not at all."""
        sql = f"SELECT (SELECT value FROM meta WHERE key = ?), {self._ROWS}"

        def run() -> tuple[str | None, list[int]]:
            value, n, ids = self._conn.execute(sql, (key, scope, project_key)).fetchone()
            return (None if value is None else str(value)), [int(n), int(ids)]

        return self._recovering("reading the record", run)

    def meta(self, key: str) -> str | None:
        """A value of the `meta` table (the refresh's records: `memd.index.fingerprint`)."""
        row = self._recovering("reading meta", lambda: self._conn.execute("SELECT value FROM meta WHERE key = ?",
                                                                        (key,)).fetchone())  # fmt: skip
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str | None) -> None:
        """Set (None: remove) a value of the `meta` table."""

        def run() -> None:
            with self._transaction() as conn:
                if value is None:
                    conn.execute("DELETE FROM meta WHERE key = ?", (key,))
                else:
                    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

        self._recovering("writing meta", run)

    def check_pages(self) -> None:
        """Read every page of the memories table once per process and database file (a damaged page
        raises, and `_recovering` sets the database aside): the nothing-changed check reads only a
        directory's rows, and damage elsewhere must still be found as the full sync finds it."""
        try:
            st = os.stat(self.path)
        except OSError:
            return
        ident = (str(self.path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)  # a file rewritten in place: again
        if ident in _PAGES_CHECKED:
            return
        self._recovering("checking pages", lambda: self._conn.execute("SELECT sum(size), count(body) FROM memories").fetchone())
        _PAGES_CHECKED.add(ident)

    @staticmethod
    def pages_vouched(path: Path | str) -> None:
        """The file at `path`, as it is now, passed a whole-file check (`PRAGMA quick_check`, the
        drawer refresh's, `jobs/index.py`): `check_pages` need not read it again in this process."""
        try:
            st = os.stat(path)
        except OSError:
            return
        _PAGES_CHECKED.add((str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))

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
    "DirKey",
    "SearchIndex",
    "SyncStats",
]


STALE_VIEW_TMP_SECONDS = 60.0  # atomic_write finishes in milliseconds: a temporary this old was left by a kill


def sweep_stale_view_temps(view: Path, now: float) -> int:
    """Remove `atomic_write`'s temporaries of one view (`.<view name>.<random>.tmp` beside it: `.MEMORY.md.…`,
    the drawer render's `.memory.md.…`) older than STALE_VIEW_TMP_SECONDS: what a `kill -9` during an
    index write left. Called each time a view is written; memd's own naming only, never a link."""
    prefix = f".{view.name}."
    removed = 0
    try:
        entries = [e for e in os.scandir(view.parent) if e.name.startswith(prefix) and e.name.endswith(".tmp")]
    except OSError:
        return 0
    for e in entries:
        with suppress(OSError):
            if e.is_file(follow_symlinks=False) and now - e.stat(follow_symlinks=False).st_mtime > STALE_VIEW_TMP_SECONDS:
                os.unlink(e.path)
                removed += 1
    if removed:
        log.warning("view.stale_temporaries_removed", view=str(view), count=removed)
    return removed
