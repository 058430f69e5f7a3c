"""The kinds of secret detector `memd.redact.redactor` runs, and how a rule is built.

A detector has a `name` (the `<rule>` of `[REDACTED:<rule>]`), `hints` (literals one
of which must occur for it to run), `ci` (whether it runs on the lowercased text) and
`spans(text, lowered)`, the secret parts it finds. `Rule` is one regex, compiled on
first use (`rule`, `token` and `tokens` build them); `KeywordRule` and `EnvRule` start
from keywords found with `str.find` (`Hits` shares them between rules); `HeadRule` is
a format whose distinctive part is in the middle; `PemRule` finds PEM private-key
blocks. The rules themselves are `memd.redact.rules`; what a context rule accepts as
a secret is `memd.redact.vetting`.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from memd.redact.lazyre import lazy

__all__ = [
    "AfterRule",
    "Detector",
    "EnvRule",
    "HeadRule",
    "Hits",
    "KeywordRule",
    "PemRule",
    "Rule",
    "Vet",
    "rule",
    "same_length_lower",
    "starts_word",
    "token",
    "tokens",
]


@dataclass(frozen=True)
class Rule:
    """One detector.

    `groups` are the named groups `secret*` that mark the secret part (a rule may
    have alternatives; the one that matched counts). Patterns start with their
    literal (`sk-ant-`, `ghp_`) rather than `\\b`, because only a literal prefix
    lets the regex engine skip ahead; `boundary` then checks in Python that the
    match does not start inside a word. `ci` rules are written in lowercase and
    run on the lowercased text, which keeps that skip (IGNORECASE loses it).
    `accept`, when set, vets a match in Python, keeping the regex simple and
    linear. `hints` are literals one of which must occur for the rule to run.
    The regex is compiled on first use: most rules never run in a process (their
    hints are absent), and compiling a hundred patterns at import would cost
    every command that imports this module a fifth of a second.
    """

    name: str
    regex: str
    groups: tuple[str, ...]
    hints: tuple[str, ...] = ()
    boundary: bool = False
    accept: Callable[[str, re.Match[str]], bool] | None = None
    ci: bool = False

    @property
    def pattern(self) -> re.Pattern[str]:
        return _compiled(self.regex, 0)

    @property
    def pattern_ci(self) -> re.Pattern[str] | None:
        """The IGNORECASE fallback, for a text whose lower case shifts offsets."""
        return _compiled(self.regex, re.IGNORECASE) if self.ci else None

    def spans(self, text: str, lowered: str | None = None) -> Iterator[tuple[int, int]]:
        """Secret spans of this rule in `text` (`lowered` is `text.lower()`, if at hand)."""
        haystack, pattern = text, self.pattern
        if self.ci:
            lowered = text.lower() if lowered is None else lowered
            # Lowering keeps offsets unless a character expands (İ → i̇); then search as is.
            if len(lowered) == len(text):
                haystack = lowered
            else:
                pattern = _compiled(self.regex, re.IGNORECASE)
        for m in pattern.finditer(haystack):
            if self.boundary and not starts_word(text, m.start()):
                continue
            if self.accept is not None and not self.accept(text, m):
                continue
            for group in self.groups:
                start, end = m.span(group)
                if end > start:
                    yield start, end
                    break


def starts_word(text: str, i: int) -> bool:
    """Whether offset `i` begins a word; a JSON escape (`\\n`, `\\t`) before it counts as a gap.

    Raw transcript lines are JSON, where a key pasted on its own line reads
    `…\\nsk-…`: the `n` must not hide it.
    """
    if i == 0:
        return True
    prev = text[i - 1]
    if not (prev.isalnum() or prev == "_"):
        return True
    return prev in "ntr" and i >= 2 and text[i - 2] == "\\"


def rule(
    name: str,
    regex: str,
    hints: tuple[str, ...] = (),
    *,
    ci: bool = False,
    boundary: bool = False,
    accept: Callable[[str, re.Match[str]], bool] | None = None,
) -> Rule:
    if "(?P<secret" not in regex:
        regex = f"(?P<secret>{regex})"  # the whole match is the secret
    groups = tuple(_SECRET_GROUP.findall(regex))
    return Rule(name, regex, groups, hints, boundary, accept, ci)


_SECRET_GROUP = lazy(r"\(\?P<(secret\w*)>")


@functools.cache
def _compiled(regex: str, flags: int) -> re.Pattern[str]:
    return re.compile(regex, flags)


_LITERAL = lazy(r"(?:[A-Za-z0-9_~\-]|\\[.\-])+")


def token(name: str, regex: str, *hints: str, boundary: bool = True) -> Rule:
    """A token format: the whole match is the secret, and it must not run on into more word characters.

    Without `hints`, the regex's literal prefix (`dapi`, `hvs.`) is the pre-check.
    """
    if not hints:
        m = _LITERAL.match(regex)
        if m is None:
            raise ValueError(f"{name}: {regex!r} has no literal prefix")
        hints = (m.group(0).replace("\\", ""),)
    return rule(name, regex + r"(?![A-Za-z0-9])", hints, boundary=boundary)


def tokens(name: str, *regexes: str) -> tuple[Rule, ...]:
    """Several formats under one label, each its own literal-first rule (an alternation would lose the skip)."""
    return tuple(token(name, r) for r in regexes)


def same_length_lower(text: str, lowered: str | None) -> str:
    """`text.lower()` with offsets kept: a character whose lower case is longer stays as it is."""
    low = text.lower() if lowered is None else lowered
    if len(low) != len(text):
        low = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    return low


Vet = Callable[[str, str, int, int, re.Match[str]], tuple[int, int] | None]


class Hits:
    """Where each keyword root occurs in one lowered text, found once and shared by the keyword rules.

    A scan of a 50 KB text costs about as much as the regex work that follows it, so the
    assignment, URL-parameter and prose rules, which start from the same keywords, share them.
    """

    def __init__(self, low: str) -> None:
        self.low = low
        self._found: dict[str, list[int]] = {}

    def of(self, root: str) -> list[int]:
        found = self._found.get(root)
        if found is None:
            found = []
            i = self.low.find(root)
            while i >= 0:
                found.append(i)
                i = self.low.find(root, i + 1)
            self._found[root] = found
        return found


@dataclass(frozen=True)
class KeywordRule:
    """A keyword (`password`, `token`, `api key`) followed by a value, found without an alternation.

    An alternation of keywords at the start of a regex makes the engine try every
    offset; here each root (`pass`, `token`, `key`) is found with `str.find`, the
    keyword read out with `keyword` where one stands, and the regex `tail` matched
    after it. `key` counts only after a qualifier (`api_`, `secret`, `access `)
    read back with `qualifier`. `vet` gets (text, lowered, name start, keyword
    end, tail match) and returns the secret's span, or None.
    """

    name: str
    roots: tuple[str, ...]
    keyword: re.Pattern[str]
    tail: re.Pattern[str]
    qualifier: re.Pattern[str] | None  # None: `key` needs no qualifier (the vet reads the name)
    vet: Vet
    ci: bool = True

    @property
    def hints(self) -> tuple[str, ...]:
        return ()  # spans() finds its roots itself: a pre-check would scan for them twice

    def spans(self, text: str, lowered: str | None = None, hits: Hits | None = None) -> Iterator[tuple[int, int]]:
        low = same_length_lower(text, lowered)
        if hits is None or hits.low is not low:
            hits = Hits(low)
        for root in self.roots:
            resume = 0
            for i in hits.of(root):
                if i < resume:
                    continue  # inside a value already read: like finditer
                k = self.keyword.match(low, i)
                if k is None:
                    continue
                m = self.tail.match(low, k.end())
                if m is None:
                    continue
                resume = m.end()
                start = i
                if root == "key" and self.qualifier is not None:
                    q = self.qualifier.search(low, max(0, i - 13), i)
                    if q is None:
                        continue
                    start = q.start()
                span = self.vet(text, low, start, k.end(), m)
                if span is not None:
                    yield span


_ENV_ROOTS = ("KEY", "SECRET", "TOKEN", "PASS", "PWD", "CREDENTIAL")
_ENV_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_ENV_RUN = lazy(r"[A-Z0-9_]*")


@dataclass(frozen=True)
class EnvRule:
    """`NAME=value` with an upper-case NAME holding a keyword, found from its keywords.

    The regex anchors at the name; it runs only where a keyword's upper-case name starts
    (read back at most 128 characters), not at every offset of the text.
    """

    name: str
    pattern: re.Pattern[str]
    accept: Callable[[str, re.Match[str]], bool]
    groups: tuple[str, ...] = ("secret", "secret_sq", "secret_bare")
    hints: tuple[str, ...] = ()
    ci: bool = False

    def spans(self, text: str, lowered: str | None = None) -> Iterator[tuple[int, int]]:
        hits: list[int] = []
        for root in _ENV_ROOTS:
            i = text.find(root)
            while i >= 0:
                hits.append(i)
                i = text.find(root, i + len(root))
        starts: list[int] = []
        run_end = -1
        for i in sorted(hits):
            if i < run_end:
                continue  # in the name already read (SECRET_KEY holds two keywords)
            run = _ENV_RUN.match(text, i)
            run_end = run.end() if run else i
            j = i
            while j > 0 and i - j < 128 and text[j - 1] in _ENV_NAME_CHARS:
                j -= 1
            starts.append(j)
        resume = 0
        for start in starts:
            if start < resume:
                continue
            m = self.pattern.match(text, start)
            if m is None:
                continue
            resume = m.end()
            if not self.accept(text, m):
                continue
            for group in self.groups:
                s, e = m.span(group)
                if e > s:
                    yield s, e
                    break


@dataclass(frozen=True)
class HeadRule:
    """A format whose distinctive part is in the middle: `body` is searched (literal-first), then
    `head`, which must end right where the body starts, is read back over at most `reach` characters.
    The secret is head and body, and it must start a word."""

    name: str
    body: re.Pattern[str]
    head: re.Pattern[str]
    reach: int
    hints: tuple[str, ...] = ()
    ci: bool = False

    def spans(self, text: str, lowered: str | None = None) -> Iterator[tuple[int, int]]:
        for m in self.body.finditer(text):
            h = self.head.search(text, max(0, m.start() - self.reach), m.start())
            if h is not None and starts_word(text, h.start()):
                yield h.start(), m.end()


_PEM_BEGIN = lazy(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = lazy(r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")
# A block cut short (a truncated paste, a `head` of the file) still leaks its body:
# take what looks like base64 and headers after BEGIN, real or JSON-escaped newlines.
_PEM_TAIL = lazy(r"(?:[A-Za-z0-9+/=\s:,\-]|\\[nr])*")
_PEM_MAX = 65536


@dataclass(frozen=True)
class PemRule:
    """PEM private-key blocks, BEGIN through END.

    Not one regex: a lazy `BEGIN[\\s\\S]*?END` rescans the rest of the text for
    every unterminated BEGIN. Here the END markers are found once and each BEGIN
    bisects to the next one, so the scan stays linear.
    """

    name: str = "private-key"
    hints: tuple[str, ...] = ("PRIVATE KEY",)
    ci: bool = False

    def spans(self, text: str, lowered: str | None = None) -> Iterator[tuple[int, int]]:
        ends = [(m.start(), m.end()) for m in _PEM_END.finditer(text)]
        starts = [s for s, _ in ends]
        covered = 0
        for m in _PEM_BEGIN.finditer(text):
            if m.start() < covered:
                continue
            i = bisect.bisect_left(starts, m.end())
            if i < len(ends) and ends[i][0] - m.end() <= _PEM_MAX:
                covered = ends[i][1]
            else:
                tail = _PEM_TAIL.match(text, m.end())
                covered = tail.end() if tail else m.end()
            yield m.start(), covered


@dataclass(frozen=True)
class AfterRule:
    """A value a command prints: `marker` (the command, found with `str.find`), then within `reach`
    characters `value` (its `secret` group). The text after each marker is searched once, however
    densely markers repeat, so the scan stays linear."""

    name: str
    marker: str
    value: re.Pattern[str]
    reach: int
    ci: bool = False

    @property
    def hints(self) -> tuple[str, ...]:
        return (self.marker,)

    def spans(self, text: str, lowered: str | None = None) -> Iterator[tuple[int, int]]:
        searched = 0
        i = text.find(self.marker)
        while i >= 0:
            stop = i + len(self.marker) + self.reach
            for m in self.value.finditer(text, max(i + len(self.marker), searched), stop):
                yield m.span("secret")
            searched = max(searched, stop - 64)  # a value may straddle the seam: look again at the last bit
            i = text.find(self.marker, i + len(self.marker))


Detector = Rule | PemRule | KeywordRule | HeadRule | EnvRule | AfterRule
