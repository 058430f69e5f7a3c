"""A fast path for the front matter memd writes itself: flat `key: value` lines and one level of
nested mapping (`metadata:`), each value a plain word-led string or a single-quoted string.

Why: a dream reads every file of a scope, and PyYAML's constructor (Python, around libyaml's C
parser) was most of that read. Invariant: `simple_front` returns exactly what
`yaml.load(head, CSafeLoader)` returns, or None, and the caller then asks YAML. Anything outside
the subset — blank or commented lines, other indentations, lists, flow collections, double
quotes, block scalars, anchors, tags, duplicate keys, a value YAML would read as a number, a
date, a boolean or null, any character Python does not call printable — is None; it is never
guessed at. tests/memory/test_frontmatter.py holds it to YAML on a corpus of odd front matters.

`simple_dump` is the other direction, for the same reason (a dream renders every memory it
merges or rewrites, and PyYAML's emitter is pure Python): it returns exactly the bytes
`yaml.dump(front, SafeDumper, sort_keys=False, allow_unicode=True, default_flow_style=False,
width=huge)` gives, or None, and the caller then asks PyYAML. libyaml's emitter is not that:
it writes other bytes for astral characters, line breaks and long keys.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

__all__ = ["simple_dump", "simple_front"]

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
# PyYAML's (YAML 1.1) booleans and nulls that a word-led plain scalar could spell; numbers,
# dates and the rest start with a digit, a sign, a dot or a symbol, which the subset refuses.
_NOT_STR = frozenset(["yes", "Yes", "YES", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF", "null", "Null", "NULL"])
_INDENT = "  "
# Strings PyYAML's resolver reads as timestamps (a subset of its pattern): it single-quotes them.
# ASCII digits only (`\d` would take any script's).
_STAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:Z|[-+][0-9]{2}:[0-9]{2})?)?")


def _value(text: str) -> str | None:
    """The string a one-line scalar stands for, or None outside the subset."""
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        inner = text[1:-1]
        if "'" in inner.replace("''", "") or not inner.isprintable():
            return None
        return inner.replace("''", "'")
    if not text or not text[0].isalpha() or text in _NOT_STR or not text.isprintable():
        return None
    if ": " in text or " #" in text or text.endswith((":", " ")) or "\t" in text:
        return None
    return text


@lru_cache(maxsize=1024)  # a scope's files repeat a handful of keys: one regex match each, not one a line
def _key(text: str) -> str | None:
    return text if _KEY.match(text) and text not in _NOT_STR else None


def simple_front(head: str) -> dict[str, Any] | None:
    """The front matter `head` as YAML reads it, when it is within the subset; else None."""
    out: dict[str, Any] = {}
    nested: dict[str, Any] | None = None  # the mapping a `key:` line opened
    for line in (head[:-1] if head.endswith("\n") else head).split("\n"):
        if line.startswith(_INDENT):
            if nested is None:
                return None
            key, sep, rest = line[len(_INDENT) :].partition(": ")
            name, value = _key(key), _value(rest) if sep else None
            if name is None or value is None or name in nested:
                return None
            nested[name] = value
            continue
        if nested is not None and not nested:
            return None  # `key:` with nothing under it is null
        nested = None
        if line.endswith(":") and ": " not in line:
            name = _key(line[:-1])
            if name is None or name in out:
                return None
            nested = out[name] = {}
            continue
        key, sep, rest = line.partition(": ")
        name, value = _key(key), _value(rest) if sep else None
        if name is None or value is None or name in out:
            return None
        out[name] = value
    if not out or (nested is not None and not nested):
        return None
    return out


def _scalar_out(text: str) -> str | None:
    """How PyYAML's block emitter writes the string `text` as a value, for the two cases decided
    here without its analysis; None for anything else.

    Plain: `_value` takes it as it stands (word-led, printable, not a boolean or null, no `: `,
    ` #`, tab, or trailing colon or space), so the resolver says str and no indicator bars the
    plain style. Single-quoted: a timestamp the resolver would not read as a string, printable
    and without quotes, so the quoted form is just the text between two quotes.
    """
    if _value(text) == text:
        return text
    if _STAMP.fullmatch(text):
        return f"'{text}'"
    return None


def _key_out(key: Any) -> str | None:
    """A mapping key as PyYAML writes it: plain, and short enough for a simple key (its check counts
    the tag, `!!str`, with the text, against 128: under 100 leaves room)."""
    return key if type(key) is str and len(key) < 100 and _key(key) is not None else None


def simple_dump(front: dict[str, Any]) -> str | None:
    """`front` as PyYAML's safe dumper writes it with memd's options (see the module docstring),
    or None when it holds anything beyond: string values, and one level of non-empty mapping
    whose values are strings or non-empty lists of strings (written indentless, as PyYAML does).

    Types are checked exactly (`type(x) is str`): the safe dumper refuses a subclass, and a
    list or mapping met twice would be written as an anchor and an alias. What this returns
    reads back as `front` (`simple_front` reads the same subset without lists).
    """
    out: list[str] = []
    seen: set[int] = set()
    for key, value in front.items():
        k = _key_out(key)
        if k is None:
            return None
        if type(value) is str:
            v = _scalar_out(value)
            if v is None:
                return None
            out.append(f"{k}: {v}")
        elif type(value) is not dict or not value or id(value) in seen or not _nested(k, value, seen, out):
            return None
    return "\n".join(out) + "\n" if out else None


def _nested(name: str, mapping: dict[Any, Any], seen: set[int], out: list[str]) -> bool:
    """`simple_dump`'s lines for the mapping `name:`; False when it holds anything beyond the subset."""
    seen.add(id(mapping))
    out.append(f"{name}:")
    for key, value in mapping.items():
        k = _key_out(key)
        if k is None:
            return False
        if type(value) is str:
            v = _scalar_out(value)
            if v is None:
                return False
            out.append(f"  {k}: {v}")
            continue
        if type(value) is not list or not value or id(value) in seen:
            return False
        seen.add(id(value))
        out.append(f"  {k}:")
        for item in value:
            v = _scalar_out(item) if type(item) is str else None
            if v is None:
                return False
            out.append(f"  - {v}")
    return True
