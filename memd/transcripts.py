"""Incremental transcript reading for both formats (SPEC §7, §7.1–7.3).

The reader is split in two so each half is testable alone:

* `LineReader` / `read_lines(path, offset)` yield complete lines from a byte
  offset, in linear time and bounded memory. Bytes after the last newline are
  never consumed: the writer may be mid-line. A line longer than `MAX_LINE` is
  never held in memory: it is scanned for its newline and reported as skipped,
  and a reader that stops inside one says how far it scanned, so the next read
  goes on from there instead of from the line's start.
* `Folder` folds records into a `Tally` (per-session counters). It is a pure
  state machine: feeding the same records in any chunking gives the same tally,
  which is what lets a restart read only new bytes.

Claude Code lines are decoded with typed msgspec structs that read only the
fields the fold needs and skip the rest (most of a transcript's bytes: tool
results copied into `toolUseResult`, progress metadata, file snapshots). A line
the typed decode refuses (an odd type anywhere the fold looks, bad JSON, deep
nesting) goes the generic way: orjson, then the same fold on a normalised copy
(`_norm_record`), so both ways count alike. The one difference: a number beyond
a double's range in a field memd never reads no longer makes the line bad.

Counting rules (one place, documented in the README under `memd sessions`):

* human turn: a main-thread `user` record that is not a tool result, not
  `isMeta`, not `isCompactSummary`, and not a `<command-…>`/`<local-command-…>`
  wrapper (MewCode: a `user` record with text that is not a slash command);
* assistant turn: one API response of the main thread (distinct `message.id`;
  MewCode: one `assistant` record);
* tool call: a distinct main-thread `tool_use.id`; unanswered until a
  `tool_result` with that id arrives; an unanswered call is abandoned (no longer
  pending) once the conversation moves on past it: a later human turn, or a
  later assistant turn (a different `message.id`: parallel calls of one response
  share theirs, and their results may come after all of them); a call at the
  tail keeps waiting;
* safe offset (§7.2): the start of the line whose call is the oldest still
  pending, or the end of what was read when no call is pending;
* conversation tokens: characters of text, tool calls (name + JSON input) and
  tool results of the main thread, divided by four (§7.3); thinking, images and
  compaction summaries are not the conversation's own content;
* API usage: the last usage per `message.id`, sub-agents included; a copy in an
  `agent_progress` record counts only when no direct record of that id exists.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson

CHUNK = 256 << 10  # lines are split while the chunk is still in the CPU's cache
SCAN_CHUNK = 4 << 20  # a line over the limit is searched for its newline in these, into one buffer
MAX_LINE = 32 << 20  # a longer line is skipped (scanned for its newline, never held in memory)
PAUSE_COMMANDS = frozenset({"/pause-memory", "/memory-pause", "/toggle-memory"})
CLAUDE_ONLY_TYPES = frozenset(
    {"summary", "file-history-snapshot", "progress", "queue-operation", "last-prompt", "system"}
)
# Every record type Claude Code is known to write (SPEC §7.0); others are counted as unrecognised.
CLAUDE_TYPES = CLAUDE_ONLY_TYPES | {
    "user", "assistant", "attachment", "api-request", "api-request-blob", "api-request-shape", "cost-state",
    "atis-latch", "tools-used", "mode", "custom-title", "agent-name", "pr-link",
}  # fmt: skip
SYSTEM_SUBTYPES = frozenset(
    {"compact_boundary", "local_command", "api_error", "stop_hook_summary", "turn_duration", "informational"}
)
UNKNOWN_TYPES_CAP = 50  # distinct unrecognised names kept per session: a hostile file cannot grow state
MEWCODE_ONLY_TYPES = frozenset({"system_prompt", "tool_result", "compression", "compact_boundary"})
MEWCODE_TYPES = MEWCODE_ONLY_TYPES | {"user", "assistant"}
COMMAND_PREFIXES = ("<command-", "<local-command-")
PRIO_DIRECT = 1
PRIO_COPY = 0


# --------------------------------------------------------------------------- reading lines


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

    `end` is the offset just past the batch. A line longer than `limit` comes
    alone as `([], end, its_length)`; its bytes are scanned, never kept. Memory
    is one chunk plus at most `limit` bytes of a line being assembled, and every
    byte is read once. When the file ends inside a line longer than the limit,
    `tail_scan` is where the search for its newline stopped: pass it back as
    `resume` (with the same `offset`) to go on from there.
    """

    def __init__(self, path: str | os.PathLike[str], offset: int, *, limit: int | None = None,
                 resume: int | None = None) -> None:  # fmt: skip
        self.path = path
        self.offset = offset
        self.limit = MAX_LINE if limit is None else limit
        self.resume = resume if resume is not None and resume - offset > self.limit else None
        self.bytes_read = 0
        self.tail_scan: int | None = None

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
                    if not chunk:
                        continue
                else:
                    chunk = read(size)
                    if not chunk:
                        break
                    base = fpos
                    fpos += len(chunk)
                    self.bytes_read += len(chunk)
                lines = chunk.split(b"\n")
                tail = lines.pop()
                if not lines:  # no newline in this chunk: the line goes on
                    if fpos - pos > limit:
                        skipping, parts = True, []
                    elif tail:
                        parts.append(tail)
                    continue
                if parts:  # the first line began in an earlier chunk
                    length = base - pos + len(lines[0])
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


def read_lines(path: str | os.PathLike[str], offset: int, first_line: int, *, limit: int | None = None) -> Iterator[Line]:
    """Complete lines of `path` from byte `offset`; `first_line` numbers the first one.

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
            end += len(data) + 1
            yield Line(data, number, end)
            number += 1


# --------------------------------------------------------------------------- helpers


def detect_format(rec: dict[str, Any]) -> str | None:
    """'claude', 'mewcode', or None while a record does not tell."""
    if "message" in rec or "uuid" in rec or "sessionId" in rec:
        return "claude"
    t = rec.get("type")
    if not isinstance(t, str):  # a list or an object here would not even be hashable
        return None
    if t in MEWCODE_ONLY_TYPES or (t in ("user", "assistant") and "content" in rec):
        return "mewcode"
    if t in CLAUDE_ONLY_TYPES:
        return "claude"
    return None


def text_of(content: Any) -> str:
    """The plain text of a message content (a string, or `text` blocks of a list)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def slash_command(text: str) -> str | None:
    """The slash command a user record carries, if any (`<command-name>/x</command-name>` or `/x`)."""
    i = text.find("<command-name>")
    if i >= 0:
        j = text.find("</command-name>", i)
        if j > i:
            name = text[i + len("<command-name>") : j].strip()
            return name if name.startswith("/") else "/" + name
    stripped = text.strip()
    if stripped.startswith("/") and stripped[1:2].isalpha():
        return stripped.split(None, 1)[0]
    return None


def unknown_command(text: str) -> str | None:
    """`/x` from the line an agent without the command writes: "Unknown command: /x" (maybe wrapped
    in `<local-command-stdout>`), so a pause typed into such an agent is still honoured."""
    body = text.strip()
    if body.startswith("<local-command-stdout>"):
        body = body[len("<local-command-stdout>") :].removesuffix("</local-command-stdout>").strip()
    if body.startswith("Unknown command: /"):
        rest = body[len("Unknown command: ") :].split()
        return rest[0] if rest else None
    return None


def _result_chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        n = 0
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str):
                n += len(b["text"])
        return n
    return 0


def _input_chars(value: Any) -> int:
    """Characters of a tool input as compact JSON (what orjson writes for it as orjson reads it)."""
    try:
        out = orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits, as msgspec reads it: orjson reads it as a float
        try:
            out = orjson.dumps(orjson.loads(msgspec.json.encode(value)))
        except Exception:  # not measurable: counts nothing, as before
            return 0
    return len(out) if out.isascii() else len(out.decode("utf-8"))


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# A token count beyond this is not a count (and would overflow SQLite's 64-bit integers once summed).
MAX_COUNT = 1 << 40


def _count(v: Any) -> int:
    return v if v.__class__ is int and 0 <= v <= MAX_COUNT else 0


# --------------------------------------------------------------------------- typed records
#
# Only what the fold reads. A field of another type than declared makes the decode fail and the
# line go the generic way; `_norm_record` builds the same structs from orjson's dicts, mapping each
# odd value to one the fold treats exactly as it treated that value.


class _Usage(msgspec.Struct, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Block(msgspec.Struct, gc=False):
    type: str | None = None
    text: str | msgspec.UnsetType | None = msgspec.UNSET  # absent counts as "" in a user's text
    id: str | None = None
    name: str | None = None
    input: Any = None
    tool_use_id: str | None = None
    content: str | list[_Block] | None = None


class _Message(msgspec.Struct, gc=False):
    id: str | None = None
    content: str | list[_Block] | None = None
    usage: _Usage | None = None


class _Copy(msgspec.Struct, gc=False):
    """A sub-agent's message copied into a progress record: only its id and usage count."""

    id: str | None = None
    usage: _Usage | None = None


class _Inner(msgspec.Struct, gc=False):
    type: str | None = None
    message: _Copy | None = None


class _Data(msgspec.Struct, gc=False):
    type: str | None = None
    message: _Inner | None = None


class _Record(msgspec.Struct, gc=False):
    type: str | None = None
    timestamp: str | None = None
    isSidechain: Any = None  # the flags matter only as `is True`, agentId only as truthy
    isMeta: Any = None
    isCompactSummary: Any = None
    agentId: Any = None
    message: _Message | None = None
    data: _Data | None = None


class _PauseFields(msgspec.Struct, gc=False):
    timestamp: Any = None
    parentUuid: Any = None
    uuid: Any = None


_RECORD = msgspec.json.Decoder(_Record)
_PAUSE = msgspec.json.Decoder(_PauseFields)
_DICT_TYPES = frozenset({"system", "cost-state"})  # rare records the fold reads from orjson's dict
_DECODE_ERRORS = (msgspec.DecodeError, RecursionError)

# orjson refuses nesting deeper than this; msgspec's limit is the interpreter's recursion limit
# (Python ≤ 3.11: what is left of sys.getrecursionlimit(); later: the C recursion limit). Where
# msgspec could read deeper, a long line with that many brackets goes the generic way.
ORJSON_MAX_DEPTH = 1024
_TOO_DEEP = b'{"x":' + b"[" * ORJSON_MAX_DEPTH + b"]" * ORJSON_MAX_DEPTH + b"}"


def _msgspec_reads_too_deep() -> bool:
    try:
        _RECORD.decode(_TOO_DEEP)
    except _DECODE_ERRORS:
        return False
    return True


_C_DEEP = sys.version_info >= (3, 12) and _msgspec_reads_too_deep()


def _depth_guard() -> bool:
    return _C_DEEP or sys.getrecursionlimit() > ORJSON_MAX_DEPTH


def _too_deep(data: bytes) -> bool:
    return len(data) > 2 * ORJSON_MAX_DEPTH and data.count(b"[") + data.count(b"{") > ORJSON_MAX_DEPTH


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _norm_usage(u: Any) -> _Usage | None:
    if not isinstance(u, dict):
        return None
    return _Usage(*(v if v.__class__ is int else None for v in (
        u.get("input_tokens"), u.get("output_tokens"), u.get("cache_creation_input_tokens"),
        u.get("cache_read_input_tokens"))))  # fmt: skip


def _norm_blocks(content: Any) -> str | list[_Block] | None:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    out = []
    for b in content:
        if not isinstance(b, dict):
            continue
        text = b.get("text", msgspec.UNSET)
        if text is not msgspec.UNSET and not isinstance(text, str):
            text = None
        out.append(_Block(_opt_str(b.get("type")), text, _opt_str(b.get("id")), _opt_str(b.get("name")),
                          b.get("input"), _opt_str(b.get("tool_use_id")), _norm_blocks(b.get("content"))))  # fmt: skip
    return out


def _norm_record(d: dict[str, Any]) -> _Record:
    """The typed record of an orjson dict, odd values mapped to what the fold treats alike."""
    typ = d.get("type")
    if typ is not None and not isinstance(typ, str):
        typ = str(typ)  # counted as an unknown type by its text, as before (and never hashed as a list)
    ts = d.get("timestamp")
    if ts is not None and not isinstance(ts, str):
        ts = str(ts)
    msg = d.get("message")
    message = None
    if isinstance(msg, dict):
        message = _Message(_opt_str(msg.get("id")), _norm_blocks(msg.get("content")), _norm_usage(msg.get("usage")))
    data = d.get("data")
    norm_data = None
    if isinstance(data, dict):
        inner = data.get("message")
        norm_inner = None
        if isinstance(inner, dict):
            copy = inner.get("message")
            norm_copy = _Copy(_opt_str(copy.get("id")), _norm_usage(copy.get("usage"))) if isinstance(copy, dict) else None
            norm_inner = _Inner(_opt_str(inner.get("type")), norm_copy)
        norm_data = _Data(_opt_str(data.get("type")), norm_inner)
    return _Record(typ, ts, d.get("isSidechain"), d.get("isMeta"), d.get("isCompactSummary"), d.get("agentId"),
                   message, norm_data)  # fmt: skip


# --------------------------------------------------------------------------- the fold


@dataclass
class Tally:
    """Per-session counters, folded record by record (main thread) plus usage (all threads).

    `carry` fields (pending tool ids and since when, the open assistant message,
    where the scan of an over-long unterminated line got to) are what must
    survive a restart to continue exactly where the last read stopped.
    """

    records: int = 0
    human_turns: int = 0
    assistant_turns: int = 0
    tool_calls: int = 0
    conv_chars: int = 0
    compactions: int = 0
    last_compaction_offset: int | None = None
    paused: bool = False
    pause_toggled_ts: str | None = None
    pause_offset: int | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    safe_offset: int = 0
    safe_human_turns: int = 0
    safe_conv_chars: int = 0
    safe_tool_calls: int = 0
    natural_break: bool = False
    pending: list[str] = field(default_factory=list)
    pending_ts: str | None = None  # timestamp of the record whose call holds the safe offset back
    last_msg_id: str | None = None
    is_subagent: bool = False
    kind_decided: bool = False
    last_pause_uuid: str | None = None
    cost_state: tuple[int, int, int, int] | None = None
    unknown_types: dict[str, int] = field(default_factory=dict)
    # file (path under the home) -> [start of its over-long unterminated last line, scanned up to, fingerprint]
    long_tails: dict[str, list[Any]] = field(default_factory=dict)

    def to_carry(self) -> dict[str, Any]:
        carry: dict[str, Any] = {"pending": self.pending, "last_msg_id": self.last_msg_id, "last_pause_uuid": self.last_pause_uuid,
                 "cost_state": self.cost_state, "unknown_types": self.unknown_types}  # fmt: skip
        if self.pending and self.pending_ts is not None:
            carry["pending_ts"] = self.pending_ts
        if self.long_tails:
            carry["long_tails"] = self.long_tails
        return carry

    def note_unknown(self, name: str) -> None:
        if name in self.unknown_types or len(self.unknown_types) < UNKNOWN_TYPES_CAP:
            self.unknown_types[name] = self.unknown_types.get(name, 0) + 1


class UsageBook:
    """Last usage per `message.id` with source priority, plus running totals.

    `lookup` fetches an id seen in an earlier read (from state) so that an
    increment is applied as a delta and never double-counted.
    """

    def __init__(self, lookup: Any = None) -> None:
        self.entries: dict[str, tuple[int, tuple[int, int, int, int]]] = {}
        self.dirty: set[str] = set()
        self.total = [0, 0, 0, 0]
        self._lookup = lookup

    def _current(self, msg_id: str) -> tuple[int, tuple[int, int, int, int]] | None:
        got = self.entries.get(msg_id)
        if got is None and self._lookup is not None:
            got = self._lookup(msg_id)
            if got is not None:
                self.entries[msg_id] = got
        return got

    def put(self, msg_id: str, prio: int, new: tuple[int, int, int, int]) -> None:
        """Record the usage of a response; a later line of the same id replaces the earlier one."""
        old = self.entries.get(msg_id)
        if old is None and self._lookup is not None:
            old = self._current(msg_id)
        total = self.total
        if old is not None:
            if old[0] > prio or (old[0] == prio and old[1] == new):  # the usage each line of a response repeats
                return
            o = old[1]
            total[0] -= o[0]
            total[1] -= o[1]
            total[2] -= o[2]
            total[3] -= o[3]
        total[0] += new[0]
        total[1] += new[1]
        total[2] += new[2]
        total[3] += new[3]
        self.entries[msg_id] = (prio, new)
        self.dirty.add(msg_id)

    def add_anonymous(self, new: tuple[int, int, int, int]) -> None:
        """A usage without a message id cannot be deduplicated: it counts once as it is."""
        for i, v in enumerate(new):
            self.total[i] += v


class Folder:
    """Folds the records of one file into a Tally and a UsageBook.

    `seen_tool` answers whether a tool_use id was already counted (persisted
    between reads); `main` is False for sub-agent files, which only add usage.

    The safe point is taken when a call starts waiting (`_hold`: the start of the
    line that makes it, with the counters from before it) or, when nothing is
    pending, at `finish` (the end of what was read): no bookkeeping per record.
    """

    def __init__(self, tally: Tally, usage: UsageBook, seen_tool: Any, main: bool, fmt: str | None) -> None:
        self.t = tally
        self.u = usage
        self.seen_tool = seen_tool
        self.main = main
        self.fmt = fmt
        self.pending = set(tally.pending)
        self.new_tools: list[str] = []
        self._seen_here: set[str] = set()
        self._last_had_tool = not tally.natural_break
        self._end = tally.safe_offset

    # -- the hot loop -----------------------------------------------------------
    def fold(self, lines: list[bytes], start: int, bad: list[tuple[int, str]]) -> int:
        """Fold a batch of complete lines, the first starting at byte `start`.

        Returns how many lines parsed as JSON; an unparseable one is added to `bad`
        as (its index in the batch, orjson's reason).
        """
        typed = self.fmt == "claude"
        deep = _depth_guard()
        decode = _RECORD.decode
        claude = self._claude
        usage = self._usage
        main = self.main
        t = self.t
        records, first, last = t.records, t.first_ts, t.last_ts  # kept in locals while lines go typed
        blank, bad_before = 0, len(bad)
        pos = start
        for i, data in enumerate(lines):
            s = pos
            pos += len(data) + 1
            # msgspec checks neither the UTF-8 of strings it skips nor (see _depth_guard) every depth
            if typed and (data.isascii() or _utf8(data)) and not (deep and _too_deep(data)):
                try:
                    r = decode(data)
                except _DECODE_ERRORS:
                    pass
                else:
                    typ = r.type
                    if typ not in _DICT_TYPES:
                        if main:
                            records += 1
                            ts = r.timestamp
                            if ts is not None:
                                last = ts
                                if first is None:
                                    first = ts
                        if typ == "progress":  # most records: only a sub-agent's usage copy counts
                            d = r.data
                            if d is not None and d.type == "agent_progress":
                                inner = d.message
                                if inner is not None and inner.type == "assistant" and inner.message is not None:
                                    usage(inner.message, PRIO_COPY)
                        else:
                            claude(r, data, s, pos)
                        continue
            if not data or data.isspace():
                blank += 1
                continue
            try:
                rec = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                bad.append((i, str(exc).split(":", 1)[0][:120]))
                continue
            t.records, t.first_ts, t.last_ts = records, first, last
            self.feed(rec, pos, s)
            records, first, last = t.records, t.first_ts, t.last_ts
            typed = self.fmt == "claude"
        t.records, t.first_ts, t.last_ts = records, first, last
        self._end = pos
        return len(lines) - blank - (len(bad) - bad_before)

    def feed(self, rec: Any, end: int, start: int | None = None) -> None:
        """Fold one parsed record (orjson's value) ending at byte `end` (and starting at `start`)."""
        if rec.__class__ is not dict:
            return
        if self.fmt is None:
            self.fmt = detect_format(rec)
            if self.fmt is None:
                return
        if start is None:
            start = end
        if self.fmt == "claude":
            r = _norm_record(rec)
            if self.main:
                t = self.t
                t.records += 1
                if r.timestamp is not None:
                    if t.first_ts is None:
                        t.first_ts = r.timestamp
                    t.last_ts = r.timestamp
            self._claude(r, rec, start, end)
        else:
            self._mewcode(rec, start, end)
        self._end = end

    def finish(self, end: int | None = None) -> None:
        """Close a read that stopped at byte `end` (the end of the last complete line)."""
        if not self.main:
            return
        t = self.t
        t.pending = sorted(self.pending)
        if not self.pending:
            t.safe_offset = self._end if end is None else end
            t.safe_human_turns = t.human_turns
            t.safe_conv_chars = t.conv_chars
            t.safe_tool_calls = t.tool_calls
            t.pending_ts = None
        t.natural_break = not self._last_had_tool and t.assistant_turns > 0

    # -- pending calls ------------------------------------------------------------
    def _hold(self, ts: str | None, start: int) -> None:
        """A first call starts waiting: the safe point is the start of the line that makes it, with
        the counters as they were before that record."""
        t = self.t
        t.safe_offset = start
        t.safe_human_turns = t.human_turns
        t.safe_conv_chars = t.conv_chars
        t.safe_tool_calls = t.tool_calls
        t.pending_ts = ts

    def _abandon(self) -> None:
        """The conversation moved on past calls that never got a result: they wait no more."""
        self.pending.clear()

    def _assistant_blocks(self, blocks: list[_Block], ts: str | None, start: int) -> None:
        t = self.t
        pending = self.pending
        chars = 0
        calls = 0
        for b in blocks:
            bt = b.type
            if bt == "text":
                tx = b.text
                if isinstance(tx, str):
                    chars += len(tx)
            elif bt == "tool_use":
                self._last_had_tool = True
                if b.name is not None:
                    chars += len(b.name)
                chars += _input_chars(b.input)
                tid = b.id
                if not tid:
                    calls += 1
                elif tid not in pending and tid not in self._seen_here and not self.seen_tool(tid):
                    if not pending and self.main:
                        self._hold(ts, start)  # counters not yet moved by this record
                    pending.add(tid)
                    self._seen_here.add(tid)
                    self.new_tools.append(tid)
                    calls += 1
        t.conv_chars += chars
        t.tool_calls += calls

    # -- Claude Code / deepcode -------------------------------------------------
    def _claude(self, r: _Record, src: Any, start: int, end: int) -> None:
        """One record (counted, with its timestamp, by the caller)."""
        t = self.t
        typ = r.type
        main = self.main
        if main:
            if typ not in CLAUDE_TYPES:
                t.note_unknown(str(typ)[:64])
            if not t.kind_decided and (typ == "user" or typ == "assistant"):
                t.kind_decided = True
                t.is_subagent = r.isSidechain is True and bool(r.agentId)
        if typ == "progress":
            data = r.data
            if data is not None and data.type == "agent_progress":
                inner = data.message
                if inner is not None and inner.type == "assistant" and inner.message is not None:
                    self._usage(inner.message, PRIO_COPY)
        elif typ == "assistant":
            msg = r.message
            if msg is None:
                return
            self._usage(msg, PRIO_DIRECT)
            if main and r.isSidechain is not True:
                self._assistant(msg, r.timestamp, start)
        elif typ == "user":
            if main and r.isSidechain is not True:
                self._user(r, src, start, end)
        elif typ == "system" and main:
            self._system(src if src.__class__ is dict else orjson.loads(src), end)
        elif typ == "cost-state" and main:
            self._cost_state(src if src.__class__ is dict else orjson.loads(src))

    def _system(self, rec: dict[str, Any], end: int) -> None:
        sub = rec.get("subtype")
        if sub == "compact_boundary":
            self.t.compactions += 1
            self.t.last_compaction_offset = end
        elif sub == "local_command":  # Claude Code 2.1 records a slash command here
            content = rec.get("content")
            text = content if isinstance(content, str) else ""
            echo = unknown_command(text)
            cmd = echo or slash_command(text)
            if cmd in PAUSE_COMMANDS:
                self._toggle_pause(rec, end, echo=echo is not None)
        elif not (isinstance(sub, str) and sub in SYSTEM_SUBTYPES):
            self.t.note_unknown(f"system/{str(sub)[:48]}")

    def _cost_state(self, rec: dict[str, Any]) -> None:
        """The session's running usage total as Claude Code keeps it, compaction calls included."""
        usage = rec.get("usage")
        raw = usage if isinstance(usage, dict) else rec
        vals = (_count(raw.get("inputTokens", raw.get("input_tokens"))),
                _count(raw.get("outputTokens", raw.get("output_tokens"))),
                _count(raw.get("cacheCreationInputTokens", raw.get("cache_creation_input_tokens"))),
                _count(raw.get("cacheReadInputTokens", raw.get("cache_read_input_tokens"))))  # fmt: skip
        if any(vals):
            self.t.cost_state = vals

    def _toggle_pause(self, src: Any, end: int, echo: bool = False) -> None:
        """One pause command toggles once: an "Unknown command" echo answering the record that
        already toggled (its child) is the same command, not a second one."""
        if src.__class__ is dict:
            ts, parent, uuid = src.get("timestamp"), src.get("parentUuid"), src.get("uuid")
        else:  # a typed line: read the three fields it did not decode
            try:
                f = _PAUSE.decode(src)
                ts, parent, uuid = f.timestamp, f.parentUuid, f.uuid
            except _DECODE_ERRORS:
                ts = parent = uuid = None
        if echo and self.t.last_pause_uuid is not None and parent == self.t.last_pause_uuid:
            return
        self.t.paused = not self.t.paused
        self.t.pause_toggled_ts = None if ts is None else str(ts)
        self.t.pause_offset = end
        self.t.last_pause_uuid = uuid if isinstance(uuid, str) else None

    def _usage(self, msg: _Message | _Copy, prio: int) -> None:
        u = msg.usage
        if u is None:
            return
        # typed and normalised counts are ints or None (never bools): _count, inlined
        a, b, c, d = u.input_tokens, u.output_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens
        vals = (a if a is not None and 0 <= a <= MAX_COUNT else 0, b if b is not None and 0 <= b <= MAX_COUNT else 0,
                c if c is not None and 0 <= c <= MAX_COUNT else 0, d if d is not None and 0 <= d <= MAX_COUNT else 0)
        mid = msg.id
        if mid:
            self.u.put(mid, prio, vals)
        elif prio == PRIO_DIRECT:
            self.u.add_anonymous(vals)

    def _assistant(self, msg: _Message, ts: str | None, start: int) -> None:
        t = self.t
        mid = msg.id
        if not (mid and mid == t.last_msg_id):
            t.assistant_turns += 1
            self._last_had_tool = False
            if self.pending:  # a new response: calls of earlier ones still unanswered are abandoned
                self._abandon()
        t.last_msg_id = mid
        content = msg.content
        if isinstance(content, str):
            t.conv_chars += len(content)
        elif content is not None:
            self._assistant_blocks(content, ts, start)

    def _user(self, r: _Record, src: Any, start: int, end: int) -> None:
        msg = r.message
        if msg is None or r.isCompactSummary is True:
            return
        content = msg.content
        has_result = False
        if isinstance(content, list):
            chars = 0
            parts: list[str] = []
            for b in content:
                bt = b.type
                if bt == "tool_result":
                    has_result = True
                    tid = b.tool_use_id
                    if tid is not None:
                        self.pending.discard(tid)
                    c = b.content
                    if isinstance(c, str):
                        chars += len(c)
                    elif c is not None:
                        for x in c:
                            if x.type == "text" and isinstance(x.text, str):
                                chars += len(x.text)
                elif bt == "text":
                    tx = b.text
                    if isinstance(tx, str):
                        parts.append(tx)
                    elif tx is msgspec.UNSET:  # absent: an empty part; null: no part
                        parts.append("")
            text = "\n".join(parts) if parts else ""
            self.t.conv_chars += chars
        else:
            text = content if isinstance(content, str) else ""
        self.t.conv_chars += len(text)
        if has_result or r.isMeta is True:
            return
        self._human_text(text, src, start, end, plain_slash=False)

    def _human_text(self, text: str, src: Any, start: int, end: int, plain_slash: bool) -> None:
        """Count a human turn, or honour a slash command (Claude Code wraps them; MewCode does not)."""
        stripped = text.strip()
        echo = None
        if stripped.startswith("<command-") or (plain_slash and stripped.startswith("/")):
            cmd = slash_command(stripped)
        else:
            echo = unknown_command(stripped)
            cmd = stripped if stripped in PAUSE_COMMANDS else echo
        if cmd in PAUSE_COMMANDS:
            self._toggle_pause(src, end, echo=echo is not None)
        if stripped.startswith(COMMAND_PREFIXES) or cmd is not None or not stripped:
            return
        if self.pending:  # the human spoke: calls still unanswered are abandoned
            self._abandon()
        self.t.human_turns += 1

    # -- MewCode ----------------------------------------------------------------
    def _mewcode(self, rec: dict[str, Any], start: int, end: int) -> None:
        if not self.main:
            return
        t = self.t
        t.records += 1
        ts = rec.get("timestamp")
        if ts is not None:
            if ts.__class__ is not str:
                ts = str(ts)
            if t.first_ts is None:
                t.first_ts = ts
            t.last_ts = ts
        typ = rec.get("type")
        content = rec.get("content")
        if not (isinstance(typ, str) and typ in MEWCODE_TYPES):
            t.note_unknown(str(typ)[:64])
        if typ == "user":
            text = text_of(content)
            t.conv_chars += len(text)
            self._human_text(text, rec, start, end, plain_slash=True)
        elif typ == "assistant":
            t.assistant_turns += 1
            self._last_had_tool = False
            t.last_msg_id = None
            if self.pending:  # each record is a response of its own
                self._abandon()
            if isinstance(content, str):
                t.conv_chars += len(content)
            elif isinstance(content, list):
                self._assistant_blocks(_norm_blocks(content), ts, start)  # type: ignore[arg-type]
        elif typ == "tool_result":
            tid = rec.get("tool_use_id")
            if isinstance(tid, str):  # anything else answers nothing (and may be unhashable)
                self.pending.discard(tid)
            t.conv_chars += _result_chars(content)
        elif typ in ("compression", "compact_boundary"):
            t.compactions += 1
            t.last_compaction_offset = end


def tokens_of(chars: int) -> int:
    """About four characters a token (§7.3), rounded up."""
    return (chars + 3) // 4
