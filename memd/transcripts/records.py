"""Typed records: Claude Code lines decoded with msgspec structs, or orjson's dicts normalised to them.

Claude Code lines are decoded with typed msgspec structs that read only the
fields the fold needs and skip the rest (most of a transcript's bytes: tool
results copied into `toolUseResult`, progress metadata, file snapshots). A line
the typed decode refuses (an odd type anywhere the fold looks, bad JSON, deep
nesting) goes the generic way: orjson, then the same fold on a normalised copy
(`_norm_record`), so both ways count alike. Two differences, both in fields memd
never reads: a number beyond a double's range there, or bytes that are not UTF-8
there, no longer make the line bad (msgspec skips such a field without judging it;
every string memd does read is checked). Checking them would cost a second pass
over a sixth of the bytes; the agent writes neither, and the line's record is kept.
"""

from __future__ import annotations

import sys
from typing import Any

import msgspec
import orjson


def result_chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        n = 0
        for b in content:
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str):
                n += len(b["text"])
        return n
    return 0


def input_chars(value: Any) -> int:
    """Characters of a tool input as compact JSON (what orjson writes for it as orjson reads it)."""
    try:
        out = orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits, as msgspec reads it: orjson reads it as a float
        try:
            out = orjson.dumps(orjson.loads(msgspec.json.encode(value)))
        except Exception:  # not measurable: counts nothing, as before
            return 0
    return len(out) if out.isascii() else len(out.decode("utf-8"))


# A token count beyond this is not a count (and would overflow SQLite's 64-bit integers once summed).
MAX_COUNT = 1 << 40


def count(v: Any) -> int:
    return v if v.__class__ is int and 0 <= v <= MAX_COUNT else 0


# --------------------------------------------------------------------------- typed records
#
# Only what the fold reads. A field of another type than declared makes the decode fail and the
# line go the generic way; `norm_record` builds the same structs from orjson's dicts, mapping each
# odd value to one the fold treats exactly as it treated that value.


class _Usage(msgspec.Struct, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class Block(msgspec.Struct, gc=False):
    type: str | None = None
    text: str | msgspec.UnsetType | None = msgspec.UNSET  # absent counts as "" in a user's text
    id: str | None = None
    name: str | None = None
    input: Any = None
    tool_use_id: str | None = None
    content: str | list[Block] | None = None


class Message(msgspec.Struct, gc=False):
    id: str | None = None
    content: str | list[Block] | None = None
    usage: _Usage | None = None


class Copy(msgspec.Struct, gc=False):
    """A sub-agent's message copied into a progress record: only its id and usage count."""

    id: str | None = None
    usage: _Usage | None = None


class _Inner(msgspec.Struct, gc=False):
    type: str | None = None
    message: Copy | None = None


class _Data(msgspec.Struct, gc=False):
    type: str | None = None
    message: _Inner | None = None


class Record(msgspec.Struct, gc=False):
    # In the order Claude Code writes them: msgspec looks a key up from the field after the last
    # one it found, so each key it reads is found at the first try.
    isSidechain: Any = None  # the flags matter only as `is True`, agentId only as truthy
    agentId: Any = None
    message: Message | None = None
    type: str | None = None
    data: _Data | None = None
    isCompactSummary: Any = None
    isMeta: Any = None
    timestamp: str | None = None


class _PauseFields(msgspec.Struct, gc=False):
    timestamp: Any = None
    parentUuid: Any = None
    uuid: Any = None


RECORD = msgspec.json.Decoder(Record)
PAUSE = msgspec.json.Decoder(_PauseFields)
DICT_TYPES = frozenset({"system", "cost-state"})  # rare records the fold reads from orjson's dict
DECODE_ERRORS = (msgspec.DecodeError, RecursionError)

# orjson refuses nesting deeper than this; msgspec's limit is the interpreter's recursion limit
# (Python ≤ 3.11: what is left of sys.getrecursionlimit(); later: the C recursion limit). Where
# msgspec could read deeper, a long line with that many brackets goes the generic way.
ORJSON_MAX_DEPTH = 1024
_TOO_DEEP = b'{"x":' + b"[" * ORJSON_MAX_DEPTH + b"]" * ORJSON_MAX_DEPTH + b"}"


def msgspec_reads_too_deep() -> bool:
    try:
        RECORD.decode(_TOO_DEEP)
    except DECODE_ERRORS:
        return False
    return True


_C_DEEP = sys.version_info >= (3, 12) and msgspec_reads_too_deep()


def depth_guard() -> bool:
    return _C_DEEP or sys.getrecursionlimit() > ORJSON_MAX_DEPTH


def too_deep(data: bytes) -> bool:
    return len(data) > 2 * ORJSON_MAX_DEPTH and data.count(b"[") + data.count(b"{") > ORJSON_MAX_DEPTH


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _norm_usage(u: Any) -> _Usage | None:
    if not isinstance(u, dict):
        return None
    return _Usage(*(v if v.__class__ is int else None for v in (
        u.get("input_tokens"), u.get("output_tokens"), u.get("cache_creation_input_tokens"),
        u.get("cache_read_input_tokens"))))  # fmt: skip


def norm_blocks(content: Any) -> str | list[Block] | None:
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
        out.append(Block(_opt_str(b.get("type")), text, _opt_str(b.get("id")), _opt_str(b.get("name")),
                          b.get("input"), _opt_str(b.get("tool_use_id")), norm_blocks(b.get("content"))))  # fmt: skip
    return out


def norm_record(d: dict[str, Any]) -> Record:
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
        message = Message(_opt_str(msg.get("id")), norm_blocks(msg.get("content")), _norm_usage(msg.get("usage")))
    data = d.get("data")
    norm_data = None
    if isinstance(data, dict):
        inner = data.get("message")
        norm_inner = None
        if isinstance(inner, dict):
            copy = inner.get("message")
            norm_copy = (
                Copy(_opt_str(copy.get("id")), _norm_usage(copy.get("usage"))) if isinstance(copy, dict) else None
            )
            norm_inner = _Inner(_opt_str(inner.get("type")), norm_copy)
        norm_data = _Data(_opt_str(data.get("type")), norm_inner)
    return Record(isSidechain=d.get("isSidechain"), agentId=d.get("agentId"), message=message, type=typ, data=norm_data,
                  isCompactSummary=d.get("isCompactSummary"), isMeta=d.get("isMeta"), timestamp=ts)  # fmt: skip
