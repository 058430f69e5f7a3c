"""Keep the derived views of memory directories current: MEMORY.md, the drawer render, search.

The thin I/O layer around the pure renders of `memd.index.render` (SPEC §6): scan a
directory, render, and write each file only when its text changed, so an
unchanged directory costs a scan and no writes (and watchers of those files
see no spurious events). Callers hold the directory's lock; nothing here locks.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, tzinfo
from pathlib import Path
from typing import Any

import structlog

from memd.discovery import list_memory_dirs
from memd.fsutil import UnusableFile, atomic_write, kind_of, read_regular
from memd.index.render import render_drawer, render_memory_index
from memd.index.writer import SearchIndex, SyncStats, sweep_stale_view_temps
from memd.memory.file import Memory
from memd.memory.names import INDEX_NAME
from memd.memory.scan import DEFAULT_MAX_FILE_BYTES, Problem, scan_dir
from memd.settings import Settings
from memd.tree import Home

log = structlog.get_logger("memd.indexer")


@dataclass
class RefreshResult:
    """What one directory's refresh found and did."""

    problems: list[Problem] = field(default_factory=list)
    index_warning: str | None = None
    changed: bool = False
    index_written: bool = False
    drawer_written: bool = False
    drawer_mode: str | None = None
    search: SyncStats | None = None
    memories: int = 0


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


def _write_view(path: Path, text: str, result: RefreshResult, what: str) -> bool:
    sweep_stale_view_temps(path, datetime.now(UTC).timestamp())  # a killed earlier write's leftovers (I/O edge)
    try:
        written = write_if_changed(path, text)
    except OSError as exc:
        result.problems.append(Problem(path, f"{what} not written: {exc.strerror or exc}"))
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
) -> None:
    """MEMORY.md of the directory, and for the drawer its injection render."""
    rendered = render_memory_index(memories)
    result.index_warning = rendered.warning
    if write_index and directory.is_dir():
        result.index_written = _write_view(directory / INDEX_NAME, rendered.text, result, "index")
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
) -> tuple[list[Memory], RefreshResult]:
    scanned = scan_dir(directory, scope, key, max_bytes=max_file_bytes, known=known)
    result = RefreshResult(problems=list(scanned.problems), memories=len(scanned.memories))
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
) -> RefreshResult:
    """Refresh one memory directory: MEMORY.md, the drawer render (global only), search rows.

    `today`/`tz` date the drawer entries; both default to UTC, like memd's
    clock (`memd.clock`), so an injected `today` and the mtimes agree;
    `write_index`/`write_drawer` follow `indexConsolidation.enabled` and
    `global.enabled` (§8). The search DB is always kept current. Pass an open
    `index` to reuse a connection; otherwise one is opened for this call.
    """
    owned = index is None
    db = SearchIndex.for_home(home) if index is None else index
    try:
        memories, result = _scan_and_render(
            home,
            scope,
            key,
            Path(directory),
            max_bytes_drawer=max_bytes_drawer,
            today=today,
            tz=tz,
            write_index=write_index,
            write_drawer=write_drawer,
            max_file_bytes=max_file_bytes,
            known=db.known(scope, key),
        )
        result.search = db.sync({(scope, key): memories})
    finally:
        if owned:
            db.close()
    result.changed = result.index_written or result.drawer_written or result.search.changed
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


def refresh_place(home: Home, settings: Settings, place: Any, today: date) -> Any:
    """One memory directory's indexes as the settings want them (§6, §8): the one refresh entry
    (jobs, the history's undo, migrations, sync) and the one place that reads those settings."""
    return refresh_dir(
        home, place.kind, place.key, place.memory_dir(home),
        max_bytes_drawer=int(settings.memory.global_.max_bytes), today=today,
        write_index=bool(settings.memory.index_consolidation.enabled),
        write_drawer=bool(settings.memory.global_.enabled),
    )  # fmt: skip
