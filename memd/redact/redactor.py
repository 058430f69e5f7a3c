"""Secret redaction, in the spirit of gitleaks.

Transcripts hold whatever passed through a terminal: keys pasted into a chat,
`.env` files the agent read, `curl -u user:pass` lines. None of that may leave
the machine in a prompt, nor be frozen into a memory file or a log line. Every
model call redacts its prompts here (memd.llm.client), every memory body a model
proposes is redacted before it is written (memd.memory.operations), summaries are
redacted before they are written (jobs.summary), and every log event's strings
are redacted before they are rendered (memd.logs.events).

Where things are: this module is the engine (`redact`, `find_secrets`,
`may_hold_secret`, `contains_secret`: run the rules, merge what they find, write
the placeholders). The rules — token formats (most ported from gitleaks, with
its MIT attribution), contexts (`.env` lines, assignments, URLs, headers, command
lines, prose) and PEM blocks — are `memd.redact.rules`; the detector kinds, whose
regexes are compiled on first use, `memd.redact.detectors`; what a context rule
accepts as a secret rather than a placeholder or code, `memd.redact.vetting`.

Design choices:

- A rule matches a *context* but marks only the *secret part* (the named group
  `secret`), so `postgres://alice:pw@db` keeps `alice`, `API_KEY=…` keeps the
  name, and the reader of a redacted text still knows what was there.
- Rules favour recall over precision: replacing a harmless string costs a
  word of context; letting a key through can cost the user the key. But a
  *placeholder* is not a secret and survives: a template (`<password>`,
  `${TOKEN}`, `{{ secrets.X }}`, `$VAR`), a mask (`xxx`, `****`, `...`) or a
  well-known dummy (`changeme`, `your-api-key-here`, `YOUR_API_KEY`);
  redacting it would hide what the text is about and protect nothing. Context
  rules also leave code that *refers* to a secret (`password=password`,
  `api_key=settings.API_KEY`, `token: str`, `secret = get_secret("x")`).
- Every pattern is linear: character classes that cannot overlap their
  neighbours, bounded repeats, no nested unbounded quantifiers over the same
  characters, and rules that look around a match (a command line, a name)
  look a bounded distance. A substring pre-check skips rules whose literal
  anchor is absent, patterns start with their literal so the regex engine can
  skip ahead, and the keyword-led rules find their keywords with `str.find`
  once, shared (`Hits`): redaction runs on every model request and every file
  and log write, and a 50 KB transcript span takes about 4 ms on a slow
  2-core machine, 20 to 80 times less than the detectors built for scanning
  repositories (bench/bench_secrets.py, bench/RESULTS.md "Secrets").
- Overlapping findings are merged into one span (labelled with the most
  specific rule), so the union of everything any rule flagged is redacted.
- The placeholder written in place of a secret is `[REDACTED:<rule>]`, stable
  across versions (tests pin it), and never itself taken for a secret.
"""

from __future__ import annotations

import re

from memd.redact.detectors import Hits, KeywordRule, same_length_lower
from memd.redact.lazyre import lazy
from memd.redact.rules import RULES
from memd.redact.views import base64_spans, decoded_view
from memd.redact.words import WordRule

__all__ = [
    "contains_secret",
    "find_secrets",
    "may_hold_secret",
    "redact",
]

_PLACEHOLDER = lazy(r"\[REDACTED:[a-z0-9-]{1,40}\]")


def _applicable(rule: object, text: str, lowered: str) -> bool:
    """The cheap pre-check: `in` runs at memchr speed, a regex scan does not."""
    hints: tuple[str, ...] = getattr(rule, "hints", ())
    if not hints:
        return True
    haystack = lowered if getattr(rule, "ci", False) else text
    return any(h in haystack for h in hints)


_DEPTH = 2  # base64 inside base64 (a .dockerconfigjson's `auth`), and no deeper


def find_secrets(text: str, _depth: int = 0) -> list[tuple[str, tuple[int, int]]]:
    """Every secret in `text` as (rule name, (start, end)), sorted, non-overlapping.

    Spans cover only the secret part of a match; overlapping findings are merged.
    A finding that is exactly an earlier placeholder (`API_KEY=[REDACTED:…]`)
    is not a secret: redacting twice changes nothing. The rules also run on the
    text decoded (`memd.redact.views`: escapes, control sequences, wrapped
    tokens), whose findings are mapped back to the original characters, and a
    base64 run whose decoded text holds a secret is one finding, named by the
    rule that fired inside.
    """
    if not text:
        return []
    found = _scan(text)
    view = decoded_view(text)
    if view is not None:
        for start, end, idx in _scan(view.text):
            found.append((*view.original(start, end), idx))
    if _depth < _DEPTH:
        inner: list[int] = []

        def holds(decoded: str) -> bool:
            got = find_secrets(decoded, _depth + 1)
            if got:
                inner.append(min(_RANK[name] for name, _ in got))
            return bool(got)

        for start, end in base64_spans(text, holds):
            found.append((start, end, inner[-1]))
    found = [f for f in found if not _in_placeholder(text, f[0], f[1])]
    return _merge(found)


_RANK: dict[str, int] = {}
for _i, _r in enumerate(RULES):
    _RANK.setdefault(_r.name, _i)


def _scan(text: str) -> list[tuple[int, int, int]]:
    """Every rule on `text` as it is: (start, end, rule index)."""
    lowered = same_length_lower(text, None)
    hits = Hits(lowered)
    found: list[tuple[int, int, int]] = []
    for idx, rule in enumerate(RULES):
        if not _applicable(rule, text, lowered):
            continue
        if isinstance(rule, KeywordRule | WordRule):
            spans = rule.spans(text, lowered, hits)
        else:
            spans = rule.spans(text, lowered)
        found.extend((start, end, idx) for start, end in spans)
    return found


def _in_placeholder(text: str, start: int, end: int) -> bool:
    """Whether [start, end) lies inside a `[REDACTED:…]` written by an earlier pass."""
    if _PLACEHOLDER.fullmatch(text, start, end):
        return True
    open_ = text.rfind("[REDACTED:", max(0, start - 51), end)
    if open_ < 0:
        return False
    m = _PLACEHOLDER.match(text, open_)
    return m is not None and m.start() <= start and end <= m.end()


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


# Something every rule needs: a run of 16 token characters (every token format, base64 blocks),
# or a keyword or marker that a context rule starts from. Checked by `may_hold_secret`, and
# tests/redact/test_redact.py keeps it an over-approximation of `find_secrets`.
_MAYBE = lazy(
    r"[A-Za-z0-9_+/=.~\-]{16}|pass|pwd|secret|token|key|auth|cred|sig|bearer|basic|private|machine|://|-[pu]"
    # escapes and control sequences (decoded before matching), wrapped prefixes, other languages' words
    r"|\x1b|\\u|\\x|gh[pousr]_|gl[a-z]{1,5}-|sk-|k_|xox|npm_|hf_|hvs\.|nra|akia|session|sessid|\.sid="
    r"|密|口令|令牌|钥|鑰|碼|凭证|憑證|授权码|パスワ|トークン|暗証|秘密鍵|シークレット|비밀|패스워|암호|토큰|парол|токен|ключ|секрет|гасло|лозинк"
    r"|senha|wachtw|kennw|contras|heslo|has[łl]o|clave|parol|[sş]ifre|lösen|jeton|mdp|salasana|κωδικ|סיסמ|รหัสผ่าน",
    re.IGNORECASE,
)


def may_hold_secret(text: str) -> bool:
    """A cheap pre-check: False means `find_secrets(text)` is empty; True means look.

    For callers with many short strings (log events), where the full rule set's fixed
    cost per call would dominate.
    """
    return len(text) >= 5 and _MAYBE.search(text) is not None


def contains_secret(text: str) -> bool:
    """Whether any rule fires; for callers that reject rather than redact."""
    return bool(find_secrets(text))
