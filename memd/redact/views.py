"""What a text says once decoded: the forms a secret takes on its way through a terminal or a JSON file.

The rules match characters; a secret can reach a transcript in other characters than its own:

- JSON escapes (`\\u0067\\u0068\\u0070_…` is `ghp_…`) and C hex escapes (`\\x67`);
- terminal control sequences inside it (`glpat-\\x1b[1mAbC…`: a colour change mid-token), raw or
  JSON-escaped (`\\u001b[32m`);
- a line break where the terminal wrapped it (`ghp_AbC…` at the end of one line, the rest at the start
  of the next), only after a known prefix;
- base64 of text that holds one (a Kubernetes `.dockerconfigjson`, `echo … | base64 -d`).

`decoded_view` gives the text with escapes decoded, control sequences removed and wrapped tokens
joined, with a map from each of its offsets back to the original; the redactor runs every rule on it
and redacts the *original* characters a finding maps to (the escapes, the colour codes and the line
break inside a secret go with it). `base64_spans` gives the base64 runs whose decoded text holds a
secret; the whole encoded run is redacted. Invariant: these only add findings; a text with none of
these forms costs a few substring scans and nothing else.
"""

from __future__ import annotations

import base64
import binascii
import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from memd.redact.lazyre import lazy

__all__ = ["View", "base64_spans", "decoded_view"]

# A JSON or C escape of one character, or a terminal control sequence (CSI, OSC, two-character ESC),
# raw or with its ESC JSON-escaped. Sequences are bounded: a stray ESC costs nothing.
_ESC = r"(?:\x1b|\\{1,2}u001[bB])"
_ESCAPE = lazy(
    _ESC + r"(?:\[[0-?]{0,32}[ -/]{0,8}[@-~]|\][^\x07\x1b\n]{0,512}(?:\x07|\x1b\\|\\{1,2}u0007)|[@-Z\\^_])"
    r"|\\{1,2}u(?P<u>[0-9a-fA-F]{4})|\\x(?P<x>[0-9a-fA-F]{2})|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
)
_MARKERS = ("\\u", "\\x", "\x1b", "\x07", "\x08", "\x0f", "\x0e")
# A known prefix whose token runs into a line break (raw, CRLF, or JSON-escaped) and on at the start of
# the next line. Literal-first, one family a pattern, so each scan skips ahead like the token rules.
_BREAK = r"(?P<br>\r?\n|\\r\\n|\\n)(?P<cont>[A-Za-z0-9_\-]{1,300})"
_WRAPPED = tuple(
    lazy(p + _BREAK)
    for p in (
        r"gh[pousr]_[A-Za-z0-9]{0,254}",
        r"github_pat_[A-Za-z0-9_]{0,254}",
        r"gl(?:pat|dt|rt|ptt|soat|cbt|ft|imt|agent|oas)-[A-Za-z0-9_\-]{0,299}",
        r"sk(?:-(?:ant|proj|svcacct|admin)-[A-Za-z0-9_\-]{0,299}|_(?:live|test|prod)_[A-Za-z0-9]{0,254})",
        r"rk_(?:live|test|prod)_[A-Za-z0-9]{0,254}",
        r"xox[abeoprs]-[A-Za-z0-9\-]{0,254}",
        r"npm_[A-Za-z0-9]{0,36}",
        r"hf_[A-Za-z]{0,34}",
        r"NRAK-[A-Z0-9]{0,27}",
        r"AKIA[A-Z0-9]{0,16}",
    )
)
# Full lengths of the fixed-length formats: a fragment shorter than its format is wrapped for certain.
_FULL = {"ghp_": 40, "gho_": 40, "ghu_": 40, "ghs_": 40, "ghr_": 40, "npm_": 40, "hf_": 37, "NRAK-": 32, "AKIA": 20, "glpat-": 26}


@dataclass(frozen=True)
class View:
    """A decoded text and where each of its characters came from.

    `pieces` are (view offset, original offset, original length or -1): from a view offset on, a
    copied stretch (-1: view and original advance together) or one decoded character standing for
    `original length` original characters. Removed characters have no piece.
    """

    text: str
    pieces: tuple[tuple[int, int, int], ...]
    starts: tuple[int, ...]

    def original(self, start: int, end: int) -> tuple[int, int]:
        """The original span that view span [start, end) came from (end > start)."""
        return self._at(start)[0], self._at(end - 1)[1]

    def _at(self, v: int) -> tuple[int, int]:
        vs, os_, olen = self.pieces[bisect.bisect_right(self.starts, v) - 1]
        if olen < 0:
            o = os_ + (v - vs)
            return o, o + 1
        return os_, os_ + olen


def _build(text: str, edits: list[tuple[int, int, str]]) -> View:
    """Apply non-overlapping sorted edits (start, end, replacement of at most one character)."""
    parts: list[str] = []
    pieces: list[tuple[int, int, int]] = []
    v = pos = 0
    for s, e, repl in edits:
        if s < pos:
            continue
        if s > pos:
            parts.append(text[pos:s])
            pieces.append((v, pos, -1))
            v += s - pos
        if repl:
            parts.append(repl)
            pieces.append((v, s, e - s))
            v += 1
        pos = e
    if pos < len(text):
        parts.append(text[pos:])
        pieces.append((v, pos, -1))
    if not pieces:
        pieces.append((0, 0, 0))
    return View("".join(parts), tuple(pieces), tuple(p[0] for p in pieces))


def _escape_edits(text: str) -> list[tuple[int, int, str]]:
    if not any(m in text for m in _MARKERS):
        return []
    edits = []
    for m in _ESCAPE.finditer(text):
        code = m.group("u") or m.group("x")
        ch = chr(int(code, 16)) if code else ""
        if ch and ord(ch) < 32 and ch not in "\n\r\t":
            ch = ""  # a control character: removed like a sequence
        edits.append((m.start(), m.end(), ch))
    return edits


def _join_edits(text: str) -> list[tuple[int, int, str]]:
    """The line breaks inside a wrapped token of a known prefix, as removals."""
    edits = []
    for pattern in _WRAPPED:  # literal-first: each scan costs about a substring search
        for m in pattern.finditer(text):
            frag = m.group(0)[: m.start("br") - m.start()]
            full = next((n for p, n in _FULL.items() if frag.startswith(p)), 0)
            cont = m.group("cont")
            if len(frag) < full or _continues(cont):
                edits.append((m.start("br"), m.end("br"), ""))
    return edits


def _continues(cont: str) -> bool:
    """Whether the start of the next line reads as the rest of a token rather than a word."""
    return any(c.isdigit() for c in cont) or any(c.isupper() for c in cont[1:]) or "_" in cont or len(cont) >= 12


def decoded_view(text: str) -> View | None:
    """The text with escapes decoded, control sequences removed and wrapped tokens joined; None if
    nothing of the kind is in it."""
    edits = _escape_edits(text)
    if edits:
        first = _build(text, edits)
        joins = [(*first.original(s, e), "") for s, e, _ in _join_edits(first.text)]
        if joins:
            edits = sorted(edits + joins)
    else:
        edits = _join_edits(text)
    return _build(text, edits) if edits else None


# --- base64 -----------------------------------------------------------------------------------

# Runs of base64 characters are found on a byte copy where each is `a` and anything else a space: a
# substring search for 20 `a`s skips through it at memchr-like speed, where a regex scan over the
# text would try every offset. (ASCII with `?` for the rest keeps one byte a character.)
_B64_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_B64_TABLE = bytes(97 if i in _B64_CHARS else 32 for i in range(256))
_B64_MIN = b"a" * 20
_B64_MAX = 65536
_PRINTABLE = frozenset(range(32, 127)) | {9, 10, 13}


# The first character of every 4 of base64 encodes the top 6 bits of a byte: below 0x80 (ASCII text), A–Z or a–f.
_TEXT_GROUP_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef")


def _text_of(run: str) -> str | None:
    """The text `run` encodes, if it encodes text (UTF-8, printable); None for binary or non-base64."""
    body = run.rstrip("=")
    if len(body) % 4 == 1:
        return None
    starts = body[0:128:4]
    if sum(c in _TEXT_GROUP_START for c in starts) < 0.8 * len(starts):
        return None  # binary (an image, a signature, a hash) or not base64 at all (a path, a word)
    head = body[:64]
    try:
        raw = base64.b64decode(head + "=" * (-len(head) % 4))
    except (binascii.Error, ValueError):
        return None
    if sum(b in _PRINTABLE or b >= 0x80 for b in raw) < 0.95 * len(raw):
        return None
    try:
        full = base64.b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    printable = sum(c.isprintable() or c in "\n\r\t" for c in full)
    return full if printable >= 0.95 * len(full) else None


def base64_spans(text: str, holds_secret: Callable[[str], bool]) -> Iterator[tuple[int, int]]:
    """The base64 runs of `text` that decode to text in which `holds_secret` finds a secret."""
    marks = text.encode("ascii", "replace").translate(_B64_TABLE)
    i = marks.find(_B64_MIN)
    while i >= 0:
        end = marks.find(b" ", i)
        end = len(marks) if end < 0 else end
        stop = end
        while stop < len(text) and stop - end < 2 and text[stop] == "=":
            stop += 1
        if end - i <= _B64_MAX:
            decoded = _text_of(text[i:stop])
            if decoded is not None and holds_secret(decoded):
                yield i, stop
        i = marks.find(_B64_MIN, end)
