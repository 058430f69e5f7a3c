"""Complete lines of a transcript from a byte offset, in linear time and bounded memory (SPEC §7).

`LineReader` / `read_lines(path, offset)` yield complete lines from a byte offset. Bytes after the
last newline are never consumed: the writer may be mid-line. A line longer than `MAX_LINE` is never
held in memory: it is scanned for its newline and reported as skipped, and a reader that stops
inside one says how far it scanned, so the next read goes on from there instead of from the line's
start.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from typing import Any

# Lines are split while the chunk is still in the CPU's cache, and a chunk stays under glibc's
# mmap threshold (128 KiB): bigger reads were each mapped fresh and faulted in page by page, a
# tenth of a first scan's CPU time in system time (bench/RESULTS.md, "At the speed of the bytes").
CHUNK = 120 << 10
SCAN_CHUNK = 4 << 20  # a line over the limit is searched for its newline in these, into one buffer
MAX_LINE = 32 << 20  # a longer line is skipped (scanned for its newline, never held in memory)


@dataclass
class Line:
    """One complete line: its bytes, 1-based number, and the offset just past its newline.

    `skipped` is the length of a line longer than the limit; its `data` is then empty.
    """

    data: bytes
    number: int
    end: int
    skipped: int = 0


class LineReader:
    """Batches of complete lines from byte `offset`: `(lines, end, skipped)`.

    Each line keeps its newline (so its length is its span in the file); `end` is the offset just
    past the batch. A line longer than `limit` comes
    alone as `([], end, its_length)`; its bytes are scanned, never kept. Memory
    is one chunk plus at most `limit` bytes of a line being assembled, and every
    byte is read once. When the file ends inside a line longer than the limit,
    `tail_scan` is where the search for its newline stopped: pass it back as
    `resume` (with the same `offset`) to go on from there. `head` and `window` give back bytes
    it read (the file's first `keep_head` bytes; a range within its last two chunks).
    """

    def __init__(self, path: str | os.PathLike[str], offset: int, *, limit: int | None = None,
                 resume: int | None = None, keep_head: int = 0) -> None:  # fmt: skip
        self.path = path
        self.keep_head = keep_head
        self.head: bytes | None = None  # the file's first `keep_head` bytes, kept when the read began at 0
        self.offset = offset
        self.limit = MAX_LINE if limit is None else limit
        self.resume = resume if resume is not None and resume - offset > self.limit else None
        self.bytes_read = 0
        self.tail_scan: int | None = None
        # the last two chunks read, as (file offset, bytes), consecutive: `window` serves from them
        self._recent: list[tuple[int, bytes]] = []

    def __iter__(self) -> Iterator[tuple[list[bytes], int, int]]:
        limit = self.limit
        size = max(1, min(CHUNK, limit))  # a line inside one chunk is never over the limit
        pos = self.offset  # start of the line being assembled (or skipped)
        skipping = self.resume is not None
        fpos = self.resume if self.resume is not None else pos  # file offset of the next byte read
        parts: list[bytes] = []  # the line being assembled, when it began in an earlier chunk
        with open(self.path, "rb", buffering=0) as fh:
            fh.seek(fpos)
            read = fh.read
            while True:
                if skipping:
                    nl, fpos, chunk = self._scan(fh, fpos)
                    if nl < 0:
                        break
                    yield [], nl + 1, nl - pos
                    pos = base = nl + 1
                    skipping = False
                    self._recent = []  # the line skipped is not kept: a gap
                    if not chunk:
                        continue
                else:
                    chunk = read(size)
                    if not chunk:
                        break
                    base = fpos
                    fpos += len(chunk)
                    self.bytes_read += len(chunk)
                self._recent = [*self._recent[-1:], (base, chunk)]
                if base == 0:
                    self.head = chunk[: self.keep_head]
                lines, tail = split_lines(chunk)
                if not lines:  # no newline in this chunk: the line goes on
                    if fpos - pos > limit:
                        skipping, parts = True, []
                    elif tail:
                        parts.append(tail)
                    continue
                if parts:  # the first line began in an earlier chunk
                    length = base - pos + len(lines[0]) - 1  # without its newline
                    if length > limit:
                        yield [], pos + length + 1, length
                        del lines[0]
                    else:
                        parts.append(lines[0])
                        lines[0] = b"".join(parts)
                    parts = []
                pos = fpos - len(tail)
                if lines:
                    yield lines, pos, 0
                if tail:
                    parts = [tail]
        if skipping:
            self.tail_scan = fpos

    def window(self, start: int, end: int) -> bytes | None:
        """The file's bytes [start, end) if they were among the last two chunks this reader read
        (the ledger fingerprints what it read without reading it again), else None."""
        got = self._recent  # consecutive chunks: one range of the file
        if not got or start < got[0][0] or end > got[-1][0] + len(got[-1][1]) or start > end:
            return None
        return b"".join(data[max(start - base, 0) : max(end - base, 0)] for base, data in got)

    def _scan(self, fh: Any, fpos: int) -> tuple[int, int, bytes]:
        """Read on from `fpos` to the next newline, keeping nothing: (its offset, or -1 at the end of
        the file; the offset of the next byte to read; the bytes read after the newline)."""
        buf = bytearray(max(1, min(SCAN_CHUNK, self.limit)))  # so a line after the newline is within the limit
        while True:
            n = fh.readinto(buf)
            if not n:
                return -1, fpos, b""
            self.bytes_read += n
            i = buf.find(b"\n", 0, n)
            if i >= 0:
                return fpos + i, fpos + n, bytes(buf[i + 1 : n])
            fpos += n


def split_lines(chunk: bytes) -> tuple[list[bytes], bytes]:
    """The complete lines of `chunk`, each with its newline, and the bytes after the last newline.

    `BytesIO.readlines` finds each newline with memchr and makes the lines in C: a Python loop of
    `find` calls (the splitter before it) cost about 2.5× as much per line, and `bytes.split`
    looks at every byte in a loop of its own (bench/RESULTS.md, "First ingest, second round …")."""
    lines = BytesIO(chunk).readlines()
    if lines and lines[-1][-1] != 10:  # 10: b"\n"
        return lines, lines.pop()
    return lines, b""


def read_lines(
    path: str | os.PathLike[str], offset: int, first_line: int, *, limit: int | None = None
) -> Iterator[Line]:
    """Complete lines of `path` from byte `offset`, without their newline; `first_line` numbers
    the first one.

    A line longer than the limit comes as an empty `Line` with `skipped` set: counted, never loaded.
    """
    number = first_line
    end = offset
    for lines, batch_end, skipped in LineReader(path, offset, limit=limit):
        if skipped:
            yield Line(b"", number, batch_end, skipped)
            number += 1
            end = batch_end
            continue
        for data in lines:
            end += len(data)
            yield Line(data[:-1], number, end)
            number += 1
