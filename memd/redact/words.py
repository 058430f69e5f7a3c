"""Password and token words in the languages people write in, and the value said after them.

`我们的测试数据库密码是 …`, `部署用的访问令牌：…`, `本番サーバーのパスワード：…`, `пароль от админки: …`,
`le mot de passe du VPN est …`, `das Passwort für den Server ist …`: a keyword, a few words about
what it opens (bounded), a separator (`:`, `：`, `=`, `是`, `は`, `는`, a copula such as `is`, `est`,
`ist`, `é`, `lautet`), and a value. The value is a secret only if it looks like one (letters and
digits, or a mixed-case string with symbols); the prose around it ("the password is stored in the
vault", "密码不要写在代码里") has no such value and stays.

Cost: the keywords are found once per text. Those starting with an ASCII letter by `str.find` on the
lowered text (shared through `Hits` with the other keyword rules); the others by one regex whose
first characters are all non-ASCII, which the regex engine skips through at memchr-like speed, and
only when the text is not pure ASCII (`str.isascii` is O(1)).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from memd.redact.detectors import Hits, same_length_lower
from memd.redact.lazyre import lazy
from memd.redact.vetting import is_placeholder, value_is_secret_shaped

__all__ = ["ASCII_WORDS", "WordRule"]

# Keywords starting with an ASCII letter: found with str.find (`pass` is the other rules' root, already found).
# English is `memd.redact.rules`' prose and assignment rules: code (`password = os.environ[…]`) is theirs to judge.
ASCII_WORDS = ("pass", "senha", "wachtwoord", "kennwort", "contrase", "hasło", "lösenord")
# Keywords starting with a non-ASCII character (CJK, Japanese, Korean, Cyrillic, Greek, Turkish, …).
_OTHER_FIRST = lazy("[密口令秘凭憑授パト暗シ비패암토птксглşκסร]")
_OTHER_WORDS = lazy(
    "密码|密碼|口令|密钥|密鑰|秘钥|秘鑰|令牌|凭证|憑證|授权码|パスワード|トークン|暗証番号|秘密鍵|シークレット|"
    "비밀번호|패스워드|암호|토큰|парол|токен|ключ|секрет|гасло|лозинк|şifre|κωδικ|סיסמ|รหัสผ่าน"
)
_PASS_FORMS = ("passwort", "passord", "passe")
# What a root found by `find` must read as: pass → passwort, passord, (mot de) passe.
_ASCII_KEYWORD = lazy(
    r"pass(?:wort|ord|e(?![a-z]))|senha|wachtwoord|kennwort|contrase[ñn]a|hasło|lösenord"
)
# After the keyword (and, for an alphabetic script, at most 3 more letters: an inflection such as пароля,
# lösenordet, şifresi, senhas): a bounded gap naming what it opens (no sentence end), a separator, an
# optional opening quote, the value. Separators are found by one scan of the gap for where one may start,
# then matched there: a lazy gap in the regex would retry every separator at every gap length.
_VALUE = r"(?P<open>[\"'`「『“‘«]?)(?P<value>[A-Za-z0-9!#$%&*+\-./:=?@^_~|]{6,256})"
_COPULAS = "is|was|are|est|es|era|ist|lautet|é|è|e|är|er|on|jest|to|je|zijn|sind|son|sont|são"
_SEP_START = lazy(rf"[:：=＝\-是为為はが는은이가]|[ \t](?:{_COPULAS})[ \t]")
_SEP_VALUE = lazy(
    r"(?:[:：=＝]|->|=>|是|为|為|は|が|는|은|이|가)[ \t]*[:：]?[ \t]*"
    rf"|[ \t](?:{_COPULAS})[ \t]*[:：]?[ \t]+"
)
_AFTER_SEP = lazy(_VALUE)
# Or the value right after the keyword and a gap (`密码 xq7…`).
_BARE = lazy(r"[ \t]+" + _VALUE)
_GAP = 48
_DENSE = 16
_GAP_END = lazy(r"[\n\r.;!?。！？；，\"'`]")
_TRAILING = ".,;:!?)]}>\"'`"


@dataclass(frozen=True)
class WordRule:
    """A password or token word in any of the common languages, a short gap, a separator, a value."""

    name: str
    hints: tuple[str, ...] = ()
    ci: bool = True

    def spans(self, text: str, lowered: str | None = None, hits: Hits | None = None) -> Iterator[tuple[int, int]]:
        low = same_length_lower(text, lowered)
        if hits is None or hits.low is not low:
            hits = Hits(low)
        # `pass` is every rule's root: its hits are mostly English (password), passed over at C speed.
        ascii_hits = sorted([i for i in hits.of("pass") if low.startswith(_PASS_FORMS, i)]
                            + [i for root in ASCII_WORDS[1:] for i in hits.of(root)])
        other = not text.isascii()
        allowed = 0  # past a value already read, or past a keyword whose window held none (see _DENSE)
        k = 0
        nxt: tuple[int, int, bool] | None = None
        while True:
            while k < len(ascii_hits) and ascii_hits[k] < allowed:
                k += 1
            if other and (nxt is None or nxt[0] < allowed):
                nxt = _next_other(low, allowed)  # searched again only once passed: linear
                other = nxt is not None
            if k < len(ascii_hits) and (nxt is None or ascii_hits[k] <= nxt[0]):
                start, kw = ascii_hits[k], _ASCII_KEYWORD.match(low, ascii_hits[k])
                k += 1
                if kw is None:
                    continue
                end, wordy = kw.end(), True
            elif nxt is not None:
                start, end, wordy = nxt
                nxt = None
            else:
                return
            span = self._value(text, low, start, end, wordy)
            if span is None:
                allowed = max(allowed, start + _DENSE)
            else:
                allowed = max(allowed, span[1])
                yield span

    @staticmethod
    def _value(text: str, low: str, start: int, end: int, wordy: bool) -> tuple[int, int] | None:
        k = low.rfind("://", max(0, start - 128), start)
        if k >= 0 and not any(c in low[k + 3 : start] for c in " \t\n/@"):
            return None  # https://x-access-token:…@host: the URL rules' business
        j = end
        if wordy:
            while j < len(low) and j - end <= 3 and low[j].isalpha():
                j += 1
            if j - end > 3:
                return None  # inside a longer word: Passwortänderung, tokenizer
        bare = _BARE.match(low, j)
        span = _vetted(text, bare) if bare is not None else None
        if span is not None:
            return span
        stop = _GAP_END.search(low, j, j + _GAP + 1)
        limit = stop.start() if stop else min(len(low), j + _GAP + 1)
        for tries, sep in enumerate(_SEP_START.finditer(low, j, limit)):
            if tries == 4 or low.count(" ", j, sep.start()) > 5:
                return None  # a sentence rather than what the secret opens
            s_ = _SEP_VALUE.match(low, sep.start())
            m = _AFTER_SEP.match(low, s_.end()) if s_ else None
            if m is not None:
                return _vetted(text, m)
        return None


def _next_other(low: str, pos: int) -> tuple[int, int, bool] | None:
    """The next non-ASCII keyword at or after `pos`: (start, end, whether its script ends words)."""
    while True:
        f = _OTHER_FIRST.search(low, pos)
        if f is None:
            return None
        m = _OTHER_WORDS.match(low, f.start())
        if m is not None:
            return m.start(), m.end(), m.group(0)[0] < "ㄱ"  # alphabetic scripts end a word
        pos = f.start() + 1


def _vetted(text: str, m: re.Match[str]) -> tuple[int, int] | None:
    s, e = m.span("value")
    value = text[s:e]
    if m.group("open"):
        closer = {"「": "」", "『": "』", "“": "”", "‘": "’", "«": "»"}.get(m.group("open"), m.group("open"))
        cut = value.find(closer) if closer in value else -1
        value = value[:cut] if cut >= 0 else value
    value = value.rstrip(_TRAILING)
    if len(value) < 6 or is_placeholder(value) or not value_is_secret_shaped(value):
        return None
    return s, s + len(value)
