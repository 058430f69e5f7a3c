"""Byte-preserving edits of a JSON text: memd splices in, and out, only the members it owns.

`memd connect claude` writes into files that belong to Claude Code and the user
(`settings.json`, a `.claude.json` of tens of megabytes). Loading and dumping them
would rewrite every byte: the indentation or compactness, CRLF line ends, number
spellings (`1E5`), duplicate keys, key order. Here the text is never re-serialised:
an edit inserts or removes the text of one member or one array element, in the
style the container already has, and everything else stays as it was, byte for
byte. Removing what was inserted gives back the text it was inserted into.

Values are located with the standard library's C decoder (`raw_decode` from a
position), so a 46 MB file costs one fast pass per edit, not a Python tokenizer.
A text is strict JSON as Claude Code reads it, or `JSONTextError`: no comments,
no trailing commas, no NaN/Infinity and no number too large for a double (`1e400`
would come back from any JSON writer as `Infinity`, which is not JSON).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any

_WS = " \t\n\r"


class JSONTextError(ValueError):
    """A text that is not strict JSON; the message names the place."""


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise JSONTextError(f"the number {text[:40]} is too large for Claude Code (it would become Infinity)")
    return value


def _no_constant(word: str) -> Any:
    raise JSONTextError(f"{word} is not JSON")


_DECODER = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant)
_RAW = json.JSONDecoder(object_pairs_hook=list, parse_float=str, parse_int=str, parse_constant=_no_constant)


def where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    return f"line {line}, column {pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


def loads(text: str) -> Any:
    """The value of a strict JSON text (`JSONTextError` with the place otherwise)."""
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise JSONTextError(f"line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise JSONTextError("nested too deeply") from None


def same(a: str, b: str) -> bool:
    """Whether two JSON texts hold the same members in the same order, duplicates and number
    spellings included: they differ at most in whitespace."""
    if a == b:
        return True
    try:
        return bool(_RAW.decode(a) == _RAW.decode(b))
    except (ValueError, RecursionError):
        return False


@dataclass(frozen=True)
class Value:
    """A JSON value and where its text lies in the document (start, end)."""

    start: int
    end: int
    value: Any


@dataclass(frozen=True)
class Member:
    """An object's member: its key, where the key starts, and its value."""

    key: str
    key_start: int
    value: Value


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _value_at(text: str, i: int) -> Value:
    try:
        value, end = _DECODER.raw_decode(text, i)
    except json.JSONDecodeError as exc:
        raise JSONTextError(f"{where(text, exc.pos)}: {exc.msg}") from None
    return Value(i, end, value)


def _expect(text: str, i: int, chars: str, what: str) -> None:
    if i >= len(text) or text[i] not in chars:
        raise JSONTextError(f"{where(text, i)}: expected {what}")


def members(text: str, start: int) -> list[Member]:
    """The members of the object whose `{` is at `start`, with their positions (checked strictly)."""
    return list(_members(text, start))


@lru_cache(maxsize=4)  # a few texts: each may be a 46 MB .claude.json and its values
def _members(text: str, start: int) -> tuple[Member, ...]:
    """Cached per text: an edit makes a new text, so a cached answer is never stale, and the
    several questions one edit asks of a 46 MB file cost one pass over it, not one each."""
    out: list[Member] = []
    i = _skip(text, start + 1)
    if i < len(text) and text[i] == "}":
        return ()
    while True:
        _expect(text, i, '"', "a property name in double quotes")
        try:
            key, after = scanstring(text, i + 1)
        except ValueError as exc:
            raise JSONTextError(f"{where(text, i)}: {exc}") from None
        colon = _skip(text, after)
        _expect(text, colon, ":", "':' after a property name")
        value = _value_at(text, _skip(text, colon + 1))
        out.append(Member(key, i, value))
        i = _skip(text, value.end)
        _expect(text, i, ",}", "',' or '}'")
        if text[i] == "}":
            return tuple(out)
        i = _skip(text, i + 1)


def items(text: str, start: int) -> list[Value]:
    """The elements of the array whose `[` is at `start`, with their positions."""
    out: list[Value] = []
    i = _skip(text, start + 1)
    if text[i] == "]":
        return out
    while True:
        value = _value_at(text, i)
        out.append(value)
        i = _skip(text, value.end)
        if text[i] == "]":
            return out
        i = _skip(text, i + 1)


def _close(text: str, start: int, found: tuple[Member, ...]) -> int:
    """The position just after the `}` of the object at `start` whose members are `found`."""
    return _skip(text, found[-1].value.end if found else start + 1) + 1


@lru_cache(maxsize=2)
def top(text: str) -> Value:
    """The top-level value of a whole strict JSON text (a BOM before it is allowed); an object is
    read member by member (one pass, and its members are then known), anything else whole."""
    i = _skip(text, 1 if text.startswith("\ufeff") else 0)
    if i >= len(text):
        raise JSONTextError(f"{where(text, i)}: no JSON value")
    if text[i] == "{":
        found = _members(text, i)
        value = Value(i, _close(text, i, found), {m.key: m.value.value for m in found})
    else:
        value = _value_at(text, i)
    rest = _skip(text, value.end)
    if rest < len(text):
        raise JSONTextError(f"{where(text, rest)}: extra data after the JSON value")
    return value


def member(text: str, obj: Value, key: str) -> Member | None:
    """The first member named `key` (Claude Code's parser keeps the last; memd edits only the first
    and refuses to guess when there are two: see `duplicates`)."""
    return next((m for m in members(text, obj.start) if m.key == key), None)


def duplicates(text: str, obj: Value, key: str) -> bool:
    return sum(1 for m in members(text, obj.start) if m.key == key) > 1


# --------------------------------------------------------------------------- style


@dataclass(frozen=True)
class Style:
    """How a container's text is laid out, so an edit writes new members the same way."""

    nl: str  # "" for a compact container
    indent: str  # of the container's members (multi-line)
    close: str  # before the closing bracket (multi-line)
    colon: str  # between a key and its value
    comma: str  # between members of a compact container


def _line_indent(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = start
    while end < len(text) and text[end] in " \t":
        end += 1
    return text[start:end]


def _unit(text: str) -> str:
    """The file's own indentation step (two spaces if nothing tells)."""
    for line in text.split("\n")[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            lead = line[: len(line) - len(stripped)]
            return "\t" if lead.startswith("\t") else " " * len(lead)
    return "  "


def style(text: str, container: Value, firsts: list[int]) -> Style:
    """How the container at `container` lays out its members (`firsts`: where each begins)."""
    nl = "\r\n" if "\r\n" in text else "\n"
    close = _line_indent(text, container.start)
    colon = ": "
    probe = text.find('":', container.start, container.end)
    if probe > 0:
        j = probe + 2
        colon = ":" + text[probe + 2 : _skip(text, j)].replace("\r", "").replace("\n", "")
    if firsts:
        multi = "\n" in text[container.start : firsts[0]]
        if multi:
            return Style(nl, _line_indent(text, firsts[0]), _line_indent(text, container.end - 1), colon, "," + nl)
        comma = ", "
        if len(firsts) > 1:
            between = text[text.rfind(",", container.start, firsts[1]) : firsts[1]]
            comma = between if "\n" not in between else ", "
        return Style("", "", "", colon, comma)
    whole_multi = "\n" in text.strip()
    return Style(nl if whole_multi else "", close + _unit(text), close, colon, ", ")


def render(value: Any, st: Style, unit: str) -> str:
    """`value` as JSON text in the style of the place it goes to."""
    if not st.nl:
        sep = st.comma.strip(" ") and st.comma
        return json.dumps(value, ensure_ascii=False, separators=(sep or ", ", st.colon))
    body = json.dumps(value, ensure_ascii=False, indent=unit, separators=(",", st.colon))
    return body.replace("\n", st.nl + st.indent)


# --------------------------------------------------------------------------- edits


def _splice(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def insert_member(text: str, obj: Value, key: str, value: Any) -> str:
    """`text` with `"key": value` added last in the object at `obj`, in the object's style."""
    found = members(text, obj.start)
    st = style(text, obj, [m.key_start for m in found])
    rendered = json.dumps(key, ensure_ascii=False) + st.colon + render(value, st, _unit(text))
    if found:
        sep = "," + st.nl + st.indent if st.nl else st.comma
        return _splice(text, found[-1].value.end, found[-1].value.end, sep + rendered)
    inner = st.nl + st.indent + rendered + st.nl + st.close if st.nl else rendered
    return _splice(text, obj.start, obj.end, "{" + inner + "}")


def append_item(text: str, arr: Value, value: Any) -> str:
    found = items(text, arr.start)
    st = style(text, arr, [v.start for v in found])
    rendered = render(value, st, _unit(text))
    if found:
        sep = "," + st.nl + st.indent if st.nl else st.comma
        return _splice(text, found[-1].end, found[-1].end, sep + rendered)
    inner = st.nl + st.indent + rendered + st.nl + st.close if st.nl else rendered
    return _splice(text, arr.start, arr.end, "[" + inner + "]")


def _remove(text: str, container: Value, spans: list[tuple[int, int]], index: int, closer: str) -> str:
    """Remove entry `index` (spans: (start, end) of each entry) with its separator."""
    start, end = spans[index]
    if len(spans) == 1:
        return _splice(text, container.start, container.end, "{}" if closer == "}" else "[]")
    if index > 0:
        return _splice(text, spans[index - 1][1], end, "")
    return _splice(text, start, spans[1][0], "")


def remove_member(text: str, obj: Value, key: str) -> str:
    found = members(text, obj.start)
    index = next(i for i, m in enumerate(found) if m.key == key)
    return _remove(text, obj, [(m.key_start, m.value.end) for m in found], index, "}")


def remove_item(text: str, arr: Value, index: int) -> str:
    found = items(text, arr.start)
    return _remove(text, arr, [(v.start, v.end) for v in found], index, "]")


def replace_value(text: str, old: Value, value: Any) -> str:
    """`old`'s text replaced by `value`, in the style of the value it replaces."""
    st = style(text, old, [])
    if "\n" not in text[old.start : old.end]:
        st = Style("", "", "", st.colon, ", ")
    else:
        st = Style(st.nl, _line_indent(text, old.start), st.close, st.colon, st.comma)
    return _splice(text, old.start, old.end, render(value, st, _unit(text)))


def replace_raw(text: str, old: Value, raw: str) -> str:
    return _splice(text, old.start, old.end, raw)
