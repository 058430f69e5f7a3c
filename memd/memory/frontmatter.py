"""A fast path for the front matter memd writes itself: flat `key: value` lines and one level of
nested mapping (`metadata:`), each value a plain word-led string or a single-quoted string.

Why: a dream reads every file of a scope, and PyYAML's constructor (Python, around libyaml's C
parser) was most of that read. Invariant: `simple_front` returns exactly what
`yaml.load(head, CSafeLoader)` returns, or None, and the caller then asks YAML. Anything outside
the subset — blank or commented lines, other indentations, lists, flow collections, double
quotes, block scalars, anchors, tags, duplicate keys, a value YAML would read as a number, a
date, a boolean or null, any character Python does not call printable — is None; it is never
guessed at. tests/memory/test_frontmatter.py holds it to YAML on a corpus of odd front matters.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

__all__ = ["simple_front"]

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
# PyYAML's (YAML 1.1) booleans and nulls that a word-led plain scalar could spell; numbers,
# dates and the rest start with a digit, a sign, a dot or a symbol, which the subset refuses.
_NOT_STR = frozenset(["yes", "Yes", "YES", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF", "null", "Null", "NULL"])
_INDENT = "  "


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
