"""Agent hooks: SessionStart (`memd context --hook`), UserPromptSubmit (`memd recall --hook`),
PreCompact (`memd precompact --hook`), as Claude Code runs them (SPEC §11.1).

A hook gets the event as JSON on stdin (`session_id`, `transcript_path`, `cwd`,
`hook_event_name`, and `source` / `prompt` / `trigger`) and may answer
`{"hookSpecificOutput": {"hookEventName": …, "additionalContext": …}}` on stdout.

Rules every hook here keeps:

* **A hook never blocks a session.** Any failure — unreadable input, a broken
  home, a busy database, a bug — prints nothing on stdout and exits 0; one line
  on stderr says what happened (Claude Code shows it in its debug output only).
* **Only the answer reaches stdout.** While a hook works, `sys.stdout` is
  stderr, so a stray print or log line cannot corrupt the JSON Claude Code reads.
* **Fast.** The `memd` script runs a hook's command line without click (`memd.__main__`, then
  `command` here); no logging, structlog or hashlib, no model SDK unless a model is configured,
  small files read (bench/bench_hook_floor.py, against a bare interpreter's start;
  tests/cli/test_hook_entry.py lists the modules a hook loads). A running daemon answers
  SessionStart and UserPromptSubmit with these modules loaded (`respond`, over the hook socket:
  memd.agent.hookwire, memd/daemon/hook_server.py); the process then loads none of them.
* **What a hook surfaced is recorded**, per session and per day, in the state
  database's `kv` table: `hooks:<session>` holds the session's counts (`memd
  sessions --json`, field `hooks`), `hookday:<YYYY-MM-DD>` the day's (`memd
  status`), `recall:<project>:<session>` the files already surfaced (recall
  never shows one twice in a session). Recording is best effort: a busy state
  database costs the record, never the answer.

PreCompact makes the session's summary current, bounded: it starts the summary job
and waits for it at most `PRECOMPACT_WAIT_SECONDS`, and leaves
`summary-request:<key>:<session>` in `kv` for the daemon's due-check
(`take_summary_requests`), which runs the job again if it was not done. The
SessionStart after the compaction (`source: "compact"`) brings the summary back.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memd.tree import Home, Place

if TYPE_CHECKING:  # the daemon's answers only: a hook process does not load it for this
    from memd.agent.candidates import Scope

MAX_STDIN = 4 * 1024 * 1024  # a prompt can be long; the event is not
# Claude Code keeps a hook's additionalContext inline up to 10,000 characters; past that
# the model gets a 2 KB preview and a file path. Stay under it with room to spare.
HOOK_MAX_CHARS = 9_500
MAX_QUERY_CHARS = 4000  # what of a prompt recall looks at
HOOK_BUSY_MS = 1000  # a hook waits at most this long for the state database
SUMMARY_MAX_CHARS = 6_000  # of HOOK_MAX_CHARS, what the summary may take after a compaction
SUMMARY_READ_BYTES = 256 * 1024  # a summary is ~48 KB at most (§4); a bigger file is read this far
PRECOMPACT_WAIT_SECONDS = 5.0  # PreCompact waits this long for the summary update, then lets it go on
COUNTERS = ("context", "prompts", "recalls", "memories", "compacts")
SUMMARY_REQUEST = "summary-request:"


class _Quiet:
    """A logger that drops everything: hooks never log (structlog costs their time budget)."""

    def __getattr__(self, _name: str) -> Callable[..., None]:
        return lambda *a, **k: None


QUIET = _Quiet()
# Where a hook's one-line notes go: stderr, or, while the daemon answers a hook (`respond`), that answer's.
_NOTES: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("memd_hook_notes", default=None)
# The daemon's answers: the records a hook would write, kept here instead, and written only once the hook has
# taken the answer (memd/daemon/hook_server.py): a hook that gave up answers itself and records it itself.
Deferred = Callable[[sqlite3.Connection], None]  # one record, to be written on the connection it is given
_RECORDS: contextvars.ContextVar[list[Deferred] | None] = contextvars.ContextVar("memd_hook_records", default=None)


class Kept:
    """The daemon's connections to its home's state and search databases, kept open between its answers to the
    hooks (memd/daemon/hook_server.py lends one to one answer at a time): opening and closing them was most of a
    short answer's work. An answer sees what fresh connections would: a database file replaced since it was
    opened (another inode: the search database deleted and rebuilt, the state moved aside) is opened again, and
    `done` leaves nothing in a transaction."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self._open: dict[str, tuple[sqlite3.Connection, tuple[int, int] | None]] = {}
        self._scopes: dict[str, tuple[str, int, int, dict[str, int], dict[str, dict[int, float]]]] = {}  # project
        # key: (its table, data_version, size, its terms' counts, its phrases' parts of bm25)
        self._found: tuple[int, dict[str, int]] = (-1, {})  # terms' counts in the whole index, at a data_version
        self._scopes_on: sqlite3.Connection | None = None  # the search connection those tables are on
        self._lent: Scope | None = None  # the scope `scoped` gave the answer under way
        self._common: dict[str, None] = {}  # phrases with many matches that prompts named, the latest last (`warm`)

    def state(self) -> sqlite3.Connection:
        """The state database, as `_open_state` opens it."""
        from memd import state

        conn = self._get(self.home.state_db, lambda: state.connect(self.home.state_db, check_same_thread=False))
        conn.execute(f"PRAGMA busy_timeout={HOOK_BUSY_MS}")
        return conn

    def search(self) -> sqlite3.Connection:
        """The search database, read-only (`memd.index.search.open_readonly`: its URI's `mode=ro`), with a
        temporary database of its own that `scope` writes."""
        from memd.index.search import open_readonly

        def opener() -> sqlite3.Connection:
            conn = open_readonly(self.home.search_db, check_same_thread=False)
            conn.execute("PRAGMA query_only = 0")  # the temporary tables; the database itself is opened read-only
            conn.execute("PRAGMA temp_store = MEMORY")  # and they stay in memory: a few ids a project
            return conn

        return self._get(self.home.search_db, opener)

    def scope(self, project_key: str) -> Scope:
        """`scoped`'s scope (SessionStart fills the project's table before the first prompt)."""
        return self.scoped(project_key)[1]

    def scoped(self, project_key: str) -> tuple[sqlite3.Connection, Scope]:
        """The search connection and the project's `memd.agent.candidates.Scope`, its ids in a table of that
        connection's temporary database, filled again when the index changed since (`PRAGMA data_version`: another connection
        committed). It starts a read transaction on the search connection, so that every statement of this
        answer reads the one state of the index the table was checked against; `end_read` ends it. An answer
        reads through the connection returned here: one asked for apart (`search`) before would be closed by
        this call had the file been replaced in between."""
        from memd.agent.candidates import Scope, scope_of

        conn = self.search()
        if self._scopes_on is not conn:
            self._scopes, self._found, self._scopes_on = {}, (-1, {}), conn
        if not conn.in_transaction:
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the read starts: one state from here
        version = int(conn.execute("PRAGMA data_version").fetchone()[0])
        if self._found[0] != version or len(self._found[1]) > MAX_KEPT_COUNTS:
            self._found = (version, {})
        have = self._scopes.get(project_key)
        if have is not None and len(have[3]) > MAX_KEPT_COUNTS:
            have[3].clear()
        if sum(len(parts) for kept in self._scopes.values() for parts in kept[4].values()) > MAX_KEPT_PARTS:
            for kept in self._scopes.values():
                kept[4].clear()
        if have is None or have[1] != version:
            if have is None and len(self._scopes) >= MAX_KEPT_SCOPES:
                for table, *_rest in self._scopes.values():
                    conn.execute(f"DROP TABLE IF EXISTS temp.{table}")
                self._scopes = {}
            table = have[0] if have else f"memd_scope_{len(self._scopes)}"
            plain = scope_of(project_key)
            conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY)")
            conn.execute(f"DELETE FROM temp.{table}")
            conn.execute(f"INSERT INTO temp.{table} {plain.ids}", plain.args)
            size = int(conn.execute(f"SELECT count(*) FROM temp.{table}").fetchone()[0])
            have = self._scopes[project_key] = (table, version, size, {}, {})
        self._lent = Scope(project_key, f"SELECT id FROM temp.{have[0]}", (), have[2], self._found[1], have[3], have[4])
        return conn, self._lent

    def warm(self, project_key: str, stop: Callable[[], bool] = lambda: False) -> None:
        """The project's scope made ready (`scoped`), with the parts of bm25 (`phrase_scores`) of the phrases
        with many matches that the latest prompts named (in any project): a prompt that names a common word again
        then adds up kept parts instead of scoring thousands of matches (`memd.agent.candidates.ranked`). Phrase
        by phrase while `stop()` is false. The read stays open: `end_read` ends it."""
        from memd.agent.candidates import phrase_scores

        conn, scope = self.scoped(project_key)
        for phrase in list(self._common):
            if stop():
                return
            phrase_scores(conn, phrase, scope)

    def end_read(self) -> None:
        """End the search connection's read transaction (`scope`), keeping its tables; one that cannot be
        committed is rolled back, and its tables are filled again next time."""
        lent, self._lent = self._lent, None
        for phrase, parts in (lent.scores or {}).items() if lent is not None else ():
            if len(parts) >= WARM_MIN_MATCHES:
                self._common.pop(phrase, None)
                self._common[phrase] = None
        while len(self._common) > MAX_WARM_PHRASES:
            del self._common[next(iter(self._common))]
        have = self._open.get(str(self.home.search_db))
        if have is None or not have[0].in_transaction:
            return
        try:
            have[0].commit()
        except sqlite3.Error:
            self._scopes, self._found = {}, (-1, {})
            with contextlib.suppress(sqlite3.Error):
                have[0].rollback()

    def _get(self, path: Path, opener: Callable[[], sqlite3.Connection]) -> sqlite3.Connection:
        """The kept connection to `path` while the file there is the one it was opened on, else a new one. The
        file's identity is taken before the open (a file replaced meanwhile makes the next answer open it again),
        or after it when the open made the file."""
        key = str(path)
        ident = _file_id(path)
        have = self._open.get(key)
        if have is not None and ident is not None and have[1] == ident:
            return have[0]
        self._drop(key)
        conn = opener()
        self._open[key] = (conn, ident if ident is not None else _file_id(path))  # None before: made by this open
        return conn

    def done(self) -> None:
        """After an answer (and its records): no connection left in a transaction; one that cannot say so is
        closed."""
        self.end_read()
        for key, (conn, _ident) in list(self._open.items()):
            try:
                if conn.in_transaction:
                    conn.rollback()
            except sqlite3.Error:
                self._drop(key)

    def close(self) -> None:
        for key in list(self._open):
            self._drop(key)

    def _drop(self, key: str) -> None:
        have = self._open.pop(key, None)
        if have is not None:
            with contextlib.suppress(sqlite3.Error):
                have[0].close()


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


MAX_KEPT_SCOPES = 64  # projects whose scope a `Kept` holds in tables; one more, and they are all made again
MAX_KEPT_COUNTS = 20_000  # terms' counts a `Kept` holds for one scope (and the whole index); more, and they go
MAX_KEPT_PARTS = 200_000  # phrases' parts of bm25 a `Kept` holds in all its scopes (a float a memory and phrase:
# ~20 MB); more, and they all go
WARM_MIN_MATCHES = 200  # a phrase with this many matches in a scope is kept for `Kept.warm` (scoring them is the cost)
MAX_WARM_PHRASES = 4  # the latest such phrases `Kept.warm` scores in a project's scope after its SessionStart
# The daemon's kept connections (`Kept`) while it answers a hook (`respond`); None in a hook process.
_KEPT: contextvars.ContextVar[Kept | None] = contextvars.ContextVar("memd_hook_kept", default=None)


def _note(line: str) -> None:
    sink = _NOTES.get()
    if sink is None:
        sys.stderr.write(line)
    else:
        sink.append(line)


@dataclass(frozen=True)
class Event:
    """The part of a hook's stdin JSON memd uses."""

    name: str
    session_id: str | None
    transcript_path: str | None
    cwd: str | None
    source: str | None = None
    prompt: str | None = None
    trigger: str | None = None

    @classmethod
    def parse(cls, raw: bytes | str) -> Event:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("hook input is not a JSON object")

        def text(k: str) -> str | None:
            v = data.get(k)
            return v if isinstance(v, str) and v else None

        return cls(text("hook_event_name") or "", text("session_id"), text("transcript_path"), text("cwd"),
                   text("source"), text("prompt"), text("trigger"))  # fmt: skip


def answer(event_name: str, context: str) -> str:
    """The hook's stdout: `additionalContext` for `event_name`."""
    return json.dumps({"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": context}},
                      ensure_ascii=False)  # fmt: skip


@contextmanager
def _stdout_to_stderr() -> Iterator[IO[str]]:
    """Yield the real stdout; meanwhile anything printed goes to stderr."""
    real = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield real
    finally:
        sys.stdout = real


def handle(handler: Callable[[Event], str | None], raw: bytes) -> str:
    """What the hook writes on stdout for the event `raw`: `handler`'s answer and a newline, or "" (nothing to
    say, or a failure: its one line noted)."""
    try:
        result = handler(Event.parse(raw))
    except Exception as exc:
        with contextlib.suppress(Exception):
            _note(f"memd: hook skipped: {type(exc).__name__}: {exc}\n")
        return ""
    return result + "\n" if result else ""


def run(handler: Callable[[Event], str | None], stdin: IO[bytes] | None = None) -> int:
    """Read the event, call `handler`, print its answer (if any); 0 whatever happens."""
    with _stdout_to_stderr() as out:
        try:
            raw = (stdin or sys.stdin.buffer).read(MAX_STDIN)
        except Exception as exc:
            with contextlib.suppress(Exception):
                _note(f"memd: hook skipped: {type(exc).__name__}: {exc}\n")
            return 0
        text = handle(handler, raw)
        if text:
            try:
                out.write(text)
                out.flush()
            except Exception:
                pass
    return 0


# --------------------------------------------------------------------------- the commands

def find_home(explicit: str | None) -> Home | None:
    """The home of `--home`, else `$DEEPCODE_HOME`, else `~/.deepcode`, when it is a directory; None when
    not (no hook creates a home, and `memd.cli.get_home` refuses one that is missing or not a directory)."""
    from memd.tree import resolve_home

    try:
        root = resolve_home(explicit)
        return Home(root) if root.is_dir() else None
    except Exception:
        return None


def command(sub: str, home: Home | None, *, agent: str | None = None, stdin: IO[bytes] | None = None) -> int:
    """`memd <sub> --hook` (`sub` of memd.agent.connect.SUBCOMMANDS) on `home`: the exit code, 0 whatever happens (a hook never
    blocks a session); no home, nothing done. The click commands and the click-free path of the `memd`
    script (`memd.__main__`) both run a hook through here (the latter with the `stdin` it read when the daemon
    did not answer)."""
    if home is None:
        return 0
    if sub == "precompact":
        return run(lambda event: pre_compact(home, event), stdin)
    if sub == "context":
        return run(handler(sub, home, agent=agent or "claude"), stdin)
    from memd.agent.recall import forget_model_calls, leave_if_a_call_was_cut

    forget_model_calls()
    code = run(handler(sub, home), stdin)

    leave_if_a_call_was_cut(code)
    return code


def handler(sub: str, home: Home, *, agent: str = "claude", cwd: str | None = None, env: dict[str, str] | None = None,
            started: float | None = None, settings: Any = None) -> Callable[[Event], str | None]:  # fmt: skip
    """The answer to the hook `sub` ("context" or "recall") on `home`. `cwd`, `env` and `started` are the hook
    process's (default: this process's): the daemon passes the asking hook's (`respond`), and for a recall the
    settings it read for it (`settings`: else they are read here)."""
    if sub == "context":
        return lambda event: session_start(home, event, agent=agent, cwd=cwd)
    return lambda event: user_prompt(home, event, cwd=cwd, env=env, started=started, settings=settings)


@dataclass(frozen=True)
class Reply:
    """What a hook process writes and exits with."""

    out: str  # on stdout ("" for nothing)
    err: str  # on stderr: its notes, a line each
    code: int = 0
    records: tuple[Deferred, ...] = ()  # what it would record, for `write_records` once the hook has the answer


def respond(sub: str, home: Home, raw: bytes, *, cwd: str, env: dict[str, str], started: float,
            kept: Kept | None = None, settings: Any = None) -> Reply:  # fmt: skip
    """The hook `sub` ("context" or "recall") as the process `memd <sub> --hook` with `raw` on its stdin, `cwd`,
    `env` and its start at `started` (`time.monotonic()`'s clock) would answer it, on this thread: the daemon's
    hook socket (memd/daemon/hook_server.py) calls this. The same code as `command`, and the same records; only
    what it writes is returned instead. `kept`: the daemon's open connections to this home's databases, used
    instead of opening them; `settings`: the home's, when the daemon read them for this answer already. Never
    raises."""
    notes: list[str] = []
    pending: list[Deferred] = []
    token, records, lent = _NOTES.set(notes), _RECORDS.set(pending), _KEPT.set(kept)
    try:
        out = handle(handler(sub, home, cwd=cwd, env=env, started=started, settings=settings), raw)
    finally:
        _KEPT.reset(lent)
        _RECORDS.reset(records)
        _NOTES.reset(token)
    return Reply(out, "".join(notes), records=tuple(pending))


def prepare(kept: Kept, home: Home, raw: bytes, cwd: str, stop: Callable[[], bool] = lambda: False) -> None:
    """After the daemon answered a SessionStart (`raw` its event, `cwd` its process's): the project's scope for
    recall made ready in `kept` (`Kept.warm`), so that the session's first prompt does not wait for it; `stop`
    true (an answer waits for `kept`) ends it at its next step. Best effort: a failure leaves it to the prompt."""
    try:
        if home.search_db.exists():
            kept.warm(memory_key(home, Event.parse(raw), cwd), stop)
    except Exception:
        pass
    finally:
        kept.end_read()


def write_records(home: Home, records: tuple[Deferred, ...], kept: Kept | None = None) -> None:
    """Write what a `respond` kept (`Reply.records`): the daemon calls this once the hook took its answer, on its
    `kept` state connection when it has one. Best effort, as the hook's own records are."""
    if not records:
        return
    try:
        conn = _open_state(home) if kept is None else kept.state()
    except Exception:
        return
    try:
        for write in records:
            try:
                write(conn)
            except Exception:
                continue
    finally:
        if kept is None:
            conn.close()


# --------------------------------------------------------------------------- where


def session_cwd(event: Event, cwd: str | None = None) -> str:
    """The session's working directory: the event's, else the hook process's (`cwd`, default this process's)."""
    if event.cwd and os.path.isabs(event.cwd) and os.path.isdir(event.cwd):
        return event.cwd
    return cwd or os.getcwd()


def transcript_place(home: Home, event: Event) -> tuple[str, str] | None:
    """(transcript key, session id) of the event, when its transcript lies in this home."""
    if not event.transcript_path:
        return None
    path = Path(event.transcript_path)
    try:
        rel = path.parent.relative_to(home.projects)
    except ValueError:
        return None
    sid = event.session_id or path.stem
    if len(rel.parts) != 1 or not sid or "/" in sid or sid in (".", ".."):
        return None
    return rel.parts[0], sid


def memory_key(home: Home, event: Event, cwd: str | None = None) -> str:
    """The project whose memory this session reads (SPEC §1.1a); `cwd` the hook process's (`session_cwd`)."""
    from memd.keys import memory_key_for_session, project_key

    where = transcript_place(home, event)
    if where is not None:
        return memory_key_for_session(event.cwd, where[0])
    return project_key(session_cwd(event, cwd))


# --------------------------------------------------------------------------- records


def _open_state(home: Home) -> sqlite3.Connection:
    from memd import state

    conn = state.connect(home.state_db)
    conn.execute(f"PRAGMA busy_timeout={HOOK_BUSY_MS}")
    return conn


def _bump(conn: sqlite3.Connection, key: str, counts: dict[str, int]) -> None:
    from memd.state import get_kv, set_kv

    try:
        old = json.loads(get_kv(conn, key) or "{}")
    except ValueError:
        old = {}
    old = old if isinstance(old, dict) else {}
    new = {c: int(old.get(c) or 0) + int(counts.get(c, 0)) for c in COUNTERS}
    set_kv(conn, key, json.dumps(new, separators=(",", ":")))


def record(conn: sqlite3.Connection, session_id: str | None, day: str, **counts: int) -> None:
    """Add `counts` (of COUNTERS) to the session's and the day's, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if session_id:
            _bump(conn, f"hooks:{session_id}", counts)
        _bump(conn, f"hookday:{day}", counts)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _record_quietly(home: Home, conn: sqlite3.Connection | None, session_id: str | None, day: str, *,
                    surfaced: tuple[str, list[str]] | None = None, **counts: int) -> None:  # fmt: skip
    """Best effort: the answer stands even when the state database cannot take the record. In the daemon's
    answers (`respond`) it is kept for `write_records` instead."""
    pending = _RECORDS.get()
    if pending is not None:
        pending.append(lambda c: _record(c, session_id, day, surfaced, counts))
        return
    own = conn is None
    try:
        conn = conn or _open_state(home)
        _record(conn, session_id, day, surfaced, counts)
    except Exception as exc:
        _note(f"memd: hook not recorded: {exc}\n")
    finally:
        if own and conn is not None:
            conn.close()


def _record(conn: sqlite3.Connection, session_id: str | None, day: str, surfaced: tuple[str, list[str]] | None,
            counts: dict[str, int]) -> None:  # fmt: skip
    if surfaced and session_id and surfaced[1]:
        from memd.agent.candidates import record_surfaced

        record_surfaced(conn, surfaced[0], session_id, surfaced[1])
    record(conn, session_id, day, **counts)


def day_counts(conn: sqlite3.Connection, days: list[str]) -> list[dict[str, Any]]:
    """The hook counts of each day in `days` (zeros for a day without any)."""
    out = []
    for day in days:
        row = conn.execute("SELECT v FROM kv WHERE k = ?", (f"hookday:{day}",)).fetchone()
        try:
            data = json.loads(row[0]) if row else {}
        except ValueError:
            data = {}
        out.append({"day": day, **{c: int(data.get(c) or 0) if isinstance(data, dict) else 0 for c in COUNTERS}})
    return out


# --------------------------------------------------------------------------- SessionStart


def session_start(home: Home, event: Event, *, agent: str = "claude", now: Callable[[], datetime] | None = None,
                  cwd: str | None = None) -> str | None:  # fmt: skip
    """The SessionStart answer: the session-start block (`memd.agent.context`) as additionalContext.

    After a compaction (`source: "compact"`) the session's `summary.md` comes too (SPEC §4, §11):
    that is what the summary is for. It gets up to `SUMMARY_MAX_CHARS` of the hook's limit, the
    rest of the block the remainder; a longer summary is cut at a line and names its file."""
    from memd import settings as st
    from memd.agent import context as inject

    settings = st.load(home.settings_file)
    kw = {"now": now} if now is not None else {}
    summary = compact_summary(home, event) if event.source == "compact" and settings.memory.enabled else None
    room = HOOK_MAX_CHARS - (len(summary) + 40 if summary else 0)
    ctx = inject.build(home, settings, session_cwd(event, cwd), inject.AGENTS[agent], max_chars=room, **kw)
    if summary:
        ctx.sections.append(inject.Section("sessionSummary", summary))
    body = ctx.body()
    if len(body) > HOOK_MAX_CHARS:  # instructions alone over the limit: cut, and say so
        body = body[: HOOK_MAX_CHARS - 120].rstrip() + "\n[memd: cut to fit the hook's 10,000-character limit]"
    from memd.clock import system_clock

    _record_quietly(home, None, event.session_id, system_clock().date().isoformat(),
                    surfaced=(ctx.project_key, ctx.drawer_files), context=1)  # fmt: skip
    return answer("SessionStart", body)


def compact_summary(home: Home, event: Event, max_chars: int | None = None) -> str | None:
    """The session's current `summary.md` as the compacted session reads it, or None when there is
    none. Within `max_chars` (default `SUMMARY_MAX_CHARS`): cut at a line, saying where the rest is.
    Redacted again on the way out (a user may have edited the file)."""
    limit = SUMMARY_MAX_CHARS if max_chars is None else max_chars
    where = transcript_place(home, event)
    if where is None:
        return None
    path = home.summary_file(*where)
    try:
        from memd.fsutil import open_regular

        with os.fdopen(open_regular(path), "rb") as fh:  # a FIFO in its place is refused, never waited on
            raw = fh.read(SUMMARY_READ_BYTES)
    except OSError:
        return None
    from memd.redact.redactor import redact

    text = redact(raw.decode("utf-8", "replace")).strip()
    if not text:
        return None
    head = f"This session was compacted. memd's rolling summary of the whole session (file: {path}):\n\n"
    tail = f"\n[memd: summary cut to fit the hook's limit; Read {path} for the rest]"
    if len(head) + len(text) > limit:
        room = max(0, limit - len(head) - len(tail))
        cut = text[:room]
        text = (cut.rsplit("\n", 1)[0] if "\n" in cut else cut).rstrip() + tail
    return head + text


# --------------------------------------------------------------------------- UserPromptSubmit


def age_label(mtime: float, now: datetime) -> str:
    from memd.index.staleness import age_days

    days = age_days(mtime, now)
    return "today" if days == 0 else ("1 day old" if days == 1 else f"{days} days old")


def render_recalled(home: Home, memories: list[Any], now: datetime, max_chars: int) -> str:
    """The recalled memories as the model reads them: each with its age, the staleness warning
    when older than a day, its description and body, and the file to Read; within `max_chars`."""
    from memd.index.staleness import staleness_note
    from memd.memory.reading import FULL_TEXT_RULE

    head = (f"memd recalled {len(memories)} memor{'y' if len(memories) == 1 else 'ies'} that may be relevant "
            f"to this prompt (from long-term memory). {FULL_TEXT_RULE}")  # fmt: skip
    blocks: list[str] = []
    room = max_chars - len(head) - 2
    per = max(400, room // max(1, len(memories)))
    for m in memories:
        scope = "global memory" if m.scope == "global" else "project memory"
        lines = [f"## {m.name} ({m.type}, {scope}, {age_label(m.mtime, now)})", f"file: {home.root / m.file}"]
        note = staleness_note(m.mtime, now)
        if note:
            lines.append(f"⚠ {note}")
        lines += ["", " ".join(m.description.split())]
        body = (m.body or "").strip()
        if body:
            lines += ["", body]
        block = "\n".join(lines)
        if len(block) > per:
            block = block[: per - 40].rstrip() + "\n[… cut; Read the file for the rest]"
        blocks.append(block)
    text = head + "\n\n" + "\n\n".join(blocks)
    return text[:max_chars]


def user_prompt(home: Home, event: Event, *, now: Callable[[], datetime] | None = None, cwd: str | None = None,
                env: dict[str, str] | None = None, started: float | None = None, settings: Any = None) -> str | None:  # fmt: skip
    """The UserPromptSubmit answer: recall (§7b.1) for the prompt, or None when nothing is relevant. `cwd`, `env`
    (the provider's choice) and `started` (when the budget began, on `time.monotonic()`'s clock) are the hook
    process's: this process's by default."""
    from memd import settings as st

    prompt = (event.prompt or "").strip()
    if not prompt or prompt.startswith("/") or not home.search_db.exists():
        return None
    settings = settings if settings is not None else st.load(home.settings_file)  # the daemon's, read for this answer
    if not settings.memory.enabled:
        return None
    from memd.agent.recall import ask_nearest, recall
    from memd.clock import process_started, system_clock
    from memd.index.nearest import HOOK_WAIT_S
    from memd.index.search import open_readonly
    from memd.job.context import JobContext, make_context, make_llm

    clock = now or system_clock
    provider, _why = st.effective_provider(settings, env=env, memd_dir=home.memd_dir)
    key = memory_key(home, event, cwd)
    kept = _KEPT.get()  # the daemon's answer: its open connections
    if kept is None:
        ctx = make_context(home, settings, log=QUIET, now=clock)
    else:
        ctx = JobContext(home=home, settings=settings, conn=kept.state(), now=clock, log=QUIET, llm_factory=make_llm)
    ctx.deferred = _RECORDS.get()  # the daemon's answer: recall's surfaced set too waits until the hook has it
    deadline = (process_started() if started is None else started) + settings.memd.recall_budget_ms / 1000
    try:
        ctx.conn.execute(f"PRAGMA busy_timeout={HOOK_BUSY_MS}")
        # memd[semantic]: the daemon embeds the prompt (this process loads no model); [] when it does not serve.
        nearest = ask_nearest(home.memd_dir, prompt[:MAX_QUERY_CHARS], key, wait=HOOK_WAIT_S, deadline=deadline)
        search = open_readonly(home.search_db) if kept is None else None
        try:
            scope = None
            if kept is not None:
                search, scope = kept.scoped(key)
            assert search is not None
            result = recall(ctx, search, prompt[:MAX_QUERY_CHARS], project_key=key, session=event.session_id,
                            bodies=True, provider=provider, deadline=deadline, nearest=nearest, scope=scope)  # fmt: skip
        finally:
            if kept is None and search is not None:
                search.close()
            elif kept is not None:
                kept.end_read()
        moment = clock()
        n = len(result.memories)
        _record_quietly(home, ctx.conn, event.session_id, moment.date().isoformat(),
                        prompts=1, recalls=1 if n else 0, memories=n)  # fmt: skip
    finally:
        if kept is None:
            ctx.conn.close()
    if not result.memories:
        return None
    return answer("UserPromptSubmit", render_recalled(home, result.memories, moment, HOOK_MAX_CHARS))


# --------------------------------------------------------------------------- PreCompact


def pre_compact(home: Home, event: Event, *, now: Callable[[], datetime] | None = None,
                wait: float = PRECOMPACT_WAIT_SECONDS) -> None:  # fmt: skip
    """Make the session's summary current before the compaction, bounded; answer nothing.

    Leaves a summary request for the daemon (it runs the job within its next due-check), and starts
    the summary job at once (`memd run-now summary --force --no-wait`, detached) and waits for it
    at most `wait` seconds: the offline summary and a quick model finish within it, so the
    SessionStart after the compaction brings an up-to-date summary; a slow model call goes on in
    the background and the compacted session gets the last summary meanwhile. A daemon already
    summarising holds the lock: the job exits at once (75) and the daemon's run stands."""
    from memd.clock import iso, system_clock
    from memd.state import set_kv

    where = transcript_place(home, event)
    if where is None:
        raise ValueError("the transcript is not in this home")
    key, sid = where
    Place.session(key, sid)  # validates both as path components
    moment = (now or system_clock)()
    conn = _open_state(home)
    try:
        set_kv(conn, f"{SUMMARY_REQUEST}{key}:{sid}",
               json.dumps({"ts": iso(moment), "trigger": event.trigger or ""}))  # fmt: skip
        _record_quietly(home, conn, sid, moment.date().isoformat(), compacts=1)
    finally:
        conn.close()
    if wait > 0:
        summarise_now(home, key, sid, wait)
    return None


def summarise_now(home: Home, key: str, session_id: str, wait: float) -> int | None:
    """Run the session's summary job in a detached process; its exit code, or None when it is still
    running after `wait` seconds (it goes on; nothing waits for it). `-P`: the hook runs in the agent's project,
    and `-m` would put it first on the path, so a project's own `memd/` would run instead of this memd."""
    import subprocess

    cmd = [sys.executable, "-P", "-m", "memd", "--home", str(home.root), "run-now", "summary", "--project", key,
           "--session", session_id, "--force", "--no-wait"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    try:
        return proc.wait(wait)
    except subprocess.TimeoutExpired:
        return None


def take_summary_requests(conn: sqlite3.Connection) -> list[Place]:
    """The sessions whose summary a PreCompact hook asked for, removed from the state as taken.

    The daemon's due-check calls this and runs the summary job for each (forced:
    a compaction is the moment the summary matters, whatever the thresholds say).
    """
    rows = conn.execute("SELECT k FROM kv WHERE k >= ? AND k < ?", (SUMMARY_REQUEST, SUMMARY_REQUEST[:-1] + ";")).fetchall()
    out: list[Place] = []
    for (k,) in rows:
        conn.execute("DELETE FROM kv WHERE k = ?", (k,))
        key, _, sid = k[len(SUMMARY_REQUEST):].partition(":")
        try:
            out.append(Place.session(key, sid))
        except ValueError:
            continue
    return out
