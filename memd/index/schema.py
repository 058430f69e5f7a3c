"""The search database file (`<home>/memd/search.sqlite`): its schema, opening it, and damage.

The layout (`SCHEMA`, `SCHEMA_VERSION`, and the segmenter the rows were written with, kept
in `meta`) and opening the file for writing (`open_db`: created 0600, WAL, the schema made
current — on a schema or segmenter mismatch its tables are dropped and made afresh). When
SQLite cannot use the file at all (`damaged`) it is moved aside (`set_aside`:
`search.sqlite.corrupt-<time>`, the last few kept for a look); `problem` says, read-only,
whether a database can serve searches. The writer that fills it, and rebuilds it from the
memory files after a `set_aside`, is `SearchIndex` in memd/index/writer.py; the readers are in
memd/index/search.py, which imports neither module.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memd.fsutil import PRIVATE_FILE, UnusableFile, check_regular_or_absent, ensure_private_dir
from memd.index.search import BUSY_TIMEOUT_S, SEGMENTER
from memd.logs.lazy import lazy_logger

log = lazy_logger("memd.search")  # the search DB's events keep the logger name they always had

SCHEMA_VERSION = 3  # 2: the porter stemmer and '+' as a word character (C++); 3: embeddings (memd[semantic])

SCHEMA = """
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
    name, description, body, tokenize = "porter unicode61 remove_diacritics 2 tokenchars '+'"
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE embeddings (
    file  TEXT NOT NULL,
    model TEXT NOT NULL,
    hash  TEXT NOT NULL,
    mtime REAL NOT NULL,
    size  INTEGER NOT NULL,
    vec   BLOB NOT NULL,
    PRIMARY KEY (file, model)
);
"""


# An update or delete of any row of `memories` drops the nothing-changed record of the row's directory
# (old and new, `memd.index.fingerprint.record_key`'s `views:<scope>:<key>`), in the writing
# statement's own transaction and whichever process or version writes; an insert changes the
# directory's row count, which the record keeps. So a record whose count still matches vouches that
# the directory's rows are the ones it was made with, and the check reads no row (issue 27). (No
# insert trigger: a trigger costs a rebuild's 50,000 inserts about as much as the inserts themselves.)
RECORD_TRIGGERS = {
    "memories_del_record": "AFTER DELETE ON memories BEGIN DELETE FROM meta WHERE key = "
                           "'views:' || OLD.scope || ':' || coalesce(OLD.project_key, ''); END",
    "memories_upd_record": "AFTER UPDATE ON memories BEGIN DELETE FROM meta WHERE key IN ("
                           "'views:' || OLD.scope || ':' || coalesce(OLD.project_key, ''), "
                           "'views:' || NEW.scope || ':' || coalesce(NEW.project_key, '')); END",
}  # fmt: skip

# Indexes added to a database in place, whatever made it (no version bump: rows and readers unchanged).
# `memories_listing` holds every column but the body, in file order within a directory: `memd list` reads
# a directory's rows from it alone, not the table's pages with the bodies (50,000
# memories: 6,887 page reads → 1,734, and a directory's rows come in file order, no sort); the recall's
# recency query scans it instead of the table. It costs a database about a tenth more space (50,000 memories,
# vacuumed: 67.1 → 74.1 MB) and each write one more index entry. An index here is found by its name: one whose
# columns change takes a new name.
EXTRA_INDEXES = {
    "memories_listing": "ON memories (scope, project_key, file, name, description, type, mtime, size)",
}


# --------------------------------------------------------------------------- damage

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

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    import stat  # noqa: PLC0415 - start-up
    if not stat.S_ISREG(mode):
        from memd.fsutil import kind_of  # noqa: PLC0415 - start-up
        return f"{kind_of(mode)}, not a regular file"
    try:
        from memd.index.search import open_readonly  # noqa: PLC0415 - start-up
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
    import shutil  # noqa: PLC0415 - start-up
    for name in names[KEEP_CORRUPT:]:
        for suffix in ("", "-wal", "-shm"):
            victim = path.parent / f"{name}{suffix}"
            try:
                if victim.is_dir() and not victim.is_symlink():
                    shutil.rmtree(victim)
                else:
                    victim.unlink(missing_ok=True)
            except OSError:
                continue


# --------------------------------------------------------------------------- opening


def create_private(path: Path) -> None:
    """Create the DB file 0600 before SQLite does (it would use the umask);
    SQLite gives its -wal and -shm files the same mode as the database."""
    ensure_private_dir(path.parent)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE)
    except FileExistsError:
        return
    os.close(fd)


def open_db(path: Path) -> tuple[sqlite3.Connection, bool]:
    """A writer's connection to the database at `path` (created if absent) with the current
    schema, and whether the schema was made just now (an empty database). A damaged file raises
    (`damaged` says which errors mean that); the caller decides whether to `set_aside` it."""
    for suffix in ("", "-wal", "-shm"):
        check_regular_or_absent(f"{path}{suffix}")  # SQLite would block on a FIFO forever
    create_private(path)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        created = ensure_schema(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn, created


def schema_current(conn: sqlite3.Connection) -> bool:
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version != SCHEMA_VERSION:
        return False
    row = conn.execute("SELECT value FROM meta WHERE key = 'segmenter'").fetchone()
    return row is not None and row[0] == SEGMENTER


def ensure_schema(conn: sqlite3.Connection, path: Path) -> bool:
    """Make the schema current; True when it was (re)made, leaving the database empty. A database
    already current (every open but the first) is told so by reads alone, without the write lock; one that
    lacks an extra index gets it without waiting for another writer (`_ensure_indexes`)."""
    made = False
    if not (schema_current(conn) and _has_record_triggers(conn)):
        with transaction(conn):
            made = not schema_current(conn)
            if made:
                _make(conn, path)
            _ensure_record_triggers(conn)
    _ensure_indexes(conn, path)
    return made


def _make(conn: sqlite3.Connection, path: Path) -> None:
    """The tables made afresh (inside the caller's transaction): any of an older or newer layout dropped."""
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "AND name NOT LIKE 'memories_fts_%'"
        )
    ]
    if tables:
        log.info("search_db.rebuilt", path=str(path), reason="schema or segmenter changed")
    for name in tables:
        conn.execute(f'DROP TABLE IF EXISTS "{name}"')
    # Statement by statement: executescript() would COMMIT the open transaction.
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("INSERT INTO meta (key, value) VALUES ('segmenter', ?)", (SEGMENTER,))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _present(conn: sqlite3.Connection, kind: str) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,))}


def _has_record_triggers(conn: sqlite3.Connection) -> bool:
    return _present(conn, "trigger") >= RECORD_TRIGGERS.keys()


def _ensure_record_triggers(conn: sqlite3.Connection) -> None:
    """`RECORD_TRIGGERS` in place (a database made before them, or by a version that dropped them).
    Any that was missing: every nothing-changed record goes too, since rows may have changed
    while nothing dropped them."""
    if _has_record_triggers(conn):
        return
    conn.execute("DELETE FROM meta WHERE key LIKE 'views:%'")
    for name, body in RECORD_TRIGGERS.items():
        conn.execute(f"CREATE TRIGGER IF NOT EXISTS {name} {body}")


_NOT_MADE: set[tuple[str, str]] = set()  # (database, index) said not made in this process


def _ensure_indexes(conn: sqlite3.Connection, path: Path) -> None:
    """`EXTRA_INDEXES` in place, each one statement of its own (the connection autocommits). An index changes
    no row, so the nothing-changed records stay. One that cannot be made now (a full disk, a busy or
    read-only database) is said in one line, once a process, and left for the next open: the database serves the same
    without it, only slower. Damage raises, as any other statement's would. The statement does not wait
    for a busy database (busy timeout 0, the connection's own restored after): an open that found the
    schema current otherwise takes no write lock, and must not wait on another writer for an index."""
    missing = sorted(EXTRA_INDEXES.keys() - _present(conn, "index"))
    if not missing:
        return
    (waits,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        for name in missing:
            try:
                conn.execute(f"CREATE INDEX IF NOT EXISTS {name} {EXTRA_INDEXES[name]}")
            except sqlite3.Error as exc:
                if damaged(exc):
                    raise
                if (str(path), name) not in _NOT_MADE:  # once a process: a daemon opens a writer a scope
                    _NOT_MADE.add((str(path), name))
                    log.warning("search_db.index_not_made", path=str(path), index=name, error=str(exc))
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(waits)}")


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction: readers see all of it or none of it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


__all__ = [
    "EXTRA_INDEXES",
    "KEEP_CORRUPT",
    "LAYOUT",
    "SCHEMA",
    "SCHEMA_VERSION",
    "create_private",
    "damaged",
    "ensure_schema",
    "open_db",
    "problem",
    "schema_current",
    "set_aside",
    "transaction",
]
