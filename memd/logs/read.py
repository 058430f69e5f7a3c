"""Reading memd's log back: `memd logs` and its filters, the rotated files, `--follow`.

Records are the JSON lines `memd.logs.events` writes to `memd/logs/memd.jsonl` (and its
rotations `.1` … `.5`). Reading is best effort: a malformed line is skipped, a file
rotated away mid-read is skipped, and a FIFO planted as the log is refused, never
waited on. `make_filter` is pure, so `memd logs` and `memd status` share it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from memd.fsutil import open_regular
from memd.logs.events import LEVELS, level_no
from memd.tree import Home

__all__ = [
    "follow_log",
    "log_files",
    "make_filter",
    "parse_line",
    "parse_ts",
    "read_log",
]


def log_files(home: Home) -> list[Path]:
    """The current log and its rotations, oldest first (memd.jsonl.5 … .1, memd.jsonl)."""
    base = home.log_file
    rotated: list[tuple[int, Path]] = []
    try:
        for entry in os.scandir(base.parent):
            suffix = entry.name[len(base.name) + 1:]
            if entry.name.startswith(base.name + ".") and suffix.isdigit():
                rotated.append((int(suffix), Path(entry.path)))
    except OSError:
        return []
    files = [p for _, p in sorted(rotated, reverse=True)]
    if base.exists():
        files.append(base)
    return files


def parse_ts(value: object) -> datetime | None:
    """A record's `ts` as an aware UTC datetime, or None if absent or unparsable."""
    if not isinstance(value, str):
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def make_filter(
    *, job: str | None = None, level: str | None = None, since: datetime | None = None
) -> Callable[[dict[str, Any]], bool]:
    """A predicate over records. `level` is a minimum (warning keeps warning, error, critical);
    a naive `since` is taken as UTC. Pure, so `memd logs` and `memd status` share it."""
    min_level = level_no(level) if level else None
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)

    def keep(rec: dict[str, Any]) -> bool:
        if job is not None and rec.get("job") != job:
            return False
        if min_level is not None:
            name = str(rec.get("level", "")).lower()
            if name not in LEVELS or level_no(name) < min_level:
                return False
        if since is not None:
            ts = parse_ts(rec.get("ts"))
            if ts is None or ts < since:
                return False
        return True

    return keep


def parse_line(line: bytes | str) -> dict[str, Any] | None:
    """One record, or None for a malformed line (a crash mid-write, a hand edit)."""
    try:
        rec = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


def _records(lines: Iterable[bytes], keep: Callable[[dict[str, Any]], bool]) -> Iterator[dict[str, Any]]:
    for line in lines:
        rec = parse_line(line)
        if rec is not None and keep(rec):
            yield rec


def read_log(
    home: Home, *, job: str | None = None, level: str | None = None, since: datetime | None = None
) -> Iterator[dict[str, Any]]:
    """Every record in the current and rotated logs, oldest first, malformed lines skipped.

    A file rotated away while we read it is skipped, never an error: logs are
    best-effort history, the state database is the record of truth.
    """
    keep = make_filter(job=job, level=level, since=since)
    for path in log_files(home):
        try:
            with os.fdopen(open_regular(path), "rb") as fh:  # a FIFO as the log: one line, never a hang
                yield from _records(fh, keep)
        except FileNotFoundError:
            continue


def follow_log(
    home: Home,
    *,
    job: str | None = None,
    level: str | None = None,
    since: datetime | None = None,
    from_start: bool = False,
    poll_interval: float = 0.5,
    should_stop: Callable[[], bool] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[dict[str, Any]]:
    """`memd logs --follow`: records as they are appended, surviving rotation.

    Starts at the end of the current file (or, with `from_start`, with every
    record already logged). Polls rather than watches so it works on any file
    system. A line is yielded only once its newline is written. On rotation the
    old file is drained before the new one is opened. Stops when `should_stop()`
    returns true (checked every poll); otherwise runs until the consumer stops.
    """
    keep = make_filter(job=job, level=level, since=since)
    tail = _Tail(home.log_file)
    if from_start:
        for path in log_files(home)[:-1] if home.log_file.exists() else log_files(home):
            try:
                with os.fdopen(open_regular(path), "rb") as fh:
                    yield from _records(fh, keep)
            except FileNotFoundError:
                continue
    tail.open(at_end=not from_start)
    try:
        while True:
            yield from _records(tail.read_lines(), keep)
            if should_stop is not None and should_stop():
                return
            sleep(poll_interval)
    finally:
        tail.close()


class _Tail:
    """A poll-based `tail -F` of one path: complete lines only, reopened on rotation or truncation."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh: IO[bytes] | None = None
        self.partial = b""

    def open(self, *, at_end: bool) -> None:
        try:
            self.fh = os.fdopen(open_regular(self.path), "rb")
        except FileNotFoundError:
            self.fh = None
            return
        if at_end:
            self.fh.seek(0, os.SEEK_END)

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None

    def _replaced(self) -> bool:
        assert self.fh is not None
        try:
            disk = os.stat(self.path)
        except FileNotFoundError:
            return False  # mid-rotation: keep draining the old file, look again next poll
        mine = os.fstat(self.fh.fileno())
        return not os.path.samestat(disk, mine) or disk.st_size < self.fh.tell()

    def _drain(self) -> list[bytes]:
        assert self.fh is not None
        data = self.partial + self.fh.read()
        *lines, self.partial = data.split(b"\n")
        return [ln for ln in lines if ln.strip()]

    def read_lines(self) -> list[bytes]:
        if self.fh is None:
            self.open(at_end=False)  # created since: everything in it is new
            if self.fh is None:
                return []
        lines = self._drain()
        if self._replaced():
            lines += self._drain()
            if self.partial.strip():
                lines.append(self.partial)  # the old file is finished; its last line is whole or never will be
            self.partial = b""
            self.close()
            self.open(at_end=False)
            if self.fh is not None:
                lines += self._drain()
        return lines
