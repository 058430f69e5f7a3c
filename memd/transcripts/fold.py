"""The per-record fold: `Folder` folds the records of one file into a `Tally` and a `UsageBook`.

It is a pure state machine: feeding the same records in any chunking gives the same tally, which is
what lets a restart read only new bytes. The counting rules are in `memd.transcripts.formats`.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from memd.transcripts import records as typed_records
from memd.transcripts.formats import (
    CLAUDE_TYPES,
    COMMAND_PREFIXES,
    MEWCODE_TYPES,
    NOTHING_TO_FOLD,
    PRIO_COPY,
    PRIO_DIRECT,
    SYSTEM_SUBTYPES,
    PauseWord,
    detect_format,
    follow_pause,
    pause_word,
    slash_command,
    text_of,
    unknown_command,
)
from memd.transcripts.records import (
    DECODE_ERRORS,
    DICT_TYPES,
    MAX_COUNT,
    PAUSE,
    Block,
    Copy,
    Message,
    Record,
    count,
    depth_guard,
    input_chars,
    norm_blocks,
    norm_record,
    result_chars,
    too_deep,
)
from memd.transcripts.tally import Tally, UsageBook


class Folder:
    """Folds the records of one file into a Tally and a UsageBook.

    `seen_tool` answers whether a tool_use id was already counted (persisted
    between reads; None on a first read: none was); `main` is False for sub-agent files, which only add usage.

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
        self._last_usage: tuple[str, int, Any] | None = None  # (message id, priority, usage) last put
        self._last_had_tool = not tally.natural_break
        self._end = tally.safe_offset

    # -- the hot loop -----------------------------------------------------------
    def fold(self, lines: list[bytes], start: int, bad: list[tuple[int, str]]) -> int:
        """Fold a batch of complete lines, each with its newline, the first starting at byte `start`.

        Returns how many lines parsed as JSON; an unparseable one is added to `bad`
        as (its index in the batch, orjson's reason).

        The typed way dispatches on the record's type right here, the commonest first: a progress
        record (half of all) costs a decode and a few comparisons, and the user and assistant ones
        go straight to their handlers (`_claude` does the same for the generic way and the rest).
        """
        typed = self.fmt == "claude"
        deep = depth_guard()
        fast = typed and not deep  # typed, and no line needs its depth checked first
        decode = typed_records.RECORD.decode  # looked up per batch: a test swaps in a refusing decoder
        claude = self._claude
        usage = self._usage
        assistant = self._assistant
        user = self._user
        main = self.main
        t = self.t
        # counted in locals while lines go typed, and kept only for the main thread's file
        records, first, last = t.records, t.first_ts, t.last_ts
        blank, bad_before = 0, len(bad)
        e = start
        for i, data in enumerate(lines):
            s = e
            e += len(data)
            # msgspec may read deeper than orjson (see depth_guard); the UTF-8 of strings it skips it
            # does not check (memd.transcripts.records: such a line counts, its fields memd reads are checked)
            if fast or (typed and not too_deep(data)):
                try:
                    r = decode(data)
                except DECODE_ERRORS:
                    pass
                else:
                    typ = r.type
                    if typ == "progress":  # most records: only a sub-agent's usage copy counts
                        d = r.data
                        if d is not None and d.type == "agent_progress":
                            inner = d.message
                            if inner is not None and inner.type == "assistant" and inner.message is not None:
                                usage(inner.message, PRIO_COPY)
                    elif typ == "assistant":
                        if main and not t.kind_decided:
                            t.kind_decided = True
                            t.is_subagent = r.isSidechain is True and bool(r.agentId)
                        msg = r.message
                        if msg is not None:
                            usage(msg, PRIO_DIRECT)
                            if main and r.isSidechain is not True:
                                assistant(msg, r.timestamp, s)
                    elif typ == "user":
                        if main:
                            if not t.kind_decided:
                                t.kind_decided = True
                                t.is_subagent = r.isSidechain is True and bool(r.agentId)
                            if r.isSidechain is not True:
                                user(r, data, s, e)
                    elif typ in DICT_TYPES:  # these few are read from orjson's dict, as the generic way reads
                        records, first, last = self._generic_at(data, s, e, i, bad, (records, first, last))
                        continue
                    elif typ not in NOTHING_TO_FOLD:  # known, and nothing in them counts; or unknown
                        claude(r, data, s, e)
                    records += 1
                    ts = r.timestamp
                    if ts is not None:
                        last = ts
                        if first is None:
                            first = ts
                    continue
            if data.isspace():
                blank += 1
                continue
            records, first, last = self._generic_at(data, s, e, i, bad, (records, first, last))
            typed = self.fmt == "claude"
            fast = typed and not deep
        if main:
            t.records, t.first_ts, t.last_ts = records, first, last
        self._end = e
        return len(lines) - blank - (len(bad) - bad_before)

    def _generic_at(self, data: bytes, start: int, end: int, i: int, bad: list[tuple[int, str]],
                    counts: tuple[int, Any, Any]) -> tuple[int, Any, Any]:  # fmt: skip
        """`_generic` for line `i` of `fold`'s batch, whose record count and first and last times live in
        locals (`counts`): they go to the tracker, where `feed` counts, and come back from it. A line
        orjson refuses goes to `bad`."""
        t = self.t
        if self.main:
            t.records, t.first_ts, t.last_ts = counts
        why = self._generic(data, start, end)
        if why is not None:
            bad.append((i, why))
        return (t.records, t.first_ts, t.last_ts) if self.main else counts

    def _generic(self, data: bytes, start: int, end: int) -> str | None:
        """Fold one line the generic way (orjson, then `feed`); orjson's reason if it refuses it."""
        try:
            rec = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            return str(exc).split(":", 1)[0][:120]
        self.feed(rec, end, start)
        return None

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
            r = norm_record(rec)
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

    def _assistant_blocks(self, blocks: list[Block], ts: str | None, start: int) -> None:
        t = self.t
        pending = self.pending
        seen = self.seen_tool
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
                chars += input_chars(b.input)
                tid = b.id
                if not tid:
                    calls += 1
                elif tid not in pending and tid not in self._seen_here and not (seen is not None and seen(tid)):
                    if not pending and self.main:
                        self._hold(ts, start)  # counters not yet moved by this record
                    pending.add(tid)
                    self._seen_here.add(tid)
                    self.new_tools.append(tid)
                    calls += 1
        t.conv_chars += chars
        t.tool_calls += calls

    # -- Claude Code / deepcode -------------------------------------------------
    def _claude(self, r: Record, src: Any, start: int, end: int) -> None:
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
            word = pause_word(content) if isinstance(content, str) else None
            if word is not None:
                self._toggle_pause(rec, end, word)
        elif not (isinstance(sub, str) and sub in SYSTEM_SUBTYPES):
            self.t.note_unknown(f"system/{str(sub)[:48]}")

    def _cost_state(self, rec: dict[str, Any]) -> None:
        """The session's running usage total as Claude Code keeps it, compaction calls included.

        Claude Code 2.1.332 writes `modelUsage: {model: {inputTokens, outputTokens,
        cacheCreationInputTokens, cacheReadInputTokens, …}}` (checked against the binary by
        tests/e2e/agents); a flat `usage` object is read too."""
        per_model = rec.get("modelUsage")
        if isinstance(per_model, dict):
            parts = [u for u in per_model.values() if isinstance(u, dict)]
        else:
            usage = rec.get("usage")
            parts = [usage if isinstance(usage, dict) else rec]
        vals = [0, 0, 0, 0]
        for raw in parts:
            for i, (camel, snake) in enumerate((("inputTokens", "input_tokens"), ("outputTokens", "output_tokens"),
                                                ("cacheCreationInputTokens", "cache_creation_input_tokens"),
                                                ("cacheReadInputTokens", "cache_read_input_tokens"))):  # fmt: skip
                vals[i] += count(raw.get(camel, raw.get(snake)))
        if any(vals):
            self.t.cost_state = (vals[0], vals[1], vals[2], vals[3])

    def _toggle_pause(self, src: Any, end: int, word: PauseWord) -> None:
        """One pause command counts once (`formats.follow_pause`, the rule spans follow too): an
        "Unknown command" echo answering the record that already counted (its child) is the same
        command, not a second one."""
        if src.__class__ is dict:
            ts, parent, uuid = src.get("timestamp"), src.get("parentUuid"), src.get("uuid")
        else:  # a typed line: read the three fields it did not decode
            try:
                f = PAUSE.decode(src)
                ts, parent, uuid = f.timestamp, f.parentUuid, f.uuid
            except DECODE_ERRORS:
                ts = parent = uuid = None
        t = self.t
        t.paused, t.last_pause_uuid, counted = follow_pause(t.paused, t.last_pause_uuid, word, uuid, parent)
        if not counted:
            return
        t.pause_toggled_ts = None if ts is None else str(ts)
        t.pause_offset = end
        if word.resume:
            t.pause_resumes += 1

    def _usage(self, msg: Message | Copy, prio: int) -> None:
        u = msg.usage
        if u is None:
            return
        mid = msg.id
        if mid:
            # Each line of one response repeats its usage: the same call as the one before changes
            # nothing (`UsageBook.put` is idempotent, and only this method puts), so it returns
            # at once, compared as structs (normalised ones compare alike the same way).
            last = (mid, prio, u)
            if last == self._last_usage:
                return
            self._last_usage = last
        # typed and normalised counts are ints or None (never bools): `count` on each, but four
        # counts whose bits together are in range (nearly every usage) are taken as they are
        a, b, c, d = u.input_tokens, u.output_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens
        if a is not None and b is not None and c is not None and d is not None and 0 <= (a | b | c | d) <= MAX_COUNT:
            vals = (a, b, c, d)
        else:
            vals = (count(a), count(b), count(c), count(d))
        if mid:
            self.u.put(mid, prio, vals)
        elif prio == PRIO_DIRECT:
            self.u.add_anonymous(vals)

    def _assistant(self, msg: Message, ts: str | None, start: int) -> None:
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

    def _user(self, r: Record, src: Any, start: int, end: int) -> None:
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
        word = pause_word(stripped)
        if word is not None:
            self._toggle_pause(src, end, word)
            return  # a pause command (and what it swallowed) is no human turn
        if stripped.startswith("<command-") or (plain_slash and stripped.startswith("/")):
            cmd = slash_command(stripped)
        else:
            cmd = unknown_command(stripped)
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
                self._assistant_blocks(norm_blocks(content), ts, start)  # type: ignore[arg-type]
        elif typ == "tool_result":
            tid = rec.get("tool_use_id")
            if isinstance(tid, str):  # anything else answers nothing (and may be unhashable)
                self.pending.discard(tid)
            t.conv_chars += result_chars(content)
        elif typ in ("compression", "compact_boundary"):
            t.compactions += 1
            t.last_compaction_offset = end
