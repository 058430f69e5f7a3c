"""Incremental transcript reading for both formats (SPEC §7, §7.1–7.3).

The reader is split in two so each half is testable alone:

* `read_lines(path, offset)` yields complete lines from a byte offset. Bytes
  after the last newline are never consumed: the writer may be mid-line.
* `Tally` folds parsed records into per-session counters. It is a pure state
  machine: feeding the same records in any chunking gives the same tally, which
  is what lets a restart read only new bytes.

Counting rules (one place, documented in the README under `memd sessions`):

* human turn: a main-thread `user` record that is not a tool result, not
  `isMeta`, not `isCompactSummary`, and not a `<command-…>`/`<local-command-…>`
  wrapper (MewCode: a `user` record with text that is not a slash command);
* assistant turn: one API response of the main thread (distinct `message.id`;
  MewCode: one `assistant` record);
* tool call: a distinct main-thread `tool_use.id`; unanswered until a
  `tool_result` with that id arrives;
* conversation tokens: characters of text, tool calls (name + JSON input) and
  tool results of the main thread, divided by four (§7.3); thinking, images and
  compaction summaries are not the conversation's own content;
* API usage: the last usage per `message.id`, sub-agents included; a copy in an
  `agent_progress` record counts only when no direct record of that id exists.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

CHUNK = 1 << 20
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


@dataclass
class Line:
    """One complete line: its bytes, 1-based number, and the offset just past its newline."""

    data: bytes
    number: int
    end: int


def read_chunks(path: str | os.PathLike[str], offset: int) -> Iterator[tuple[list[bytes], int]]:
    """Batches of complete lines from byte `offset`, each with the offset just past the batch.

    Reads in 1 MiB chunks so memory stays flat on 100 MB files; a line longer
    than a chunk is carried until its newline arrives. Bytes after the last
    newline are never returned.
    """
    with open(path, "rb") as fh:
        fh.seek(offset)
        pos = offset
        carry = b""
        while True:
            chunk = fh.read(CHUNK)
            if not chunk:
                return
            buf = carry + chunk if carry else chunk
            cut = buf.rfind(b"\n")
            if cut < 0:
                carry = buf
                continue
            lines = buf[:cut].split(b"\n")
            carry = buf[cut + 1 :]
            pos += cut + 1
            yield lines, pos


def read_lines(path: str | os.PathLike[str], offset: int, first_line: int) -> Iterator[Line]:
    """Complete lines of `path` from byte `offset`; `first_line` numbers the first one."""
    number = first_line
    for lines, batch_end in read_chunks(path, offset):
        end = batch_end - sum(len(x) + 1 for x in lines)
        for data in lines:
            end += len(data) + 1
            yield Line(data, number, end)
            number += 1


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


def _tool_use_chars(block: dict[str, Any]) -> int:
    name = block.get("name")
    n = len(name) if isinstance(name, str) else 0
    try:
        n += len(orjson.dumps(block.get("input")).decode("utf-8"))
    except TypeError:
        pass
    return n


# A token count beyond this is not a count (and would overflow SQLite's 64-bit integers once summed).
MAX_COUNT = 1 << 40


def _count(v: Any) -> int:
    return v if v.__class__ is int and 0 <= v <= MAX_COUNT else 0


@dataclass
class Tally:
    """Per-session counters, folded record by record (main thread) plus usage (all threads).

    `carry` fields (pending tool ids, the open assistant message) are what must
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
    last_msg_id: str | None = None
    is_subagent: bool = False
    kind_decided: bool = False
    last_pause_uuid: str | None = None
    cost_state: tuple[int, int, int, int] | None = None
    unknown_types: dict[str, int] = field(default_factory=dict)

    def to_carry(self) -> dict[str, Any]:
        return {"pending": self.pending, "last_msg_id": self.last_msg_id, "last_pause_uuid": self.last_pause_uuid,
                "cost_state": self.cost_state, "unknown_types": self.unknown_types}  # fmt: skip

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
            if old[0] > prio:
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
    """

    def __init__(self, tally: Tally, usage: UsageBook, seen_tool: Any, main: bool, fmt: str | None) -> None:
        self.t = tally
        self.u = usage
        self.seen_tool = seen_tool
        self.main = main
        self.fmt = fmt
        self.pending = set(tally.pending)
        self.new_tools: list[str] = []
        self._last_had_tool = not tally.natural_break

    def feed(self, rec: Any, end: int) -> None:
        if rec.__class__ is not dict:
            return
        if self.fmt is None:
            self.fmt = detect_format(rec)
            if self.fmt is None:
                return
        t = self.t
        main = self.main
        if main:
            t.records += 1
            ts = rec.get("timestamp")
            if ts is not None:
                if ts.__class__ is not str:
                    ts = str(ts)
                if t.first_ts is None:
                    t.first_ts = ts
                t.last_ts = ts
        if self.fmt == "claude":
            if main and rec.get("type") not in CLAUDE_TYPES:
                t.note_unknown(str(rec.get("type"))[:64])
            if main and not t.kind_decided and rec.get("type") in ("user", "assistant"):
                t.kind_decided = True
                t.is_subagent = rec.get("isSidechain") is True and bool(rec.get("agentId"))
            self._claude(rec, end)
        else:
            self._mewcode(rec, end)
        if main and not self.pending:
            t.safe_offset = end
            t.safe_human_turns = t.human_turns
            t.safe_conv_chars = t.conv_chars
            t.safe_tool_calls = t.tool_calls

    def finish(self) -> None:
        self.t.pending = sorted(self.pending)
        self.t.natural_break = not self._last_had_tool and self.t.assistant_turns > 0

    # -- Claude Code / deepcode -------------------------------------------------
    def _claude(self, rec: dict[str, Any], end: int) -> None:
        t = rec.get("type")
        if t == "assistant":
            msg = rec.get("message")
            if not isinstance(msg, dict):
                return
            self._usage(msg, PRIO_DIRECT)
            if self.main and rec.get("isSidechain") is not True:
                self._assistant(msg)
        elif t == "user":
            if self.main and rec.get("isSidechain") is not True:
                self._user(rec, end)
        elif t == "system":
            if self.main:
                self._system(rec, end)
        elif t == "cost-state":
            if self.main:
                self._cost_state(rec)
        elif t == "progress":
            data = rec.get("data")
            if isinstance(data, dict) and data.get("type") == "agent_progress":
                inner = data.get("message")
                if isinstance(inner, dict) and inner.get("type") == "assistant":
                    msg = inner.get("message")
                    if isinstance(msg, dict):
                        self._usage(msg, PRIO_COPY)

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
        elif sub not in SYSTEM_SUBTYPES:
            self.t.note_unknown(f"system/{str(sub)[:48]}")

    def _cost_state(self, rec: dict[str, Any]) -> None:
        """The session's running usage total as Claude Code keeps it, compaction calls included."""
        raw = rec.get("usage") if isinstance(rec.get("usage"), dict) else rec
        vals = (_count(raw.get("inputTokens", raw.get("input_tokens"))),
                _count(raw.get("outputTokens", raw.get("output_tokens"))),
                _count(raw.get("cacheCreationInputTokens", raw.get("cache_creation_input_tokens"))),
                _count(raw.get("cacheReadInputTokens", raw.get("cache_read_input_tokens"))))  # fmt: skip
        if any(vals):
            self.t.cost_state = vals

    def _toggle_pause(self, rec: dict[str, Any], end: int, echo: bool = False) -> None:
        """One pause command toggles once: an "Unknown command" echo answering the record that
        already toggled (its child) is the same command, not a second one."""
        if echo and self.t.last_pause_uuid is not None and rec.get("parentUuid") == self.t.last_pause_uuid:
            return
        self.t.paused = not self.t.paused
        ts = rec.get("timestamp")
        self.t.pause_toggled_ts = None if ts is None else str(ts)
        self.t.pause_offset = end
        uuid = rec.get("uuid")
        self.t.last_pause_uuid = uuid if isinstance(uuid, str) else None

    def _usage(self, msg: dict[str, Any], prio: int) -> None:
        u = msg.get("usage")
        if u.__class__ is not dict:
            return
        vals = (_count(u.get("input_tokens")), _count(u.get("output_tokens")),
                _count(u.get("cache_creation_input_tokens")), _count(u.get("cache_read_input_tokens")))  # fmt: skip
        mid = msg.get("id")
        if mid.__class__ is str and mid:
            self.u.put(mid, prio, vals)
        elif prio == PRIO_DIRECT:
            self.u.add_anonymous(vals)

    def _assistant(self, msg: dict[str, Any]) -> None:
        mid = msg.get("id")
        if not (isinstance(mid, str) and mid and mid == self.t.last_msg_id):
            self.t.assistant_turns += 1
            self._last_had_tool = False
        self.t.last_msg_id = mid if isinstance(mid, str) else None
        content = msg.get("content")
        if isinstance(content, str):
            self.t.conv_chars += len(content)
            return
        if not isinstance(content, list):
            return
        for b in content:
            if not isinstance(b, dict):
                continue
            bt = b.get("type")
            if bt == "text":
                tx = b.get("text")
                if isinstance(tx, str):
                    self.t.conv_chars += len(tx)
            elif bt == "tool_use":
                self._last_had_tool = True
                self.t.conv_chars += _tool_use_chars(b)
                self._tool_call(b.get("id"))

    def _tool_call(self, tid: Any) -> None:
        if not isinstance(tid, str) or not tid:
            self.t.tool_calls += 1
            return
        if tid in self.pending or self.seen_tool(tid):
            return
        self.new_tools.append(tid)
        self.t.tool_calls += 1
        self.pending.add(tid)

    def _answered(self, tid: Any) -> None:
        if isinstance(tid, str):  # pending holds str ids; anything else answers nothing (and may be unhashable)
            self.pending.discard(tid)

    def _user(self, rec: dict[str, Any], end: int) -> None:
        msg = rec.get("message")
        if not isinstance(msg, dict):
            return
        content = msg.get("content")
        if rec.get("isCompactSummary") is True:
            return
        has_result = False
        if isinstance(content, list):
            for b in content:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    has_result = True
                    self._answered(b.get("tool_use_id"))
                    self.t.conv_chars += _result_chars(b.get("content"))
        text = text_of(content)
        self.t.conv_chars += len(text)
        if has_result or rec.get("isMeta") is True:
            return
        self._human_text(text, rec, end, plain_slash=False)

    def _human_text(self, text: str, rec: dict[str, Any], end: int, plain_slash: bool) -> None:
        """Count a human turn, or honour a slash command (Claude Code wraps them; MewCode does not)."""
        stripped = text.strip()
        echo = None
        if stripped.startswith("<command-") or (plain_slash and stripped.startswith("/")):
            cmd = slash_command(stripped)
        else:
            echo = unknown_command(stripped)
            cmd = stripped if stripped in PAUSE_COMMANDS else echo
        if cmd in PAUSE_COMMANDS:
            self._toggle_pause(rec, end, echo=echo is not None)
        if stripped.startswith(COMMAND_PREFIXES) or cmd is not None or not stripped:
            return
        self.t.human_turns += 1

    # -- MewCode ----------------------------------------------------------------
    def _mewcode(self, rec: dict[str, Any], end: int) -> None:
        if not self.main:
            return
        t = rec.get("type")
        content = rec.get("content")
        if t not in MEWCODE_TYPES:
            self.t.note_unknown(str(t)[:64])
        if t == "user":
            text = text_of(content)
            self.t.conv_chars += len(text)
            self._human_text(text, rec, end, plain_slash=True)
        elif t == "assistant":
            self.t.assistant_turns += 1
            self._last_had_tool = False
            self.t.last_msg_id = None
            if isinstance(content, str):
                self.t.conv_chars += len(content)
            elif isinstance(content, list):
                for b in content:
                    if not isinstance(b, dict):
                        continue
                    if b.get("type") == "text" and isinstance(b.get("text"), str):
                        self.t.conv_chars += len(b["text"])
                    elif b.get("type") == "tool_use":
                        self._last_had_tool = True
                        self.t.conv_chars += _tool_use_chars(b)
                        self._tool_call(b.get("id"))
        elif t == "tool_result":
            self._answered(rec.get("tool_use_id"))
            self.t.conv_chars += _result_chars(content)
        elif t in ("compression", "compact_boundary"):
            self.t.compactions += 1
            self.t.last_compaction_offset = end


def tokens_of(chars: int) -> int:
    """About four characters a token (§7.3), rounded up."""
    return (chars + 3) // 4
