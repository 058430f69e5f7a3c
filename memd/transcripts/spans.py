"""A span of conversation: the records of a transcript between two byte offsets,
reduced to what a model should see.

Jobs read from their cursor to the ledger's safe offset (§7.2: never past an
unanswered tool call). Compaction summaries and MewCode's inlined `keep` tail
are derived copies of lines memd reads anyway, so they are left out; sidechain
(sub-agent) lines are not the session's conversation. Pause commands are kept
as markers so the extraction and summary jobs can drop what was said while paused
(§3.4, `memd.ledger.pause.follow`): the one parser (`formats.pause_word`) reads
them in every form, Claude Code 2.1's `system/local_command` records included, and
a command piece carries only the command's name — never the text typed after it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from memd.transcripts.formats import detect_format, pause_word, slash_command, text_of
from memd.transcripts.lines import read_lines

Kind = Literal["human", "assistant", "tool_call", "tool_result", "command", "compaction"]
MAX_PIECE_CHARS = 4000


@dataclass
class Piece:
    """One thing said or done in the main thread, at a byte offset."""

    kind: Kind
    text: str
    end: int
    ts: str | None = None
    name: str | None = None  # tool name, or command name
    tool_input: Any = None
    is_error: bool = False
    uuid: str | None = None  # the record's uuid (Claude Code), for provenance
    parent: str | None = None  # the record's parentUuid (a pause echo answers its parent)
    echo: bool = False  # a pause command as "Unknown command: /x" (see formats.PauseWord)


@dataclass
class Span:
    """A run of transcript pieces, with the byte range they came from and their format."""

    pieces: list[Piece] = field(default_factory=list)
    start: int = 0
    end: int = 0
    fmt: str | None = None


def _clip(text: str, limit: int = MAX_PIECE_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[… {len(text) - limit} characters cut …]\n{text[-half:]}"


def read_span(path: str | os.PathLike[str], start: int, end: int, fmt: str | None = None) -> Span:
    """Pieces of the main thread between byte offsets `start` and `end` (a line boundary)."""
    span = Span(start=start, end=start, fmt=fmt)
    if end <= start:
        return span
    for line in read_lines(path, start, 1):
        if line.end > end:
            break
        span.end = line.end
        if line.skipped:  # longer than linereader.MAX_LINE: scanned past, never loaded
            continue
        try:
            rec = orjson.loads(line.data)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(rec, dict):
            continue
        if span.fmt is None:
            span.fmt = detect_format(rec)
        if span.fmt == "claude":
            _claude(rec, line.end, span.pieces)
        elif span.fmt == "mewcode":
            _mewcode(rec, line.end, span.pieces)
    return span


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return text_of(content)


def _human_or_command(text: str, ts: Any, end: int, out: list[Piece], plain_slash: bool) -> None:
    s = text.strip()
    if not s:
        return
    word = pause_word(s)
    if word is not None:  # the command's name only: text typed after it is never extracted
        out.append(Piece("command", word.command, end, ts, name=word.command, echo=word.echo))
        return
    if s.startswith("<command-") or (plain_slash and s.startswith("/")):
        out.append(Piece("command", s[:200], end, ts, name=slash_command(s) or s.split()[0]))
        return
    if s.startswith("<local-command-"):
        return
    out.append(Piece("human", _clip(s), end, ts))


def _claude(rec: dict[str, Any], end: int, out: list[Piece]) -> None:
    """The record's pieces, each carrying the record's uuid (provenance of what memd derives)."""
    first = len(out)
    _claude_pieces(rec, end, out)
    uid, parent = rec.get("uuid"), rec.get("parentUuid")
    for p in out[first:]:
        p.uuid = uid if isinstance(uid, str) else None
        p.parent = parent if isinstance(parent, str) else None


def _claude_pieces(rec: dict[str, Any], end: int, out: list[Piece]) -> None:
    t = rec.get("type")
    ts = rec.get("timestamp")
    ts = None if ts is None else str(ts)
    if t == "system" and rec.get("subtype") == "compact_boundary":
        out.append(Piece("compaction", "", end, ts))
        return
    if t == "system" and rec.get("subtype") == "local_command":  # Claude Code 2.1's slash commands
        content = rec.get("content")
        word = pause_word(content) if isinstance(content, str) else None  # as the fold reads it
        if word is not None:
            out.append(Piece("command", word.command, end, ts, name=word.command, echo=word.echo))
        return
    if t not in ("user", "assistant") or rec.get("isSidechain") is True:
        return
    msg = rec.get("message")
    if not isinstance(msg, dict) or rec.get("isCompactSummary") is True:
        return
    content = msg.get("content")
    if t == "assistant":
        _assistant_blocks(content, ts, end, out)
        return
    if isinstance(content, list):
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        for b in results:
            out.append(Piece("tool_result", _clip(_result_text(b.get("content"))), end, ts,
                             name=b.get("tool_use_id"), is_error=b.get("is_error") is True))  # fmt: skip
        if results:
            return
    if rec.get("isMeta") is True:
        return
    _human_or_command(text_of(content), ts, end, out, plain_slash=False)


def _assistant_blocks(content: Any, ts: str | None, end: int, out: list[Piece]) -> None:
    if isinstance(content, str):
        if content.strip():
            out.append(Piece("assistant", _clip(content), end, ts))
        return
    if not isinstance(content, list):
        return
    for b in content:
        if not isinstance(b, dict):
            continue
        if b.get("type") == "text" and isinstance(b.get("text"), str) and b["text"].strip():
            out.append(Piece("assistant", _clip(b["text"]), end, ts))
        elif b.get("type") == "tool_use":
            inp = b.get("input")
            out.append(Piece("tool_call", _clip(orjson.dumps(inp).decode("utf-8", "replace"), 1500), end, ts,
                             name=str(b.get("name") or "?"), tool_input=inp))  # fmt: skip


def _mewcode(rec: dict[str, Any], end: int, out: list[Piece]) -> None:
    t = rec.get("type")
    ts = rec.get("timestamp")
    ts = None if ts is None else str(ts)
    content = rec.get("content")
    if t == "user":
        _human_or_command(text_of(content), ts, end, out, plain_slash=True)
    elif t == "assistant":
        _assistant_blocks(content, ts, end, out)
    elif t == "tool_result":
        out.append(Piece("tool_result", _clip(_result_text(content)), end, ts,
                         name=rec.get("tool_use_id"), is_error=rec.get("is_error") is True))  # fmt: skip
    elif t in ("compression", "compact_boundary"):
        out.append(Piece("compaction", "", end, ts))


def render(pieces: list[Piece], budget_chars: int) -> str:
    """The pieces as a plain transcript for a prompt, within `budget_chars`.

    Over budget, tool output goes first (oldest first), then the oldest words
    of the user and the agent: what people said is what memory is made of.
    A marker says how much was left out.
    """
    kept = [p for p in pieces if p.kind != "compaction"]
    lines = [_line(p) for p in kept]
    total = sum(len(x) + 1 for x in lines)
    drop: set[int] = set()
    for tools_first in (True, False):
        for i, p in enumerate(kept):
            if total <= budget_chars:
                break
            if i in drop or (tools_first and p.kind not in ("tool_call", "tool_result")):
                continue
            drop.add(i)
            total -= len(lines[i]) + 1
    out = [line for i, line in enumerate(lines) if i not in drop]
    if drop:
        out.insert(0, f"[… {len(drop)} earlier messages omitted …]")
    return "\n".join(out)


def _line(p: Piece) -> str:
    if p.kind == "human":
        return f"USER: {p.text}"
    if p.kind == "assistant":
        return f"ASSISTANT: {p.text}"
    if p.kind == "tool_call":
        return f"TOOL CALL {p.name}: {p.text}"
    if p.kind == "tool_result":
        return f"TOOL RESULT{' (error)' if p.is_error else ''}: {p.text}"
    return f"COMMAND: {p.name}"
