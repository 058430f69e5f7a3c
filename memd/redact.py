"""Secret redaction, in the spirit of gitleaks.

Transcripts hold whatever passed through a terminal: keys pasted into a chat,
`.env` files the agent read, `curl -H "Authorization: Bearer …"` lines. None of
that may leave the machine in a prompt, nor be frozen into a memory file. Every
model call redacts its prompts here (memd.llm), and every memory body a model
proposes is redacted before it is written (memd.opsvalidate).

Design choices:

- A rule matches a *context* but marks only the *secret part* (the named group
  `secret`), so `postgres://alice:pw@db` keeps `alice`, `API_KEY=…` keeps the
  name, and the reader of a redacted text still knows what was there.
- Rules favour recall over precision: replacing a harmless string costs a
  word of context; letting a key through can cost the user the key.
- Every pattern is linear: character classes that cannot overlap their
  neighbours, bounded repeats, no nested unbounded quantifiers over the same
  characters. A substring pre-check skips rules whose literal anchor is
  absent, and patterns start with their literal so the regex engine can skip
  ahead: a megabyte of ordinary text takes well under a second.
- Overlapping findings are merged into one span (labelled with the most
  specific rule), so the union of everything any rule flagged is redacted.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["Rule", "PemRule", "RULES", "find_secrets", "redact", "contains_secret"]


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
    """

    name: str
    pattern: re.Pattern[str]
    pattern_ci: re.Pattern[str] | None  # IGNORECASE fallback when lowering shifts offsets
    groups: tuple[str, ...]
    hints: tuple[str, ...] = ()
    boundary: bool = False
    accept: Callable[[str, re.Match[str]], bool] | None = None

    @property
    def ci(self) -> bool:
        return self.pattern_ci is not None

    def spans(self, text: str, lowered: str | None = None) -> Iterator[tuple[int, int]]:
        """Secret spans of this rule in `text` (`lowered` is `text.lower()`, if at hand)."""
        haystack, pattern = text, self.pattern
        if self.pattern_ci is not None:
            lowered = text.lower() if lowered is None else lowered
            # Lowering keeps offsets unless a character expands (İ → i̇); then search as is.
            if len(lowered) == len(text):
                haystack = lowered
            else:
                pattern = self.pattern_ci
        for m in pattern.finditer(haystack):
            if self.boundary and not _starts_word(text, m.start()):
                continue
            if self.accept is not None and not self.accept(text, m):
                continue
            for group in self.groups:
                start, end = m.span(group)
                if end > start:
                    yield start, end
                    break


def _starts_word(text: str, i: int) -> bool:
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


def _rule(
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
    pattern = re.compile(regex)
    groups = tuple(g for g in pattern.groupindex if g.startswith("secret"))
    pattern_ci = re.compile(regex, re.IGNORECASE) if ci else None
    return Rule(name, pattern, pattern_ci, groups, hints, boundary, accept)


_B64URL = r"A-Za-z0-9_\-"
# Names of .env-style variables that hold secrets (upper case, as in .env files): the
# keyword must end the name or one of its `_` segments, so MONKEY counts but
# KEYBOARD_LAYOUT and SECRETARY do not. Checked in Python on a bounded name, because
# as one regex the prefix and the trailing segments compete and a long
# KEY_KEY_KEY… word backtracks quadratically.
_ENV_NAME = re.compile(
    r"[A-Z0-9_]*(?:KEY|SECRET|TOKEN|PASSWORD|PASSWD|PWD|CREDENTIAL)S?(?:_[A-Z0-9]+)*"
)
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})  # the shell's working directories


def _env_name_is_secret(text: str, m: re.Match[str]) -> bool:
    name = m.group("name")
    return name not in _NOT_SECRET_NAMES and _ENV_NAME.fullmatch(name) is not None


# Lower/mixed-case names in code and config: the keyword must end the name (it is
# followed by the assignment). Bare "key" is too common (sort_key) to count.
_CODE_KEYWORD = (
    r"(?:password|passwd|pwd|secret|token|credential|"
    r"api[_\-]?key|access[_\-]?key|private[_\-]?key|secret[_\-]?key|auth[_\-]?key)s?"
)


def _after_scheme(text: str, m: re.Match[str]) -> bool:
    """`://` counts only after a URL scheme (a letter or digit right before it)."""
    return m.start() > 0 and text[m.start() - 1].isalnum()


_PEM_BEGIN = re.compile(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")
# A block cut short (a truncated paste, a `head` of the file) still leaks its body:
# take what looks like base64 and headers after BEGIN, real or JSON-escaped newlines.
_PEM_TAIL = re.compile(r"(?:[A-Za-z0-9+/=\s:,\-]|\\[nr])*")
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


Detector = Rule | PemRule

# Order matters only for labels: when spans overlap, the earlier rule names the merged span.
RULES: tuple[Detector, ...] = (
    PemRule(),
    _rule("anthropic", rf"sk-ant-[{_B64URL}]{{20,}}", ("sk-ant-",)),
    _rule(
        "openai",
        rf"sk-(?:(?:proj|svcacct|admin)-[{_B64URL}]{{40,}}|[A-Za-z0-9]{{32,}})",
        ("sk-",),
        boundary=True,  # "disk-<hash>" is not a key
    ),
    _rule(
        "aws-access-key-id",
        r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
        ("AKIA", "ASIA", "ABIA", "ACCA"),
    ),
    _rule(
        "aws-secret-access-key",
        r"aws_?secret_?access_?key[\"']?\s*[:=]\s*[\"']?(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        ("secret",),
        ci=True,
        boundary=True,
    ),
    _rule("github", r"gh[pousr]_[A-Za-z0-9]{36,255}\b", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    _rule("github-pat", r"github_pat_[A-Za-z0-9_]{40,255}", ("github_pat_",)),
    _rule("gitlab", rf"glpat-[{_B64URL}]{{20,}}", ("glpat-",)),
    _rule("slack", r"xox[baprs]-[A-Za-z0-9\-]{10,}", ("xox",)),
    _rule("stripe", r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}", ("_live_", "_test_")),
    _rule("google-api-key", rf"AIza[{_B64URL}]{{35}}(?![{_B64URL}])", ("AIza",)),
    _rule("jwt", rf"eyJ[{_B64URL}]{{8,}}\.eyJ[{_B64URL}]{{8,}}\.[{_B64URL}]*", ("eyJ",)),
    _rule(
        "url-password",
        # scheme://user:password@host: keep the user, take the password.
        r"://[^\s:/?#@'\"]{0,256}:(?P<secret>[^\s/?#@'\"]{1,256})@",
        ("://",),
        boundary=False,
        accept=_after_scheme,
    ),
    _rule(
        "bearer",
        r"bearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{12,}=*)",
        ("bearer",),
        ci=True,
        boundary=True,
    ),
    _rule(
        "basic-auth",
        r"authorization[\"']?\s*[:=]\s*[\"']?basic\s+(?P<secret>[A-Za-z0-9+/]{8,}=*)",
        ("basic",),
        ci=True,
        boundary=True,
    ),
    _rule(
        "api-key-header",
        rf"x-api-key[\"']?\s*[:=]\s*[\"']?(?P<secret>[{_B64URL}]{{16,}})",
        ("x-api-key",),
        ci=True,
        boundary=True,
    ),
    _rule(
        "env-assignment",
        # NAME=value, NAME: value, export NAME="value", "NAME": "value"; not NAME=$OTHER.
        # Quotes may arrive JSON-escaped (\\"); the name may follow a JSON \\n.
        # The lookbehinds anchor the name in the regex (a Python check would come after
        # a 128-character attempt at every offset).
        r"(?:(?<![A-Za-z0-9_])|(?<=\\[ntr]))(?P<name>[A-Z0-9_]{1,128})\b\\?[\"']?[ \t]*[=:][ \t]*(?!\$)"
        # A quoted secret ends before an escaping backslash, so `\\"` survives intact.
        r"(?:\\?\"(?!\$)(?P<secret>[^\"\r\n]{0,4095}[^\"\r\n\\])\\?\""
        r"|\\?'(?P<secret_sq>[^'\r\n]{0,4095}[^'\r\n\\])\\?'"
        r"|(?P<secret_bare>(?:[^\s\"'`\\]|\\(?![nrt\"'])){1,4096}))",
        ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "PWD", "CREDENTIAL"),
        accept=_env_name_is_secret,
    ),
    _rule(
        "secret-assignment",
        # api_key = "…", db_password: '…', "token": "…": quoted literals of 6+ characters.
        rf"{_CODE_KEYWORD}\\?[\"']?\s*(?::=|=>|[=:])\s*\\?[\"'](?!\$)"
        r"(?P<secret>[^\s\"']{5,4095}[^\s\"'\\])\\?[\"']",
        ("pass", "pwd", "secret", "token", "credential", "key"),
        ci=True,
        boundary=False,
    ),
)


_PLACEHOLDER = re.compile(r"\[REDACTED:[a-z0-9-]{1,40}\]")


def _applicable(rule: Detector, text: str, lowered: str) -> bool:
    """The cheap pre-check: `in` runs at memchr speed, a regex scan does not."""
    if not rule.hints:
        return True
    haystack = lowered if rule.ci else text
    return any(h in haystack for h in rule.hints)


def find_secrets(text: str) -> list[tuple[str, tuple[int, int]]]:
    """Every secret in `text` as (rule name, (start, end)), sorted, non-overlapping.

    Spans cover only the secret part of a match; overlapping findings are merged.
    A finding that is exactly an earlier placeholder (`API_KEY=[REDACTED:…]`)
    is not a secret: redacting twice changes nothing.
    """
    if not text:
        return []
    lowered = text.lower()
    found: list[tuple[int, int, int]] = []  # (start, end, rule index)
    for idx, rule in enumerate(RULES):
        if not _applicable(rule, text, lowered):
            continue
        found.extend(
            (start, end, idx)
            for start, end in rule.spans(text, lowered)
            if not _PLACEHOLDER.fullmatch(text, start, end)
        )
    return _merge(found)


def _merge(found: list[tuple[int, int, int]]) -> list[tuple[str, tuple[int, int]]]:
    """Union overlapping spans; the most specific (earliest-listed) rule names the result."""
    found.sort()
    merged: list[list[int]] = []
    for start, end, idx in found:
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], end)
            last[2] = min(last[2], idx)
        else:
            merged.append([start, end, idx])
    return [(RULES[idx].name, (start, end)) for start, end, idx in merged]


def redact(text: str) -> str:
    """`text` with every secret replaced by `[REDACTED:<rule>]`."""
    spans = find_secrets(text)
    if not spans:
        return text
    parts: list[str] = []
    pos = 0
    for name, (start, end) in spans:
        parts.append(text[pos:start])
        parts.append(f"[REDACTED:{name}]")
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def contains_secret(text: str) -> bool:
    """Whether any rule fires; for callers that reject rather than redact."""
    return bool(find_secrets(text))
