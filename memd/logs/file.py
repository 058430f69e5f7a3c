"""memd's log file: one private, size-rotated file that two processes may append to.

`configure` (memd.logs.events) builds its handler with `private_rotating_handler`; a path that
is not a regular file (a symlink, a FIFO, a directory) raises `UnusableFile` and memd
logs to stderr only.

The rotation is `logging.handlers.RotatingFileHandler`'s (`memd.jsonl` → `.1` → … → `.N`, the
oldest dropped, a file rolled over before a line would take it past `max_bytes`), written here on
`logging.FileHandler`: `logging.handlers` imports socket, select, queue and their kin for its
network and queue handlers, 28 M instructions (5-7 ms here) of every command that logs, for a
rotation of twenty lines.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import stat
from pathlib import Path

from memd.fsutil import PRIVATE_FILE, UnusableFile, kind_of

__all__ = ["PrivateRotatingFileHandler", "private_rotating_handler"]


class PrivateRotatingFileHandler(logging.FileHandler):
    """Size-rotated, 0600, never through a symlink, and tolerant of a second writer.

    `memd run-now` in a shell and the daemon both append to the same file
    (O_APPEND keeps each line whole). If the other process rotated, our
    descriptor points at the renamed file: reopen the new one instead of
    rotating a second time.
    """

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.max_bytes = max_bytes
        self.backups = backups
        self._formatted: tuple[logging.LogRecord, str] | None = None
        # errors: a path whose bytes are not UTF-8 (surrogate escapes) is written as `\udcNN`, not a logging error
        super().__init__(path, mode="a", encoding="utf-8", errors="backslashreplace")

    def _open(self) -> io.TextIOWrapper:
        # O_NONBLOCK: a FIFO planted as the log would block the open until a reader came (a
        # command hung, a daemon kept its lock and ignored SIGTERM); only a regular file is used.
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(self.baseFilename, flags | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE)
        except OSError as exc:
            if exc.errno in (errno.ENXIO, errno.ELOOP, errno.EISDIR, errno.EOPNOTSUPP):
                what = "a symlink" if exc.errno == errno.ELOOP else "a FIFO or socket" if exc.errno != errno.EISDIR else "a directory"
                raise UnusableFile(f"{self.baseFilename}: {what}, not a regular file; memd writes its log only to one") from None
            raise
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise UnusableFile(f"{self.baseFilename}: {kind_of(mode)}, not a regular file; memd writes its log only to one")
        try:
            if mode & 0o777 != PRIVATE_FILE:
                os.fchmod(fd, PRIVATE_FILE)
        except OSError:
            pass
        stream = os.fdopen(fd, "a", encoding=self.encoding or "utf-8", errors=self.errors)
        assert isinstance(stream, io.TextIOWrapper)
        return stream

    def _moved(self) -> bool:
        if self.stream is None:
            return False
        try:
            disk = os.stat(self.baseFilename)
        except FileNotFoundError:
            return True
        return not os.path.samestat(disk, os.fstat(self.stream.fileno()))

    def format(self, record: logging.LogRecord) -> str:
        """The record's line, made once: `should_roll_over` formats a record to size it and `emit`
        formats it again, each time through the whole pipeline (redaction included). The
        formatter is pure for one record (structlog's works on a copy), so the second is the first."""
        last = self._formatted
        if last is not None and last[0] is record:
            return last[1]
        text = super().format(record)
        self._formatted = (record, text)
        return text

    def should_roll_over(self, record: logging.LogRecord) -> bool:
        """Whether the record's line would take the file to `max_bytes` or past (as RotatingFileHandler
        counts it: characters, the newline included). The stream is a regular file (`_open`)."""
        if self.stream is None:  # here, inside `emit`'s handling (as RotatingFileHandler opens it)
            self.stream = self._open()
        if self.max_bytes <= 0:
            return False
        self.stream.seek(0, os.SEEK_END)
        return self.stream.tell() + len(self.format(record)) + 1 >= self.max_bytes

    def roll_over(self) -> None:
        """`.N-1` → `.N`, …, `.1` → `.2`, the file → `.1` (what was `.N` is dropped), then a new file."""
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        if self.backups > 0:
            for i in range(self.backups - 1, 0, -1):
                older, newer = f"{self.baseFilename}.{i}", f"{self.baseFilename}.{i + 1}"
                if os.path.exists(older):
                    if os.path.exists(newer):
                        os.remove(newer)
                    os.rename(older, newer)
            first = f"{self.baseFilename}.1"
            if os.path.exists(first):
                os.remove(first)
            if os.path.exists(self.baseFilename):
                os.rename(self.baseFilename, first)
        self.stream = self._open()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self._moved() and self.stream is not None:
                moved, self.stream = self.stream, None  # a reopen that fails leaves none: the next line tries again
                moved.close()
                self.stream = self._open()
            if self.should_roll_over(record):
                self.roll_over()
        except Exception:
            self.handleError(record)
            return
        super().emit(record)


def private_rotating_handler(path: Path, max_bytes: int, backups: int) -> PrivateRotatingFileHandler:
    return PrivateRotatingFileHandler(path, max_bytes, backups)
