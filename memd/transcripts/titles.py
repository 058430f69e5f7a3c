"""A session's title for people (`memd sessions`): the agent's own title when the transcript
holds one, else the session's first user prompt, shortened.

Read at display time from the transcript's head and tail (bounded: a title costs at most
`HEAD_BYTES + TAIL_BYTES` of reading, whatever the session's size), so the ledger keeps no
copy of prompt text. Titles the agent writes: Claude Code's `custom-title` (a name the user
gave) and `summary` records, MewCode's `<session>.meta` `title` (its seed §1: title, message and
token counts, times). The text is one line without control characters; `None` when there is nothing
to show. A `.meta` that is not a JSON object with a string title is ignored, and said once through
the caller's `warn` (one line naming the file): a title is never worth a failed listing.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memd.transcripts.formats import COMMAND_PREFIXES, text_of

HEAD_BYTES = 64 << 10
TAIL_BYTES = 32 << 10
WIDTH = 60
TITLE_MARKS = (b'"custom-title"', b'"summary"')


def shorten(text: str, width: int = WIDTH) -> str:
    """One line of at most `width` characters, controls out, an ellipsis where it was cut."""
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


def _read(path: Path) -> tuple[bytes, bytes]:
    """The file's head and its tail, each cut to whole lines (the tail empty when the head is all)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device put in a transcript's place: never read
            return b"", b""
        size = st.st_size
        head = f.read(HEAD_BYTES)
        tail = b""
        if size > HEAD_BYTES:
            head = head[: head.rfind(b"\n") + 1]  # cut mid-line
            f.seek(max(HEAD_BYTES, size - TAIL_BYTES))
            tail = f.read(TAIL_BYTES)
            tail = tail[tail.find(b"\n") + 1 :]  # the first is cut mid-line
    return head, tail


def _lines_with(buf: bytes, mark: bytes) -> Iterator[bytes]:
    """The lines of `buf` holding `mark`, in order: found with `bytes.find`, so the lines without it
    (nearly all of a transcript) are never split out or parsed."""
    at = buf.find(mark)
    while at >= 0:
        start = buf.rfind(b"\n", 0, at) + 1
        end = buf.find(b"\n", at)
        end = len(buf) if end < 0 else end
        yield buf[start:end]
        at = buf.find(mark, end)


def _record(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    with contextlib.suppress(ValueError):
        rec = json.loads(line)
        return rec if isinstance(rec, dict) else None
    return None


def _prompt(rec: dict[str, Any]) -> str | None:
    """The text of a human prompt record (not a tool result, meta line, summary or command wrapper)."""
    if rec.get("type") != "user" or rec.get("isMeta") or rec.get("isCompactSummary") or rec.get("isSidechain"):
        return None
    msg = rec.get("message")
    content = msg.get("content") if isinstance(msg, dict) else rec.get("content")
    text = text_of(content).strip()
    if not text or text.startswith(COMMAND_PREFIXES) or text.startswith("/"):
        return None
    return text


def _own_title(rec: dict[str, Any]) -> str | None:
    if rec.get("type") == "custom-title" and isinstance(rec.get("customTitle"), str):
        return str(rec["customTitle"])
    if rec.get("type") == "summary" and isinstance(rec.get("summary"), str):
        return str(rec["summary"])
    return None


Warn = Callable[[str], None]


def meta_title(path: Path, warn: Warn | None = None) -> str | None:
    """MewCode keeps its title beside the transcript, in `<session>.meta`; None without one. A
    malformed file (not JSON, not an object, a title that is not a string) is ignored, with one
    `warn` line; an absent, linked or unreadable one silently."""
    meta = path.with_suffix(".meta")
    try:
        if not meta.is_file() or meta.is_symlink():
            return None
        raw = meta.read_bytes()[: HEAD_BYTES + 1]
    except OSError:
        return None
    data: Any = None
    why = f"over {HEAD_BYTES} bytes" if len(raw) > HEAD_BYTES else None
    if why is None:
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            why = "not JSON"
    if why is None and not isinstance(data, dict):
        why = "not a JSON object"
    elif why is None and not isinstance(data.get("title"), (str, type(None))):
        why = "its title is not a string"
    if why is not None:
        if warn is not None:
            warn(f"{meta}: {why}; its title is ignored")
        return None
    title = data.get("title") if isinstance(data, dict) else None
    return title if isinstance(title, str) and title.strip() else None


def session_title(path: Path, warn: Warn | None = None) -> str | None:
    """The title `memd sessions` shows: the last title record, else MewCode's meta title, else the
    first prompt; `None` for an unreadable file or one with none of those. `warn` hears of a
    malformed `.meta` (`meta_title`)."""
    try:
        head, tail = _read(path)
    except OSError:
        return None
    own: str | None = None
    for buf in (head, tail):
        for mark in TITLE_MARKS:
            for line in _lines_with(buf, mark):
                rec = _record(line)
                own = (_own_title(rec) if rec else None) or own
    prompt = next((p for line in _lines_with(head, b'"user"') if (rec := _record(line)) and (p := _prompt(rec))), None)
    title = own or meta_title(path, warn) or prompt
    return shorten(title) if title and title.strip() else None
