"""Keep the derived views of memory directories current: MEMORY.md, the drawer render, search.

The thin I/O layer around the pure renders of `memd.index.render` (SPEC §6): scan a
directory, render, and write each file only when its text changed, so an
unchanged directory costs a scan and no writes (and watchers of those files
see no spurious events). Callers hold the directory's lock; nothing here locks.

MEMORY.md is shared with the agent (SPEC §14, Claude Code's auto-memory and `/memory`): `write_index`
keeps every line memd did not write, swaps the new file in with an atomic exchange and merges a
write the agent made between memd's read and its swap; a caller that passes `record` (a history
recorder's `before`) makes such a rewrite undoable.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memd.discovery import list_memory_dirs
from memd.fsutil import PRIVATE_FILE, UnusableFile, atomic_write, durable_temp, fsync_dir, kind_of, read_regular
from memd.index import fingerprint
from memd.index.hold import index_hold, quiet_seconds, transcript_keys
from memd.index.writer import SearchIndex, SyncStats, sweep_stale_view_temps
from memd.logs.lazy import lazy_logger
from memd.memory.names import DEFAULT_MAX_FILE_BYTES, INDEX_NAME
from memd.settings import Settings
from memd.tree import Home

if TYPE_CHECKING:
    from memd.index.render import IndexRender
    from memd.memory.file import Memory
    from memd.memory.scan import Problem

log = lazy_logger("memd.indexer")  # structlog through memd.logs (without rich), on first use


@dataclass
class RefreshResult:
    """What one directory's refresh found and did."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[Problem] = field(default_factory=list)  # files used, with a word (no front matter)
    index_warning: str | None = None
    changed: bool = False
    index_written: bool = False
    drawer_written: bool = False
    drawer_mode: str | None = None
    search: SyncStats | None = None
    memories: int = 0
    index_run: str | None = None  # the history run that kept MEMORY.md's bytes before its rewrite
    index_held: float = 0.0  # seconds a due rewrite of MEMORY.md waits for the agent to go quiet (memd.index.hold)


def _current_bytes(path: Path) -> bytes | None:
    """The file's bytes, or None when absent; never follows a symlink, never opens a FIFO or
    device (`fsutil.read_regular`: a FIFO planted as MEMORY.md would block the read forever)."""
    try:
        return read_regular(path, follow=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def write_if_changed(path: Path, text: str) -> bool:
    """Atomically replace `path` with `text` unless it already holds exactly that.

    A symlink in its place is refused (OSError), like every atomic write, and so is anything
    else that is not a regular file (a FIFO, a socket, a directory): one line, left as it is.
    """
    if path.is_symlink():
        raise OSError(f"{path}: is a symlink; not replaced")
    try:
        mode = path.lstat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        raise UnusableFile(f"{path}: {kind_of(mode)}, not a regular file; not replaced")
    data = text.encode("utf-8")
    if _current_bytes(path) == data:
        return False
    atomic_write(path, data)
    return True


Record = Callable[[Path], None]  # keeps a file's bytes in the history before memd replaces it
INDEX_ATTEMPTS = 5  # merges retried when an agent keeps writing MEMORY.md under memd


def _check_replaceable(path: Path) -> int | None:
    """The mode of the regular file at `path`, None when absent; a link or a non-file refused."""
    if path.is_symlink():
        raise OSError(f"{path}: is a symlink; not replaced")
    try:
        mode = path.lstat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(mode):
        raise UnusableFile(f"{path}: {kind_of(mode)}, not a regular file; not replaced")
    return stat.S_IMODE(mode)


def _exchange(tmp: Path, path: Path) -> bool:
    """Swap `tmp` and `path` in one step (Linux `renameat2(RENAME_EXCHANGE)`); False where the
    system or the file system cannot, so the caller falls back to compare-then-rename."""
    import ctypes  # noqa: PLC0415 - start-up: only when an index is written

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(tmp), at_fdcwd, os.fsencode(path), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(path))


def _put(path: Path, data: bytes, live: bytes | None, mode: int) -> tuple[bytes | None, bool]:
    """Replace `path` (believed to hold `live`) with `data`. Returns (None, True) when done; else
    the bytes an agent wrote there meanwhile and whether `data` went in anyway (the swap did).

    The swap is atomic and hands back the file it replaced, so a write between memd's read and
    its rename is seen, not lost. A new file is linked in place only if still absent.
    """
    tmp = durable_temp(path, data, mode)
    try:
        if live is None:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return _current_bytes(path) or b"", False
            except OSError:  # a file system without hard links: the compare-then-rename of the fallback
                if _current_bytes(path) is not None:
                    return _current_bytes(path) or b"", False
                os.replace(tmp, path)
        elif _exchange(tmp, path):
            replaced = read_regular(tmp, follow=False)
            if replaced != live:
                return replaced, True
        else:
            now = _current_bytes(path)
            if now != live:
                return (b"" if now is None else now), False
            os.replace(tmp, path)
    finally:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        fsync_dir(path.parent)
    return None, True


@dataclass(frozen=True)
class IndexWrite:
    """What writing one MEMORY.md did: the render, whether it was written, merges, a hold."""

    render: IndexRender
    written: bool
    merges: int = 0  # agent writes found under memd's own and merged in
    held: float = 0.0  # a due rewrite not made: seconds until the agent is quiet (memd.index.hold)


Hold = Callable[[], float]  # seconds a due rewrite of MEMORY.md should still wait (memd.index.hold); 0: now


def write_index(path: Path, memories: Sequence[Memory], *, record: Record | None = None,
                hold: Hold | None = None) -> IndexWrite:  # fmt: skip
    """MEMORY.md from `memories`, keeping every line memd did not write (SPEC §14).

    Read, merge (`render_memory_index(existing=…)`), swap in; if the file changed between the
    read and the swap (Claude Code's auto-memory or `/memory` writing it), merge what it wrote
    and swap again. When the file holds lines memd did not write, `record` keeps its bytes in
    the history first, so the rewrite is undoable. The file's mode is kept (0600 when new).
    `hold` is asked only when the file would change: a positive answer leaves it as it is (the
    daemon, while an agent is at work in the project) and is returned as `held`.
    """
    from memd.index.render import render_memory_index  # noqa: PLC0415 - start-up: a nothing-changed check renders nothing

    mode = _check_replaceable(path)
    live = source = _current_bytes(path)
    recorded = wrote = False
    merges = 0
    while True:
        existing = None if source is None else source.decode("utf-8", "surrogateescape")
        rendered = render_memory_index(memories, existing=existing)
        data = rendered.text.encode("utf-8", "surrogateescape")
        if data == live:
            return IndexWrite(rendered, written=wrote, merges=merges)
        if hold is not None and not wrote and (left := hold()) > 0:
            return IndexWrite(rendered, written=False, merges=merges, held=left)
        if rendered.foreign and record is not None and not recorded:
            record(path)
            recorded = True
        seen, went_in = _put(path, data, live, PRIVATE_FILE if mode is None else mode)
        wrote = wrote or went_in
        if seen is None:
            return IndexWrite(rendered, written=True, merges=merges)
        merges += 1
        if merges >= INDEX_ATTEMPTS:
            raise OSError(f"{path}: changed under memd {merges} times in a row; left for the next run")
        log.info("index.merged_agent_write", path=str(path), attempt=merges)
        source, live = seen, (data if went_in else seen)


def _write_index(path: Path, memories: Sequence[Memory], result: RefreshResult, record: Record | None,
                 hold: Hold | None) -> IndexRender:  # fmt: skip
    sweep_stale_view_temps(path, datetime.now(UTC).timestamp())  # a killed earlier write's leftovers (I/O edge)
    try:
        done = write_index(path, memories, record=record, hold=hold)
    except OSError as exc:
        from memd.index.render import render_memory_index  # noqa: PLC0415 - start-up

        result.problems.append(_problem(path, f"index not written: {exc.strerror or exc}"))
        log.warning("view.write_failed", path=str(path), what="index", error=str(exc))
        return render_memory_index(memories)
    result.index_written = done.written
    result.index_held = done.held
    if done.held:
        log.info("view.held", path=str(path), what="index", seconds=round(done.held, 1))
    if done.written:
        log.info("view.written", path=str(path), what="index", kept=done.render.kept, merges=done.merges)
    return done.render


def _write_view(path: Path, text: str, result: RefreshResult, what: str) -> bool:
    sweep_stale_view_temps(path, datetime.now(UTC).timestamp())  # a killed earlier write's leftovers (I/O edge)
    try:
        written = write_if_changed(path, text)
    except OSError as exc:
        result.problems.append(_problem(path, f"{what} not written: {exc.strerror or exc}"))
        log.warning("view.write_failed", path=str(path), what=what, error=str(exc))
        return False
    if written:
        log.info("view.written", path=str(path), what=what, bytes=len(text.encode("utf-8")))
    return written


def _render_views(
    home: Home,
    scope: str,
    directory: Path,
    memories: list[Memory],
    result: RefreshResult,
    *,
    max_bytes_drawer: int,
    today: date,
    tz: tzinfo | None,
    write_index: bool,
    write_drawer: bool,
    record: Record | None = None,
    hold: Hold | None = None,
) -> None:
    """MEMORY.md of the directory, and for the drawer its injection render."""
    from memd.index.render import render_drawer, render_memory_index  # noqa: PLC0415 - start-up

    if write_index and directory.is_dir():
        rendered = _write_index(directory / INDEX_NAME, memories, result, record, hold)
    else:
        rendered = render_memory_index(memories)
    result.index_warning = rendered.warning
    if scope == "global" and write_drawer and (directory.is_dir() or home.drawer_render.exists()):
        drawer = render_drawer(memories, max_bytes=max_bytes_drawer, today=today, tz=tz)
        result.drawer_mode = drawer.mode
        result.drawer_written = _write_view(home.drawer_render, drawer.text, result, "drawer render")


def _scan_and_render(
    home: Home,
    scope: str,
    key: str | None,
    directory: Path,
    *,
    max_bytes_drawer: int,
    today: date | None,
    tz: tzinfo | None,
    write_index: bool,
    write_drawer: bool,
    max_file_bytes: int,
    known: dict[str, Memory] | None = None,
    record: Record | None = None,
    hold: Hold | None = None,
) -> tuple[list[Memory], RefreshResult]:
    from memd.memory.scan import scan_dir  # noqa: PLC0415 - start-up: a nothing-changed check reads no file

    scanned = scan_dir(directory, scope, key, max_bytes=max_file_bytes, known=known)
    result = RefreshResult(problems=list(scanned.problems), memories=len(scanned.memories),
                           notes=list(scanned.notes))  # fmt: skip
    _render_views(
        home,
        scope,
        directory,
        scanned.memories,
        result,
        max_bytes_drawer=max_bytes_drawer,
        today=today or datetime.now(UTC).date(),
        tz=tz,
        write_index=write_index,
        write_drawer=write_drawer,
        record=record,
        hold=hold,
    )
    return scanned.memories, result


def refresh_dir(
    home: Home,
    scope: str,
    key: str | None,
    directory: Path,
    *,
    max_bytes_drawer: int = 8192,
    index: SearchIndex | None = None,
    today: date | None = None,
    tz: tzinfo | None = UTC,
    write_index: bool = True,
    write_drawer: bool = True,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    record: Record | None = None,
    also: Sequence[Memory] = (),
    hold: Hold | None = None,
    listing: list[str] | None = None,
) -> RefreshResult:
    """Refresh one memory directory: MEMORY.md, the drawer render (global only), search rows.

    `today`/`tz` date the drawer entries; both default to UTC, like memd's
    clock (`memd.clock`), so an injected `today` and the mtimes agree;
    `write_index`/`write_drawer` follow `indexConsolidation.enabled` and
    `global.enabled` (§8). The search DB is always kept current. Pass an open
    `index` to reuse a connection; otherwise one is opened for this call. `record` (a history
    recorder's `before`) is called before a MEMORY.md holding lines memd did not write is
    rewritten (`write_index`). `also`: memories kept in search under this scope that live elsewhere
    (a MewCode project's own `.mewcode/memory/`, `memd.write.mewcode`): in no view, only in search.
    `hold`: the daemon's wait for a quiet agent before MEMORY.md changes (`memd.index.hold`); a held
    rewrite keeps no fingerprint record, so the next refresh renders again. `listing`: the directory's
    names as the caller listed them just before (the index job's sweep), for the nothing-changed check
    (one `listdir` for both); the check after a full refresh lists again.
    """
    owned = index is None
    db = SearchIndex.for_home(home) if index is None else index
    directory = Path(directory)
    day = today or datetime.now(UTC).date()
    params = _params(scope, day, write_index=write_index, write_drawer=write_drawer, max_bytes_drawer=max_bytes_drawer,
                     max_file_bytes=max_file_bytes, tz=tz, also=also)  # fmt: skip
    views = _views(home, scope)
    try:
        state = fingerprint.state_digest(directory, params, views, listing)
        same = _unchanged(db, scope, key, state)
        if same is not None:  # debug: the index job's `job.finished` line says the same (a check of 21 scopes wrote 63 lines)
            log.debug("memory_dir.refreshed", scope=scope, key=key, memories=same.memories, problems=len(same.problems),
                      changed=False, index_warning=same.index_warning, unchanged=True)  # fmt: skip
            return same
        memories, result = _scan_and_render(
            home,
            scope,
            key,
            directory,
            max_bytes_drawer=max_bytes_drawer,
            today=day,
            tz=tz,
            write_index=write_index,
            write_drawer=write_drawer,
            max_file_bytes=max_file_bytes,
            known=db.known(scope, key),
            record=record,
            hold=hold,
        )
        result.search = db.sync({(scope, key): [*memories, *also]})
        result.changed = result.index_written or result.drawer_written or result.search.changed
        if state is not None and not result.changed and not result.index_held and fingerprint.state_digest(directory, params, views) == state:
            _keep_record(db, scope, key, state, result)
    finally:
        if owned:
            db.close()
    log.info(
        "memory_dir.refreshed",
        scope=scope,
        key=key,
        memories=result.memories,
        problems=len(result.problems),
        changed=result.changed,
        index_warning=result.index_warning,
    )
    return result


def _params(scope: str, day: date, *, write_index: bool, write_drawer: bool, max_bytes_drawer: int, max_file_bytes: int,
            tz: tzinfo | None, also: Sequence[Memory]) -> dict[str, Any]:  # fmt: skip
    """What a refresh's outcome depends on besides the files (digested with their stats): the views' settings,
    the drawer's day, the memories kept in search from elsewhere."""
    return {"index": write_index, "drawer": write_drawer, "drawer_bytes": max_bytes_drawer, "file_bytes": max_file_bytes,
            "tz": str(tz), "today": day.isoformat() if scope == "global" else None,
            "also": sorted([str(m.path), m.size, m.mtime] for m in also)}  # fmt: skip


def _views(home: Home, scope: str) -> list[Path]:
    """The renders a refresh of `scope` writes besides MEMORY.md (the drawer's injection render)."""
    return [home.drawer_render] if scope == "global" else []


def _problem(path: Path, reason: str) -> Problem:
    """A `memd.memory.scan.Problem` (the scan's modules load with the first one: a nothing-changed check
    of directories without problems needs none)."""
    from memd.memory.scan import Problem  # noqa: PLC0415 - start-up

    return Problem(path, reason)


def _unchanged(db: SearchIndex, scope: str, key: str | None, state: str | None) -> RefreshResult | None:
    """The recorded outcome when nothing a refresh depends on changed since it was recorded
    (`memd.index.fingerprint`), else None. Reads neither the directory's files nor its rows."""
    if state is None:
        return None
    rec, rows = _recorded(db, scope, key)
    return _outcome(rec, rows, state)


def _recorded(db: SearchIndex, scope: str, key: str | None) -> tuple[dict[str, Any] | None, list[int]]:
    """The directory's record (None: none, or not one of ours) and its rows' count and ids' sum, from one
    snapshot. A row updated or deleted since the record was made dropped it (schema.RECORD_TRIGGERS); one
    added or replaced (INSERT OR REPLACE fires no delete trigger) changed the count or the ids' sum."""
    db.check_pages()  # damage anywhere in the table is still found, as the full sync finds it (then: a new, empty db)
    text, rows = db.record_and_rows(fingerprint.record_key(scope, key), scope, key)
    return fingerprint.read_record(text), rows


def _outcome(rec: dict[str, Any] | None, rows: list[int], state: str | None) -> RefreshResult | None:
    """The outcome `rec` recorded when it vouches for the directory whose digest is `state` and whose rows
    are `rows`, else None."""
    if rec is None or state is None or rec["state"] != state or rows != rec["rows"]:
        return None
    out = rec["outcome"]
    try:
        problems = [_problem(Path(p), str(r)) for p, r in out["problems"]]
        notes = [_problem(Path(p), str(r)) for p, r in out["notes"]]
        return RefreshResult(problems=problems, notes=notes, index_warning=out["warning"], changed=False,
                             drawer_mode=out["drawer_mode"], search=SyncStats(unchanged=int(out["memories"])),
                             memories=int(out["memories"]))  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


def _keep_record(db: SearchIndex, scope: str, key: str | None, state: str, result: RefreshResult) -> None:
    """Record a refresh that found nothing to change (see `memd.index.fingerprint`)."""
    outcome = {"problems": [[str(p.path), p.reason] for p in result.problems],
               "notes": [[str(p.path), p.reason] for p in result.notes], "warning": result.index_warning,
               "drawer_mode": result.drawer_mode, "memories": result.memories}  # fmt: skip
    rows = db.scope_rows(scope, key)
    db.set_meta(fingerprint.record_key(scope, key), fingerprint.make_record(state, rows, outcome))


def refresh_all(
    home: Home,
    *,
    max_bytes_drawer: int = 8192,
    index: SearchIndex | None = None,
    today: date | None = None,
    tz: tzinfo | None = UTC,
    write_index: bool = True,
    write_drawer: bool = True,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> dict[tuple[str, str | None], RefreshResult]:
    """Refresh every memory directory of the home, then sync search in one transaction.

    The single sync prunes rows of directories that no longer exist, so a
    deleted project disappears from search too. Every result's `search` is that
    one sync's stats (for the whole home), so `changed` is true for every
    directory when any search row changed.
    """
    results: dict[tuple[str, str | None], RefreshResult] = {}
    by_dir: dict[tuple[str, str | None], list[Memory]] = {}
    owned = index is None
    db = SearchIndex.for_home(home) if index is None else index
    try:
        for scope, key, directory in list_memory_dirs(home):
            memories, result = _scan_and_render(
                home,
                scope,
                key,
                directory,
                max_bytes_drawer=max_bytes_drawer,
                today=today,
                tz=tz,
                write_index=write_index,
                write_drawer=write_drawer,
                max_file_bytes=max_file_bytes,
                known=db.known(scope, key),
            )
            results[(scope, key)] = result
            by_dir[(scope, key)] = memories
        stats = db.sync(by_dir, prune=True)
    finally:
        if owned:
            db.close()
    for result in results.values():
        result.search = stats
        result.changed = result.index_written or result.drawer_written or stats.changed
    return results


def recorded_outcome(home: Home, settings: Settings, place: Any, today: date, *, index: SearchIndex,
                     listing: list[str] | None = None) -> RefreshResult | None:  # fmt: skip
    """What `refresh_place` would return, when its nothing-changed check holds (the directory's record
    still vouches for it, `memd.index.fingerprint`), else None. Reads only stats and search.sqlite's record
    and row count, and writes no memory file, view or row: a caller without the scope's lock may ask (the
    index job's pre-check, `jobs.index.unlocked`). `index`: the writer the caller's refreshes use, open (its
    open may have made, remade or set aside the database: its first sync then fills it from every directory,
    which a writer opened here and closed would forget). The record is read (one snapshot with the rows)
    before the stats are taken (`listing`, the names, may be older): a write racing the answer changes the
    stats or drops the record (then None), or comes after the answer, true when the stats were taken."""
    kind, key = place.kind, place.key
    rec, rows = _recorded(index, kind, key)
    if rec is None:  # the usual case after memd's own write (a refresh that wrote keeps no record): no stat taken
        return None
    params = _params(kind, today, also=(), tz=UTC, **_view_settings(settings))
    return _outcome(rec, rows, fingerprint.state_digest(place.memory_dir(home), params, _views(home, kind), listing))


def _view_settings(settings: Settings) -> dict[str, Any]:
    """The settings a refresh's views follow (§6, §8): read in this one place."""
    return {"max_bytes_drawer": int(settings.memory.global_.max_bytes),
            "write_index": bool(settings.memory.index_consolidation.enabled),
            "write_drawer": bool(settings.memory.global_.enabled),
            "max_file_bytes": DEFAULT_MAX_FILE_BYTES}  # fmt: skip


def refresh_place(home: Home, settings: Settings, place: Any, today: date, *, record: Record | None = None,
                  also: Sequence[Memory] = (), hold_at: datetime | None = None,
                  listing: list[str] | None = None, index: SearchIndex | None = None) -> Any:  # fmt: skip
    """One memory directory's indexes as the settings want them (§6, §8): the one refresh entry
    (jobs, the history's undo, migrations, sync) and the one place that reads those settings.
    `hold_at` (the daemon's jobs): a project's MEMORY.md waits for its agent to go quiet, as of then.
    `listing`: the directory's names as the caller just listed them, `index`: an open search index
    writer to use (`refresh_dir`)."""
    return refresh_dir(
        home, place.kind, place.key, place.memory_dir(home), today=today, record=record, also=also,
        hold=None if hold_at is None else agent_hold(home, settings, place, hold_at), listing=listing, index=index,
        **_view_settings(settings),
    )  # fmt: skip


def agent_hold(home: Home, settings: Settings, place: Any, now: datetime) -> Hold | None:
    """The daemon's wait before it rewrites a project's MEMORY.md under an agent at work
    (`memd.index.hold`); None for the drawer, which no agent edits, or when it is switched off."""
    quiet = quiet_seconds(settings.memd.agent_quiet_seconds)
    if place.kind != "project" or quiet <= 0:
        return None
    key = place.key or ""

    def hold() -> float:
        dirs = [home.projects / k for k in sorted(transcript_keys(home.projects, home.state_db, key))]
        return index_hold(dirs, home.project_memory(key) / INDEX_NAME, now.timestamp(), quiet)

    return hold
