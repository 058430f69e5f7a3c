"""memd's log file: one private, size-rotated file that two processes may append to.

`configure` (memd.logs.events) builds its handler with `private_rotating_handler`; a path that
is not a regular file (a symlink, a FIFO, a directory) raises `UnusableFile` and memd
logs to stderr only. `logging.handlers` is imported only when the handler is built.
"""

from __future__ import annotations

import errno
import io
import logging
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from memd.fsutil import PRIVATE_FILE, UnusableFile, kind_of

if TYPE_CHECKING:
    from logging.handlers import RotatingFileHandler

__all__ = ["private_rotating_handler"]


def private_rotating_handler(path: Path, max_bytes: int, backups: int) -> RotatingFileHandler:
    from logging.handlers import RotatingFileHandler  # noqa: PLC0415 - start-up: the rotating handler only when a log file is kept

    class PrivateRotatingFileHandler(RotatingFileHandler):
        """Size-rotated, 0600, never through a symlink, and tolerant of a second writer.

        `memd run-now` in a shell and the daemon both append to the same file
        (O_APPEND keeps each line whole). If the other process rotated, our
        descriptor points at the renamed file: reopen the new one instead of
        rotating a second time.
        """

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
                if os.fstat(fd).st_mode & 0o777 != PRIVATE_FILE:
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

        _formatted: tuple[logging.LogRecord, str] | None = None

        def format(self, record: logging.LogRecord) -> str:
            """The record's line, made once: `shouldRollover` formats a record to size it and `emit`
            formats it again, each time through the whole pipeline (redaction included). The
            formatter is pure for one record (structlog's works on a copy), so the second is the first."""
            last = self._formatted
            if last is not None and last[0] is record:
                return last[1]
            text = super().format(record)
            self._formatted = (record, text)
            return text

        def emit(self, record: logging.LogRecord) -> None:
            try:
                if self._moved() and self.stream is not None:
                    self.stream.close()
                    self.stream = self._open()
            except OSError:
                self.handleError(record)
                return
            super().emit(record)

    # errors: a path whose bytes are not UTF-8 (surrogate escapes) is written as `\udcNN`, not a logging error
    return PrivateRotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8",
                                      errors="backslashreplace")  # fmt: skip
