"""memd's durable state: one SQLite database in WAL mode (`memd/state.sqlite`).

It holds the transcript ledger (so a restart reads only new bytes), job cursors,
job runs, model calls and problems. Schema changes are numbered migrations
applied in order inside a transaction; `PRAGMA user_version` records the last.

Readers (`memd status`, `memd sessions`) open it like writers: WAL lets them read
while the daemon writes. A busy timeout bounds waiting on a writer.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path
from typing import Any

from memd.errors import MemdError
from memd.fsutil import check_own_tree, check_regular_or_absent, ensure_own_dir

BUSY_TIMEOUT_MS = 5000

MIGRATIONS: list[str] = [
    # 1: the ledger, cursors, runs, model calls, problems.
    """
    CREATE TABLE sessions (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL,
        session_id TEXT NOT NULL,
        path TEXT NOT NULL,
        format TEXT,
        is_subagent INTEGER NOT NULL DEFAULT 0,
        kind_decided INTEGER NOT NULL DEFAULT 0,
        records INTEGER NOT NULL DEFAULT 0,
        bad_lines INTEGER NOT NULL DEFAULT 0,
        human_turns INTEGER NOT NULL DEFAULT 0,
        assistant_turns INTEGER NOT NULL DEFAULT 0,
        tool_calls INTEGER NOT NULL DEFAULT 0,
        tool_pending INTEGER NOT NULL DEFAULT 0,
        conv_chars INTEGER NOT NULL DEFAULT 0,
        usage_input INTEGER NOT NULL DEFAULT 0,
        usage_output INTEGER NOT NULL DEFAULT 0,
        usage_cache_creation INTEGER NOT NULL DEFAULT 0,
        usage_cache_read INTEGER NOT NULL DEFAULT 0,
        compactions INTEGER NOT NULL DEFAULT 0,
        last_compaction_offset INTEGER,
        paused_transcript INTEGER NOT NULL DEFAULT 0,
        pause_toggled_ts TEXT,
        pause_offset INTEGER,
        pause_cli INTEGER,
        pause_cli_ts TEXT,
        first_ts TEXT,
        last_ts TEXT,
        safe_offset INTEGER NOT NULL DEFAULT 0,
        safe_human_turns INTEGER NOT NULL DEFAULT 0,
        safe_conv_chars INTEGER NOT NULL DEFAULT 0,
        safe_tool_calls INTEGER NOT NULL DEFAULT 0,
        natural_break INTEGER NOT NULL DEFAULT 0,
        carry TEXT NOT NULL DEFAULT '{}',
        bytes_read INTEGER NOT NULL DEFAULT 0,
        updated_at TEXT,
        UNIQUE (key, session_id)
    );
    CREATE TABLE files (
        path TEXT PRIMARY KEY,
        session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        dev INTEGER NOT NULL DEFAULT 0,
        inode INTEGER NOT NULL DEFAULT 0,
        size INTEGER NOT NULL DEFAULT 0,
        mtime_ns INTEGER NOT NULL DEFAULT 0,
        offset INTEGER NOT NULL DEFAULT 0,
        line_no INTEGER NOT NULL DEFAULT 0,
        bad_lines INTEGER NOT NULL DEFAULT 0,
        format TEXT
    );
    CREATE INDEX files_session ON files(session);
    CREATE TABLE seen_tools (
        session INTEGER NOT NULL,
        tool_id TEXT NOT NULL,
        PRIMARY KEY (session, tool_id)
    ) WITHOUT ROWID;
    CREATE TABLE usage_msgs (
        session INTEGER NOT NULL,
        msg_id TEXT NOT NULL,
        prio INTEGER NOT NULL,
        input INTEGER NOT NULL,
        output INTEGER NOT NULL,
        cache_creation INTEGER NOT NULL,
        cache_read INTEGER NOT NULL,
        PRIMARY KEY (session, msg_id)
    ) WITHOUT ROWID;
    CREATE TABLE cursors (
        job TEXT NOT NULL,
        target TEXT NOT NULL,
        value TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (job, target)
    );
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        job TEXT NOT NULL,
        target TEXT NOT NULL,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        outcome TEXT,
        duration_ms INTEGER,
        reason TEXT,
        error TEXT,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX runs_job ON runs(job, id);
    CREATE TABLE model_calls (
        id INTEGER PRIMARY KEY,
        ts TEXT NOT NULL,
        day TEXT NOT NULL,
        job TEXT NOT NULL,
        model TEXT NOT NULL,
        tier TEXT,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens INTEGER NOT NULL DEFAULT 0,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0,
        ok INTEGER NOT NULL,
        error TEXT
    );
    CREATE INDEX model_calls_day ON model_calls(day);
    CREATE TABLE problems (
        source TEXT NOT NULL,
        path TEXT NOT NULL,
        reason TEXT NOT NULL,
        seen_at TEXT NOT NULL,
        PRIMARY KEY (source, path)
    );
    CREATE TABLE kv (
        k TEXT PRIMARY KEY,
        v TEXT NOT NULL
    );
    """,
    # 2: which process recorded a run, so a run whose process died is known as interrupted.
    """
    ALTER TABLE runs ADD COLUMN pid INTEGER;
    CREATE INDEX runs_unfinished ON runs(finished_at) WHERE finished_at IS NULL;
    """,
    # 3: transcripts are known by their path under the home, so a moved, copied or linked home goes
    # on where it stopped; a fingerprint of what was read tells a rewrite from an append; a
    # session's generation counts rewrites (jobs restart their cursors on a new one); the last
    # ingest error shows in status; record types memd does not recognise are counted; extraction
    # remembers which user texts it judged (a rewritten transcript is judged only where it is new);
    # `memd pause`/`resume` are events at a transcript offset, so the later word wins either way.
    """
    UPDATE files SET path = (
        SELECT 'projects/' || s.key || substr(files.path, instr(files.path, '/projects/' || s.key || '/')
                                              + length('/projects/' || s.key))
        FROM sessions s WHERE s.id = files.session)
    WHERE substr(path, 1, 1) = '/'
      AND instr(path, '/projects/' || (SELECT key FROM sessions WHERE id = files.session) || '/') > 0;
    ALTER TABLE files ADD COLUMN fp TEXT;
    ALTER TABLE sessions ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN ingest_error TEXT;
    ALTER TABLE sessions ADD COLUMN ingest_error_ts TEXT;
    ALTER TABLE sessions ADD COLUMN pause_cli_parity INTEGER;
    CREATE TABLE record_types (
        session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        type TEXT NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (session, type)
    );
    CREATE TABLE judged (
        target TEXT NOT NULL,
        digest TEXT NOT NULL,
        PRIMARY KEY (target, digest)
    ) WITHOUT ROWID;
    CREATE TABLE pause_events (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL,
        session_id TEXT NOT NULL,
        generation INTEGER NOT NULL,
        offset INTEGER NOT NULL,
        paused INTEGER NOT NULL,
        parity INTEGER NOT NULL,
        ts TEXT NOT NULL
    );
    CREATE INDEX pause_events_session ON pause_events(key, session_id, generation, offset);
    """,
    # 4: `/resume-memory` resumes whatever the state (SPEC §3.4): the ledger counts the resumes a
    # transcript said, and a CLI word keeps that count, so a resume said after it overrules it.
    """
    ALTER TABLE sessions ADD COLUMN pause_resumes INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN pause_cli_resumes INTEGER;
    """,
]


class StateError(MemdError):
    """The state database is locked beyond the wait, corrupt, or from a newer memd."""


class StateDamaged(StateError, sqlite3.DatabaseError):
    """The state database cannot be read as one: damaged pages, a broken schema, text that is not
    UTF-8. One line naming the file (never a traceback); still a `sqlite3.DatabaseError`, so
    code that tolerates a failing database (`except sqlite3.Error`) goes on tolerating it."""


class StateUnavailable(StateError, sqlite3.OperationalError):
    """The state database cannot be written now, through no fault of its own: a full disk, a
    read-only file or mount. One line; still a `sqlite3.OperationalError`."""


_MOVE_ASIDE = "stop memd and move the file aside to start a fresh ledger"


def damage(path: Path | str, exc: BaseException) -> StateError | None:
    """The one-line error for a database failure: `StateDamaged` when it is the file's fault,
    `StateUnavailable` for a full disk or a read-only file; None for a busy or locked database
    (callers wait on those) and for a constraint or API misuse (a bug, which keeps its traceback)."""
    if isinstance(exc, (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError)):
        return None
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, sqlite3.OperationalError):
        if "locked" in text or "busy" in text:
            return None
        if any(w in text for w in ("full", "readonly", "read-only", "interrupted")):
            return StateUnavailable(f"{path}: {text}")
    if isinstance(exc, UnicodeDecodeError):
        text = "a text value is not UTF-8"
    return StateDamaged(f"{path}: {text} ({_MOVE_ASIDE})")


class _Cursor(sqlite3.Cursor):
    """A cursor whose failures from a damaged file are `StateDamaged` (see `damage`)."""

    def _fail(self, exc: BaseException) -> BaseException:
        conn = self.connection
        return damage(getattr(conn, "path", "state database"), exc) or exc

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        try:
            return super().execute(sql, parameters)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self._fail(exc) from exc

    def executemany(self, sql: str, seq: Any, /) -> _Cursor:
        try:
            return super().executemany(sql, seq)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self._fail(exc) from exc

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self._fail(exc) from exc

    def fetchmany(self, size: int | None = None) -> list[Any]:
        try:
            return super().fetchmany(self.arraysize if size is None else size)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self._fail(exc) from exc

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self._fail(exc) from exc

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise self._fail(exc) from exc


class _Connection(sqlite3.Connection):
    """The state database's connection: every statement runs on a `_Cursor`."""

    path = ""

    def cursor(self, factory: Any = _Cursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> Any:
        return self.cursor().executemany(sql, parameters)


def connect(path: Path, *, readonly: bool = False, check_same_thread: bool = True) -> sqlite3.Connection:
    """Open (and migrate, unless read-only) the state database. `check_same_thread=False`: a connection handed
    from thread to thread, one at a time (the daemon's hook answers keep one, memd/daemon/hook_server.py).

    Only a regular file is opened (a FIFO would block SQLite's open forever); a writer never
    reaches its directory, memd's own, through a symlink (`fsutil.ensure_own_dir`). A file
    SQLite cannot use — not a database, a damaged schema, pages that fail later — is one
    line, `StateDamaged`, naming it.
    """
    try:
        if readonly:
            if not path.exists():
                raise StateError(f"{path}: no state yet (memd has not run on this home)")
            check_regular_or_absent(path)
            conn = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                                   factory=_Connection)  # fmt: skip
        else:
            ensure_own_dir(path.parent, path.parent)
            check_own_tree(path.parent)
            for suffix in ("", "-wal", "-shm"):
                check_regular_or_absent(f"{path}{suffix}")
            _create_private(path)
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, factory=_Connection,
                                   check_same_thread=check_same_thread)  # fmt: skip
        assert isinstance(conn, _Connection)
        conn.path = str(path)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # parses the schema: a damaged one fails here
        if not readonly:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            migrate(conn)
        else:
            version = _check_version(conn)
            if version < len(MIGRATIONS):
                conn.close()
                what = "empty" if version == 0 else f"at schema {version} of {len(MIGRATIONS)}"
                raise StateError(f"{path}: {what}; `memd scan` (or the daemon) brings it up to date")
        return conn
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, StateError):
            raise
        raise (damage(path, exc) or StateError(f"{path}: {exc} (another memd process holds it; try again)")) from exc


def _create_private(path: Path) -> None:
    """Create the database file 0600 before SQLite does (it would use the umask, and a
    chmod afterwards leaves a window); SQLite gives -wal and -shm the database's mode."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def _check_version(conn: sqlite3.Connection) -> int:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise StateError(f"state schema {version} is newer than this memd knows ({len(MIGRATIONS)})")
    return int(version)


def migrate(conn: sqlite3.Connection) -> None:
    """Apply the migrations this database has not seen, each in its own transaction."""
    version = _check_version(conn)
    for number, sql in enumerate(MIGRATIONS[version:], start=version + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] >= number:
                conn.execute("ROLLBACK")
                continue
            for stmt in sql.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            conn.execute(f"PRAGMA user_version={number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def get_kv(conn: sqlite3.Connection, k: str) -> str | None:
    row = conn.execute("SELECT v FROM kv WHERE k=?", (k,)).fetchone()
    return None if row is None else str(row[0])


def set_kv(conn: sqlite3.Connection, k: str, v: str) -> None:
    conn.execute("INSERT INTO kv(k, v) VALUES(?, ?) ON CONFLICT(k) DO UPDATE SET v=excluded.v", (k, v))


def process_alive(pid: int | None) -> bool:
    """Whether a process of that id exists (a recycled id reads as alive: the safe side)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_interrupted(conn: sqlite3.Connection, now_iso: str) -> int:
    """Close run records whose process died mid-run (kill -9, a crash, Ctrl-C while waiting)."""
    rows = conn.execute("SELECT id, pid FROM runs WHERE finished_at IS NULL").fetchall()
    dead = [r[0] for r in rows if not process_alive(r[1])]
    conn.executemany(
        "UPDATE runs SET finished_at=?, outcome='interrupted', reason='its process ended before the run did' "
        "WHERE id=? AND finished_at IS NULL",
        [(now_iso, rid) for rid in dead],
    )
    return len(dead)
