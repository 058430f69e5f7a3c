"""The index job: MEMORY.md, the drawer render and the search rows of one memory scope.

Triggered by any change in a memory directory (memd's own writes and hand edits
alike) and by the daemon's periodic reconcile; cheap when nothing changed (no
writes). Problems (unparseable files, symlinks, oversize, duplicate names) and an
over-budget index are recorded for `memd status`, and the files are left in place.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from stat import S_ISREG

from memd.discovery import list_memory_dirs
from memd.fsutil import ensure_private_dir, shown, sweep_stale_temps, temp_names
from memd.job.context import JobContext, RunResult
from memd.tree import Place

NAME = "index"
TRIGGER = "any change in a memory directory (within a second), and a periodic reconcile"
NEEDS_MODEL = False
TARGET_KINDS: tuple[str, ...] = ("project", "global")
HAS_THRESHOLDS = False  # run-now without a target runs every scope
READS_SESSIONS = False  # `memd run-now index` reads no transcript: the ledger is not brought up to date first


def scopes(target: Place) -> list[Place]:
    return [Place.global_()] if target.kind == "global" else [Place.project(target.key or "")]


def targets(ctx: JobContext) -> list[Place]:
    """Every memory directory's scope, and the projects with MewCode sessions of their own (whose
    `.mewcode/memory/` search holds, `memd.write.mewcode`)."""
    from memd.ledger.outside import outside_keys  # noqa: PLC0415 - start-up

    out = [Place("global") if s == "global" else Place("project", k) for s, k, _p in list_memory_dirs(ctx.home)]
    return out + [p for p in (Place.project(k) for k in outside_keys(ctx.conn, ctx.home)) if p not in out]


def due(ctx: JobContext, only: Place | None = None) -> list[Place]:
    """Nothing is due by threshold: the index follows events and the reconcile."""
    return []


def unlocked(ctx: JobContext, target: Place) -> RunResult | None:
    """`run`'s outcome, told without the scope's lock when the run would change nothing (the runner asks
    first, `memd.job.runner.run_job`); None: run it under the lock. It holds only when the directory's
    nothing-changed record still vouches for it (`memd.index.refresh.recorded_outcome`), no temporary a
    writer left lies in a directory the run sweeps, the search database's daily check is not due, hand
    edits are not committed (`git` off) and `memd status` already shows the recorded problems: then the
    run would write nothing, and this writes nothing either (the run record and its log lines aside).
    Without the lock a check of 21 scopes imports no locking and takes no lock file (issue 27).

    Only for a context that keeps one search writer for its runs (`memd run-now`): the record is read
    through the writer the locked run would then use, whose open may have made, remade or set aside the
    database and so fills it from every directory at its first sync. The daemon's runs each open their own
    writer, and one opened here and closed would forget that (the next opens an empty file as a current
    one): they take the lock as before."""
    if ctx.settings.memd.git or not ctx.keep_search:
        return None
    place = Place.memory(target.key if target.kind == "project" else None)
    directory = place.memory_dir(ctx.home)
    if target.kind == "global":
        due = _search_db_due(ctx, search_db_stat(ctx.home.search_db))
        if directory.is_symlink() or due or _temps(ctx.home.root, f".{ctx.home.drawer_render.name}."):
            return None
        if not ctx.home.memd_dir.is_symlink() and _temps(ctx.home.memd_dir, "."):
            return None
    elif ctx.home.memory_link(target.key):
        return None
    listed = _listing(directory)
    if listed is None or _temps(directory, ".", listed):
        return None
    from memd.index.refresh import recorded_outcome  # noqa: PLC0415 - start-up

    result = recorded_outcome(ctx.home, ctx.settings, place, ctx.now().date(), listing=listed,
                              index=ctx.search_index())  # fmt: skip
    if result is None:
        return None
    reported = [*result.problems, *result.notes]
    if not shown_problems(ctx, str(target), [(shown(p.path), p.reason) for p in reported], result.index_warning):
        return None
    for p in result.problems:  # said at every run, as `run` says them
        ctx.log.warning("memory.unreadable", file=shown(p.path), reason=p.reason)
    details = {"memories": result.memories, "problems": len(result.problems), "changed": False,
               "drawer": result.drawer_mode, "temp_files_swept": 0, "no_front_matter": len(result.notes),
               "index_run": None, "held_seconds": 0.0}  # fmt: skip
    return RunResult("ok", details=details)


def _temps(directory: Path, only: str, listed: list[str] | None = None) -> bool:
    """Whether `directory` holds a writer's temporary that `sweep_temp_files(directory, …, only)` would look
    at, stale or not (or cannot be listed): the run under the lock sweeps or waits for its writer."""
    if listed is None:
        listed = _listing(directory)
        if listed is None:
            return os.path.lexists(directory)  # absent: nothing to sweep; unreadable: the run under the lock
    return bool(temp_names(listed, _starting(only)))


def _starting(only: str) -> Callable[[str], bool]:
    """The temporaries `sweep_temp_files(…, only)` looks at: those whose name starts with `only`."""
    return lambda name: name.startswith(only)


def _search_db_due(ctx: JobContext, ident: list[list[int] | None] | None) -> bool:
    """Whether the drawer's run checks the whole search database now, its file being `ident`
    (`search_db_stat`): when not, the database's pages are vouched for as that check would vouch for them."""
    from memd.index.writer import SearchIndex  # noqa: PLC0415 - start-up
    from memd.state import get_kv  # noqa: PLC0415 - start-up

    if quick_check_due(get_kv(ctx.conn, QUICK_CHECK_KEY), ident, ctx.now().timestamp()):
        return True
    SearchIndex.pages_vouched(ctx.home.search_db)
    return False


def run(ctx: JobContext, target: Place, force: bool) -> RunResult:
    if target.kind == "global":
        directory, scope, key = ctx.home.global_memory, "global", None
        if directory.is_symlink():  # never written through (as a link at memd/): MEMORY.md would land elsewhere
            return RunResult("skipped", f"{directory} is a symlink; not followed")
        ensure_private_dir(directory)
    else:
        directory, scope, key = ctx.home.project_memory(target.key or ""), "project", target.key
        if link := ctx.home.memory_link(key):  # as in discovery (tree.list_memory_dirs): not followed out of the tree
            return RunResult("skipped", f"{link} is a symlink; not followed")
        if not directory.is_dir():
            _mewcode(ctx, target)  # a project's own `.mewcode/memory/` is recalled even before memd has any
            return RunResult("skipped", "no memory directory")
    swept = 0
    if target.kind == "global":
        _check_search_db(ctx)  # (seconds at 50,000 memories when due: before the listing, which must be fresh)
        # the drawer render's temporary files sit in the home, memd's own in memd/
        swept += sweep_temp_files(ctx.home.root, ctx.now().timestamp(), only=f".{ctx.home.drawer_render.name}.")
        if not ctx.home.memd_dir.is_symlink():  # never through a link (memd's own directory)
            swept += sweep_temp_files(ctx.home.memd_dir, ctx.now().timestamp())

    if ctx.settings.memd.git:  # hand edits become the user's commit (`memd.git.commits.enabled`)
        from memd.git.commits import after_index  # noqa: PLC0415 - start-up: git's modules only when it is on
        after_index(ctx.home, target, ctx.settings)
    # One listdir for the sweep and the nothing-changed check, taken last: a memory made before it is in the
    # check's names; one made after it sets off another run (the daemon's rerun of a running job).
    listed = _listing(directory)
    here = sweep_temp_files(directory, ctx.now().timestamp(), listed=listed)
    swept += here
    if here or listed is None:
        listed = None  # names went: the refresh lists again
    from memd.history.writes import refresh_recorded  # noqa: PLC0415 - start-up (not memd.write.apply: its classifier's patterns)
    place = Place.memory(key if scope == "project" else None)
    result = refresh_recorded(ctx.home, ctx.settings, place, ctx.now(), hold=ctx.hold_index is not None, listing=listed,
                              index=ctx.search_index())  # fmt: skip
    ctx.index_held(place, result.index_held)
    reported = [*result.problems, *result.notes]  # a file without front matter is a memory, said so (§14)
    record_problems(ctx, str(target), [(shown(p.path), p.reason) for p in reported], result.index_warning)
    for p in result.problems:
        ctx.log.warning("memory.unreadable", file=shown(p.path), reason=p.reason)
    details = {"memories": result.memories, "problems": len(result.problems), "changed": result.changed,
               "drawer": result.drawer_mode, "temp_files_swept": swept,
               "no_front_matter": len(result.notes), "index_run": result.index_run,
               "held_seconds": round(result.index_held, 1)}  # fmt: skip
    return RunResult("ok", details=details)


def _mewcode(ctx: JobContext, target: Place) -> None:
    """A project without a memory directory of memd's: its own `.mewcode/memory/` (MewCode's recall
    directory) in search all the same (`memd.write.mewcode`; with one, `refresh_scope` does it)."""
    if target.kind == "project":
        from memd.write import mewcode  # noqa: PLC0415 - start-up

        mewcode.index_project_memory(ctx, target.key or "")


# `PRAGMA quick_check` of the whole search database (every page, indexes and the FTS tables too) at a
# drawer refresh is skipped while the file is the one the last passing check saw, for at most a day:
# a write, a copy cut short or garbage written into it changes its stat and is checked at once; damage
# that changes no stat (a bad sector) is found within the day, and any read of a damaged page sets the
# database aside meanwhile (`SearchIndex._recovering`, `check_pages` on the unchanged path).
QUICK_CHECK_EVERY_SECONDS = 24 * 3600.0
QUICK_CHECK_KEY = "index:search_db_checked"
SETTLED_SECONDS = 2.0  # a stat younger than this may hide a second write in the same clock tick: not vouched for


def search_db_stat(path: Path) -> list[list[int] | None] | None:
    """The identity of the database and its WAL as stat fields (None for an absent or empty WAL: a
    reader such as `memd list` or a hook leaves an empty one at its close, the writer's close removes
    it, and neither holds a page); None when the database itself cannot be stat'ed."""
    out: list[list[int] | None] = []
    for p in (path, Path(f"{path}-wal")):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            if p == path:
                return None
            out.append(None)
            continue
        except OSError:
            return None
        if p != path and st.st_size == 0 and S_ISREG(st.st_mode):
            out.append(None)
            continue
        out.append([st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
    return out


def quick_check_due(recorded: str | None, ident: list[list[int] | None] | None, now: float) -> bool:
    """Whether the drawer refresh runs the whole-file check: always unless `recorded` (the last
    passing check's `{"ident", "at"}`) saw this very file less than a day ago."""
    if recorded is None or ident is None:
        return True
    try:
        last = json.loads(recorded)
        return bool(last["ident"] != ident or not 0 <= now - float(last["at"]) < QUICK_CHECK_EVERY_SECONDS)
    except (ValueError, TypeError, KeyError):
        return True


def settled(ident: list[list[int] | None], now: float) -> bool:
    """No file of `ident` was changed within SETTLED_SECONDS of `now` (its mtime and ctime, in ns)."""
    return all(f is None or now - max(f[3], f[4]) / 1e9 > SETTLED_SECONDS for f in ident)


def _check_search_db(ctx: JobContext) -> None:
    """The search database is a cache readers cannot repair (agents open it read-only): damage in a
    page no write touched (a bad sector, a copy cut short) is looked for here, at a drawer refresh
    and reconcile whose database is not the one the last passing check saw within a day, and a
    damaged database is set aside; the refresh rebuilds it from every memory directory
    (`searchindex`: a new database is filled whole on its first sync)."""
    from memd.index.schema import LAYOUT, problem, set_aside  # noqa: PLC0415 - start-up
    from memd.index.writer import SearchIndex  # noqa: PLC0415 - start-up
    from memd.state import set_kv  # noqa: PLC0415 - start-up

    now = ctx.now().timestamp()
    ident = search_db_stat(ctx.home.search_db)  # before the check: a write during it makes the next one check
    if not _search_db_due(ctx, ident):  # (vouched: the scopes' unchanged checks need not read its rows again)
        return
    why = problem(ctx.home.search_db)
    if why is not None and not why.startswith(LAYOUT):
        ctx.drop_search()  # a writer kept open on it would go on writing into the file set aside
        set_aside(ctx.home.search_db, why)
        return
    if why is None and search_db_stat(ctx.home.search_db) == ident:  # every page read just now, the file unchanged since
        SearchIndex.pages_vouched(ctx.home.search_db)
    if why is None and ident is not None and settled(ident, now):
        try:
            set_kv(ctx.conn, QUICK_CHECK_KEY, json.dumps({"ident": ident, "at": now}))
        except sqlite3.OperationalError:  # a busy ledger: the next refresh checks again
            pass


def _listing(directory: Path) -> list[str] | None:
    """The directory's names (None when it cannot be listed: each reader then lists and says why)."""
    try:
        return os.listdir(directory)
    except OSError:
        return None


def sweep_temp_files(directory: Path, now: float, only: str = ".", listed: list[str] | None = None) -> int:
    """Remove what a writer killed mid-write left: `.<name>.<random>.tmp` files of atomic_write
    (MEMORY.md's and memory files' in a memory directory; with `only`, just those whose name
    starts so, as the drawer render's `.memory.md.` in the home), once stale (fsutil). Never anything else."""
    return sweep_stale_temps(directory, now, _starting(only), listed)


def shown_problems(ctx: JobContext, scope: str, problems: list[tuple[str, str]], warning: str | None) -> bool:
    """Whether state holds exactly these problems of this scope (what `record_problems` would leave)."""
    rows = ctx.conn.execute("SELECT source, path, reason FROM problems WHERE source IN (?, ?)",
                            (f"memory:{scope}", f"index:{scope}")).fetchall()  # fmt: skip
    want = {(f"memory:{scope}", path): reason for path, reason in problems}  # the table's key: the last one stays
    if warning:
        want[(f"index:{scope}", scope)] = warning
    return len(rows) == len(want) and all(want.get((source, path)) == reason for source, path, reason in rows)


def record_problems(ctx: JobContext, scope: str, problems: list[tuple[str, str]], warning: str | None) -> None:
    """Replace this scope's problems in state, so `memd status` shows the current ones."""
    from memd.clock import iso  # noqa: PLC0415 - start-up

    now = iso(ctx.now())
    source = f"memory:{scope}"
    ctx.conn.execute("BEGIN IMMEDIATE")
    try:
        ctx.conn.execute("DELETE FROM problems WHERE source IN (?, ?)", (source, f"index:{scope}"))
        ctx.conn.executemany(
            "INSERT OR REPLACE INTO problems(source, path, reason, seen_at) VALUES (?,?,?,?)",
            [(source, path, reason, now) for path, reason in problems],
        )
        if warning:
            ctx.conn.execute(
                "INSERT OR REPLACE INTO problems(source, path, reason, seen_at) VALUES (?,?,?,?)",
                (f"index:{scope}", scope, warning, now),
            )
        ctx.conn.execute("COMMIT")
    except BaseException:
        ctx.conn.execute("ROLLBACK")
        raise
