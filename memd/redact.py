"""Secret redaction, in the spirit of gitleaks.

Transcripts hold whatever passed through a terminal: keys pasted into a chat,
`.env` files the agent read, `curl -u user:pass` lines. None of that may leave
the machine in a prompt, nor be frozen into a memory file or a log line. Every
model call redacts its prompts here (memd.llm), every memory body a model
proposes is redacted before it is written (memd.opsvalidate), summaries are
redacted before they are written (jobs.summary), and every log event's strings
are redacted before they are rendered (memd.logs).

Three families of detectors:

- *Token formats*: credentials with a recognisable shape (`sk-ant-`, `ghp_`,
  `xapp-`, `npm_`, `hf_`, `dapi…`, `SG.….…`, a Telegram bot token). Most are
  ported from gitleaks' published rules (config/gitleaks.toml,
  https://github.com/gitleaks/gitleaks, MIT licence, Copyright (c) 2019 Zachary
  Rice), rewritten to start with their literal and to run on Python's `re`;
  each ported rule says `(gitleaks: <rule id>)`.
- *Contexts*: a value is a secret because of where it stands: `.env` lines
  (`API_TOKEN=…`), assignments in code and config (`password: …`,
  `"clientSecret": "…"`), URLs (`://user:pass@`, `?access_token=`, `&sig=`),
  HTTP headers (`Authorization: Token …`, `X-Auth-Key: …`), command lines
  (`mysql -p…`, `curl -u user:pass`, `--api-token …`, `sshpass -p …`), and
  prose (`the password is …`).
- *Blocks*: PEM private keys, also base64-encoded (a kubeconfig's `client-key-data`).

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

import base64
import binascii
import bisect
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = [
    "RULES",
    "PemRule",
    "Rule",
    "contains_secret",
    "find_secrets",
    "is_placeholder",
    "may_hold_secret",
    "redact",
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
    groups = tuple(_SECRET_GROUP.findall(regex))
    return Rule(name, regex, groups, hints, boundary, accept, ci)


_SECRET_GROUP = re.compile(r"\(\?P<(secret\w*)>")


@functools.cache
def _compiled(regex: str, flags: int) -> re.Pattern[str]:
    return re.compile(regex, flags)


_LITERAL = re.compile(r"(?:[A-Za-z0-9_~\-]|\\[.\-])+")


def _token(name: str, regex: str, *hints: str, boundary: bool = True) -> Rule:
    """A token format: the whole match is the secret, and it must not run on into more word characters.

    Without `hints`, the regex's literal prefix (`dapi`, `hvs.`) is the pre-check.
    """
    if not hints:
        m = _LITERAL.match(regex)
        if m is None:
            raise ValueError(f"{name}: {regex!r} has no literal prefix")
        hints = (m.group(0).replace("\\", ""),)
    return _rule(name, regex + r"(?![A-Za-z0-9])", hints, boundary=boundary)


def _tokens(name: str, *regexes: str) -> tuple[Rule, ...]:
    """Several formats under one label, each its own literal-first rule (an alternation would lose the skip)."""
    return tuple(_token(name, r) for r in regexes)


# --- placeholders --------------------------------------------------------------------------

_MASK = re.compile(r"[xX*.•…#?_\-]+")
_DUMMIES = frozenset({
    "changeme", "change_me", "change-me", "changeit", "password", "passwd", "secret", "token",
    "apikey", "api_key", "api-key", "example", "sample", "dummy", "placeholder", "redacted",
    "hidden", "masked", "none", "null", "nil", "undefined", "empty", "todo", "tbd", "fixme",
    "foo", "bar", "foobar", "test", "testing", "required", "optional", "string", "str", "pass", "pw",
})
# A value naming where a secret lives: ANTHROPIC_AUTH_TOKEN, "challengePassword", privateKeyUsagePeriod.
_ENV_REF = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_NAMES_A_SECRET = re.compile(r"key|token|secret|passw|credential", re.IGNORECASE)
_DUMMY_PARTS = re.compile(r"your|here\b|_here|-here|replace|placeholder|changeme|change[_-]me|redacted|\.\.\.|…")


def is_placeholder(value: str) -> bool:
    """Whether `value` stands for a secret rather than being one.

    A template (`<password>`, `${X}`, `{{ x }}`, `%(x)s`, `$X`), a mask (`xxx`,
    `****`, `...`), a well-known dummy (`changeme`, `YOUR_API_KEY`,
    `your-api-key-here`), or a value that is mostly an ellipsis (`sk-...`).
    """
    v = value.strip().strip("\"'`")
    if not v:
        return True
    if v[0] in "<$%{[(@" or v.startswith("{{"):
        return True
    if _MASK.fullmatch(v):
        return True
    low = v.lower()
    if low in _DUMMIES:
        return True
    if (_ENV_REF.fullmatch(v) or (v.isidentifier() and not any(c.isdigit() for c in v))) and _NAMES_A_SECRET.search(v):
        return True  # a reference to a secret (an env var's or a field's name), not its value
    if _DUMMY_PARTS.search(low):
        # An elided value keeps too little to matter; a long one with "here" in it may be real.
        return len(low.replace(".", "").replace("…", "")) <= 40 or "..." in low or "…" in low
    return False


# --- context vetting -------------------------------------------------------------------------

# Names of .env-style variables that hold secrets (upper case, as in .env files): the
# keyword must end the name or one of its `_` segments, so MONKEY counts but
# KEYBOARD_LAYOUT and SECRETARY do not. Checked in Python on a bounded name, because
# as one regex the prefix and the trailing segments compete and a long
# KEY_KEY_KEY… word backtracks quadratically.
_ENV_NAME = re.compile(
    r"[A-Z0-9_]*(?:KEY|SECRET|TOKEN|PASSWORD|PASSWD|PWD|CREDENTIAL)S?(?:_[A-Z0-9]+)*"
)
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})  # the shell's working directories
_KEYWORD_LAST = re.compile(r"(?:KEY|SECRET|TOKEN|PASSWORD|PASSWD|PWD|CREDENTIAL)S?$")
# KEY alone names a credential only after a qualifier (API_KEY, SECRET_KEY, OPENAI_APIKEY);
# STORAGE_KEY, SORT_KEY, HOTKEY name keys of a map, a sort, a keyboard.
_KEY_QUALIFIERS = frozenset({
    "API", "SECRET", "PRIVATE", "ACCESS", "AUTH", "APP", "APPLICATION", "ACCOUNT", "MASTER", "SIGNING",
    "ENCRYPTION", "CLIENT", "LICENSE", "SERVICE", "ADMIN", "DEPLOY", "SSH", "GPG", "PGP", "HMAC", "JWT",
    "SESSION", "COOKIE", "WEBHOOK", "BOT", "SERVER", "SHARED", "SIGNATURE",
})
_OTHER_KEYWORDS = ("SECRET", "TOKEN", "PASSWORD", "PASSWD", "PWD", "CREDENTIAL")


def _is_bare_key_name(name: str) -> bool:
    segs = name.split("_")
    if any(kw in seg for seg in segs for kw in _OTHER_KEYWORDS):
        return False
    for i, seg in enumerate(segs):
        head = seg[:-4] if seg.endswith("KEYS") else seg[:-3] if seg.endswith("KEY") else None
        if head is None:
            continue
        if head in _KEY_QUALIFIERS or (not head and i > 0 and segs[i - 1] in _KEY_QUALIFIERS):
            return False
    return True


# A keyword followed by one of these segments names something about a secret, not the secret:
# PASSWORD_MIN_LENGTH, TOKEN_EXPIRY_SECONDS, API_KEY_FILE, SECRET_ARN.
_ABOUT_SUFFIXES = frozenset({
    "FILE", "PATH", "DIR", "URL", "URI", "ENDPOINT", "HOST", "PORT", "LENGTH", "LEN", "SIZE", "MIN",
    "MAX", "TTL", "TIMEOUT", "EXPIRY", "EXPIRES", "EXPIRATION", "SECONDS", "MINUTES", "HOURS", "DAYS",
    "NAME", "TYPE", "HEADER", "PREFIX", "FORMAT", "ALGORITHM", "ALG", "ENABLED", "REQUIRED", "COUNT",
    "LIMIT", "VERSION", "ID", "ARN", "REGION", "MODE", "POLICY", "ROTATION", "LOCATION", "PARALLELISM",
})


def _env_name_is_secret(text: str, m: re.Match[str]) -> bool:
    name = m.group("name")
    if name in _NOT_SECRET_NAMES or _ENV_NAME.fullmatch(name) is None:
        return False
    if text[max(0, m.start("name") - 1) : m.start("name")] in ("{", "$"):  # ${DB_PASSWORD:?required}
        return False
    if name.rsplit("_", 1)[-1] in _ABOUT_SUFFIXES:
        return False
    value = m.group("secret") or m.group("secret_sq") or m.group("secret_bare") or ""
    if is_placeholder(value):
        return False
    bare = m.group("secret_bare")
    if bare is not None and ("(" in bare or "[" in bare or _DOTTED_IDENT.fullmatch(bare) or _ENV_REF.fullmatch(bare)):
        return False  # SECRET_KEY = os.environ.get(…), TOKEN = settings.TOKEN, X_TOKEN = SAMPLE_RATE: code
    spaced = bare is not None and " =" in text[m.end("name") : m.start("secret_bare")]
    if spaced and not _token_like(value, 8):
        return False  # `NAME = value` with spaces and a bare value is code (a .env has none): KEY_TYPE_SECRET = 2
    if _is_bare_key_name(name) or not _KEYWORD_LAST.search(name):
        # STORAGE_KEY = 'todos', SORT_KEY=created_at: a key *name*; _SSHKEY_CERT_MAX_PRINCIPALS = 256:
        # something about keys. Only a token-like value counts.
        return _token_like(value, 12)
    return True


def _token_like(value: str, min_len: int) -> bool:
    return len(value) >= min_len and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _after_scheme(text: str, m: re.Match[str]) -> bool:
    """`://` counts only after a URL scheme (a letter or digit right before it)."""
    return m.start() > 0 and text[m.start() - 1].isalnum() and not is_placeholder(m.group("secret"))


# Names in code and config, any case, whose *last* part says "secret" (db_password,
# spring.datasource.password, adminApiAccessToken, DD-API-KEY, client_secret). Bare
# "key" is too common (sort_key, primary_key) to count: it needs a qualifier before
# it (api_key, secretKey, DD-APPLICATION-KEY); plural "tokens" is a count.
_ROOTS = ("pass", "pwd", "secret", "token", "credential", "key")  # found once, shared by the keyword rules
_ASSIGN_KEYWORD = re.compile(r"pass(?:word|wd|phrase)|pwd|secret|token|credentials?|key")
_KEY_QUALIFIER = re.compile(
    r"(?:api|access|secret|private|auth|app|application|account|master|signing|encryption|client)[_\-]?$"
)
_ASSIGN_TAIL = re.compile(
    # The name ends here: an optional closing quote (JSON-escaped or not), the separator.
    r"(?P<q>\\?[\"']?)[ \t]*(?P<sep>:=|=>|=|:)[ \t]*"
    # A quoted value (up to its closing quote on the line) or a bare one.
    r"(?:(?P<open>\\?[\"'`])(?P<quoted>[^\"'`\r\n\\]{1,1024})|(?P<bare>[^\s\"'`<>\\,;(){}\[\]]{1,1024}))"
)
# The name before a keyword, read back: the lookbehind makes every start but the run's first fail at once.
_NAME_CHARS = re.compile(r"(?<![a-z0-9_.\-])[a-z0-9_.\-]{0,64}$")
# Names ending in a keyword that are not secrets.
_NOT_SECRET_PREFIXES = frozenset({"page", "next", "nextpage", "next_page", "continuation", "pagination", "csrf",
                                   "xsrf", "cancellation", "cancel", "sync", "resume", "public", "publishable", "max",
                                   "num", "pwd", "oldpwd"})
_TYPE_WORDS = frozenset({
    "str", "string", "bytes", "int", "bool", "boolean", "any", "none", "null", "nil", "undefined", "true",
    "false", "yes", "no", "on", "off", "optional", "secretstr", "object", "number", "required", "prompt",
    "stdin", "env", "file", "inherit", "text", "password", "secret", "token", "hidden", "masked",
})
_DOTTED_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z_$][A-Za-z0-9_$]*)+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL_TYPE = re.compile(r"(?:[A-Z][a-z]+)+")
_PATH_LIKE = re.compile(r"(?:/|~/|\./|\.\./|[A-Za-z]:\\|[a-z][a-z0-9+.\-]*://)")


def _bare_value_is_secret(value: str, sep: str, name: str, after: str) -> bool:
    """Whether an unquoted value after `name<sep>` is a literal secret rather than code or prose."""
    if len(value) < 6 or is_placeholder(value) or _PATH_LIKE.match(value):
        return False
    if after and after in "([":
        return False  # a call or an index: os.getenv(…), secrets["x"]
    low = value.lower()
    if low in _TYPE_WORDS or low == name or low.endswith(("password", "token", "secret", "key")):
        return False
    if value.isdigit():
        return len(value) >= 12  # a count or an id, unless it is long enough to be a PIN-like secret
    if _DOTTED_IDENT.fullmatch(value):
        return False  # settings.API_KEY, self._token
    if sep == ":" and after in (",", ")") and _IDENT.fullmatch(value):
        return False  # def f(private_key: PKCS7PrivateKeyTypes, …): a parameter's type
    if _IDENT.fullmatch(value) and not any(c.isdigit() for c in value):
        if sep != ":":
            return False  # password = user_password: a variable
        if _CAMEL_TYPE.fullmatch(value):
            return False  # token: Token (a type)
        return after in ("", "\n", "\r", "\\")  # YAML `password: letmein` at the end of its line
    return True


_VERSION = re.compile(r"[\^~<>=v]{0,3}\d+(?:\.[\dx*]+){1,3}(?:[\-+][0-9A-Za-z.\-]+)?")


_COLOR = re.compile(r"#(?:[0-9a-fA-F]{3,4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})")
# Words after `--password` or `secret:` in documentation, not values.
_PROSE_WORDS = frozenset({
    "option", "options", "flag", "flags", "argument", "arguments", "arg", "args", "parameter", "parameters",
    "and", "or", "is", "to", "the", "with", "for", "of", "field", "value", "values", "instead", "will", "must",
    "can", "should", "may", "are", "was", "were", "be", "not", "only", "if", "when", "from", "as",
})


def _quoted_value_is_secret(value: str, name: str) -> bool:
    if len(value) < 6 or is_placeholder(value) or _VERSION.fullmatch(value) or _COLOR.fullmatch(value):
        return False  # "jsonwebtoken": "^9.0.2" is a dependency, Token: "#d0d0d0" a style
    if "{" in value and "}" in value:
        return False  # a format string: f"{token}", "%{password}"
    if value.strip() != value or not value.strip():
        return False
    if " " in value and not name.endswith(("password", "passwd", "passphrase")):
        return False  # a sentence, not a key
    return value.lower() not in _TYPE_WORDS


def _same_length_lower(text: str, lowered: str | None) -> str:
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
        low = _same_length_lower(text, lowered)
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
_ENV_RUN = re.compile(r"[A-Z0-9_]*")


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


def _vet_assignment(text: str, low: str, start: int, end: int, m: re.Match[str]) -> tuple[int, int] | None:
    quoted = m.group("quoted") is not None
    s, e = m.span("quoted" if quoted else "bare")
    trimmed = e if quoted else s + len(low[s:e].rstrip(".:"))
    if trimmed - s < 6 or low.endswith(("password", "token", "secret", "key"), s, trimmed):
        return None  # cheap rejections first: dense inputs call this for every keyword
    before = _NAME_CHARS.search(low, max(0, start - 64), start)
    name_start = before.start() if before else start
    if low[max(0, name_start - 1) : name_start] in ("{", "$", "?", "&") or low[max(0, name_start - 3) : name_start] == "://":
        return None  # ${DB_PASSWORD:?required}, $password: a reference; URLs are url-token's and url-password's
    qualifier = (before.group(0) if before else "").strip(".-_")
    name = (qualifier + low[start:end]).lstrip(".-_")
    if name in _NOT_SECRET_PREFIXES or qualifier in _NOT_SECRET_PREFIXES:
        return None  # page_token, csrf_token, PWD
    if quoted:
        close = text[e : e + 1]
        if close not in ("\"", "'", "`") and not (close == "\\" and text[e + 1 : e + 2] in ("\"", "'")):
            return None  # no closing quote on the line
        return (s, e) if _quoted_value_is_secret(text[s:e], name) else None
    if is_placeholder(text[s:e]):
        return None  # sk-ant-... (checked before the trailing dots go)
    value = text[s:e].rstrip(".:")
    after = text[s + len(value) : s + len(value) + 1]
    return (s, s + len(value)) if _bare_value_is_secret(value, m.group("sep"), name, after) else None


_URL_KEYWORD = re.compile(r"(?:pass(?:word|wd)|pwd|secret|token|key)=")
_URL_VALUE = re.compile(r"(?P<secret>[a-z0-9%+/=_.~\-]{8,2048})")
_URL_PARAM = re.compile(
    r"[?&](?:access_|refresh_|id_|auth_|client_)?(?:token|api_?key|api-key|apikey|secret|password|passwd|pwd)=$"
)


def _vet_url_param(text: str, low: str, start: int, end: int, m: re.Match[str]) -> tuple[int, int] | None:
    if _URL_PARAM.search(low, max(0, start - 16), end) is None:
        return None
    s, e = m.span("secret")
    return None if is_placeholder(text[s:e]) else (s, e)


# Prose: "the staging db password is Abc…", "its secret is …", "api key: …", "secret key …".
_PROSE_KEYWORD = re.compile(r"pass(?:word|phrase|wd|code)|secret|token|key")
_PROSE_QUALIFIER = re.compile(
    r"(?:api|access|secret|private|auth|app|application|signing|encryption|master|account|license|admin|"
    r"service|client|bot|deploy|developer)[ _\-]?$"
)
_PROSE_TAIL = re.compile(
    # A gap or a separator after the keyword ("secret-not-for-production" is one word, not a secret).
    r"(?:[ \t]+(?:(?:is|was|=|:|->|=>)[ \t]+)?|[ \t]*[:=][ \t]*)\\?[`\"']?"
    r"(?P<secret>[a-z0-9+/=_.!@#$%^&*~\-]{8,256})"
)
_FILE_LIKE = re.compile(r"id_(?:rsa|dsa|ecdsa|ed25519)\b|\.(?:pem|key|json|txt|pub|p12|pfx|env|ya?ml|crt|py|js|ts)$")


def _vet_prose(text: str, low: str, start: int, end: int, m: re.Match[str]) -> tuple[int, int] | None:
    s, e = m.span("secret")
    value = text[s:e].rstrip(".:!")
    if len(value) < 8 or not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return None  # cheap rejections first: dense inputs call this for every keyword
    if not _starts_word(text, start) or low[end : end + 1].isalnum() or low[end : end + 1] == "_":
        return None  # inside a word: tokens, secretary, client_secret (an assignment's business)
    after = text[s + len(value) : s + len(value) + 1]
    if after in ("(", "["):
        return None
    if is_placeholder(value) or _PATH_LIKE.match(value) or _FILE_LIKE.search(value.lower()):
        return None
    if (value.isidentifier() or _DOTTED_IDENT.fullmatch(value)) and (
        _NAMES_A_SECRET.search(value) or not any(c.isdigit() for c in value.rsplit(".", 1)[-1])
    ):
        return None  # private_key: ed25519.Ed25519PrivateKey (a type), settings.v2_token
    before = _NAME_CHARS.search(low, max(0, start - 64), start)
    name_start = before.start() if before else start
    if low[max(0, name_start - 3) : name_start] == "://":
        return None  # https://x-access-token:…@host: url-password's
    return s, s + len(value)


# Command lines: a password as an option's argument.
_CLI_VALUE = r"(?:\\?\"(?P<secret>[^\"\s\\]{1,256})\\?\"|'(?P<secret_sq>[^'\s]{1,256})'|(?P<secret_bare>[^\s\"'\\;|&]{1,256}))"


def _cli_value_is_secret(text: str, m: re.Match[str]) -> bool:
    value = m.group("secret") or m.group("secret_sq") or m.group("secret_bare") or ""
    return not (value.startswith("-") or is_placeholder(value) or _PATH_LIKE.match(value))


def _command_start(text: str, i: int, reach: int = 300) -> int:
    """Where the command line holding offset `i` starts: its line, or its last `|`, `;`, `&` (bounded)."""
    lo = max(0, i - reach)
    return max(lo, *(text.rfind(sep, lo, i) for sep in ("\n", "\\n", "|", ";", "&")))


_CURL = re.compile(r"\b(?:curl|wget)\b")
_P_COMMANDS = re.compile(r"\b(?:mysql[a-z]{0,6}|mariadb[a-z\-]{0,6}|sshpass)\b")
_LOGIN_COMMANDS = re.compile(r"\b(?:sshpass|(?:docker|podman|buildah|helm|oras|nerdctl)\b.{0,80}\blogin)\b")


def _cli_p_is_password(text: str, m: re.Match[str], commands: re.Pattern[str]) -> bool:
    """`-p` takes a password right after it for the MySQL clients (`-p PASS` would prompt and read PASS
    as the database) and after a gap for sshpass and the registry logins."""
    i = m.start()
    if i == 0 or text[i - 1] not in " \t":
        return False
    found = commands.search(text, _command_start(text, i), i)
    return found is not None and _cli_value_is_secret(text, m)


def _curl_user_is_secret(text: str, m: re.Match[str]) -> bool:
    """`-u user:pass` in a curl or wget command line (docker's `-u 1000:1000` is a uid)."""
    i = m.start()
    if i == 0 or text[i - 1] not in " \t":
        return False
    if _CURL.search(text, _command_start(text, i, 500), i) is None:
        return False
    value = m.group("secret") or m.group("secret_sq") or m.group("secret_bare") or ""
    return not (is_placeholder(value) or value.isdigit())


def _telegram_boundary(text: str, m: re.Match[str]) -> bool:
    """A bot token starts a word, or follows `/bot` in an API URL."""
    i = m.start()
    return i == 0 or (not text[i - 1].isdigit() and (_starts_word(text, i) or text[max(0, i - 3) : i] == "bot"))


def _b64_pem_is_private(text: str, m: re.Match[str]) -> bool:
    head = m.group(0)[:80]
    try:
        decoded = base64.b64decode(head, validate=False)
    except (binascii.Error, ValueError):
        return False
    return b"PRIVATE KEY" in decoded


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
            if h is not None and _starts_word(text, h.start()):
                yield h.start(), m.end()


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


Detector = Rule | PemRule | KeywordRule | HeadRule | EnvRule

_B64URL = r"A-Za-z0-9_\-"

# Order matters only for labels: when spans overlap, the earlier rule names the merged span.
RULES: tuple[Detector, ...] = (
    PemRule(),
    _rule(
        "private-key",  # base64 of a PEM private key: a kubeconfig's client-key-data, a k8s Secret
        r"LS0tLS1CRUdJTi[A-Za-z0-9+/]{66,65536}={0,2}",
        ("LS0tLS1CRUdJTi",),
        accept=_b64_pem_is_private,
    ),
    # --- token formats ------------------------------------------------------------------------------
    _rule("anthropic", rf"sk-ant-[{_B64URL}]{{20,}}", ("sk-ant-",)),
    _rule(
        "openai",
        rf"sk-(?:(?:proj|svcacct|admin)-[{_B64URL}]{{40,}}|[A-Za-z0-9]{{32,}})",
        ("sk-",),
        boundary=True,  # "disk-<hash>" is not a key
    ),
    _rule(
        "aws-access-key-id",  # (gitleaks: aws-access-token)
        r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b",
        # No hints: five `in` scans cost more than the regex's own scan for "A".
    ),
    _token("aws-bedrock-key", r"ABSK[A-Za-z0-9+/]{109,269}={0,2}", "ABSK"),  # (gitleaks: aws-amazon-bedrock-api-key-long-lived)
    _rule(
        "aws-secret-access-key",
        # aws_secret_access_key = …, "aws_secret_access_key": "…", `aws configure set aws_secret_access_key …`
        r"aws_?secret_?access_?key\\?[\"']?(?:\s*[:=]\s*|\s+)\\?[\"']?(?P<secret>[a-z0-9/+=]{40})(?![a-z0-9/+=])",
        ("secret",),
        ci=True,
        boundary=True,
    ),
    _rule("github", r"gh[pousr]_[A-Za-z0-9]{36,255}\b"),  # literal-first: its scan is the pre-check
    _rule("github-pat", r"github_pat_[A-Za-z0-9_]{40,255}", ("github_pat_",)),
    _rule(
        "gitlab",  # (gitleaks: gitlab-pat, -deploy-token, -ptt, -runner-authentication-token, -scim-token, …)
        rf"gl(?:pat|dt|ptt|rt|soat|cbt|ft|imt|ffct|agent|oas)-[{_B64URL}.]{{20,300}}",
    ),
    _rule("gitlab", rf"GR1348941[{_B64URL}]{{20,300}}", ("GR1348941",)),  # (gitleaks: gitlab-rrt)
    _rule(
        "slack-webhook",  # (gitleaks: slack-webhook-url); the host stays, the path is the secret
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9+/_\-]{20,256})",
        ("hooks.slack.com",),
    ),
    _rule(
        "slack",  # (gitleaks: slack-bot-token, -user-token, -app-token, -config-*-token, -legacy-*)
        r"(?:xox[abeoprs]-[A-Za-z0-9\-]{10,}|xoxe\.xox[bp]-[A-Za-z0-9\-]{10,}|xapp-\d-[A-Za-z0-9]{6,}-\d{6,}-[A-Za-z0-9]{16,})",
        ("xox", "xapp-"),
    ),
    _rule(
        "discord-webhook",
        r"discord(?:app)?\.com/api/webhooks/(?P<secret>\d{5,30}/[A-Za-z0-9_\-]{40,128})",
        ("/api/webhooks/",),
    ),
    _rule(
        "teams-webhook",  # (gitleaks: microsoft-teams-webhook)
        r"\.webhook\.office\.com/webhookb2/(?P<secret>[A-Za-z0-9@/\-]{40,300})",
        ("webhook.office.com",),
    ),
    # (gitleaks: stripe-access-token); webhook signing secrets too
    _rule("stripe", r"sk_(?:live|test|prod)_[A-Za-z0-9]{16,}"),
    _rule("stripe", r"rk_(?:live|test|prod)_[A-Za-z0-9]{16,}"),
    _rule("stripe", r"whsec_[A-Za-z0-9+/=]{24,}"),
    _rule("google-api-key", rf"AIza[{_B64URL}]{{35}}(?![{_B64URL}])", ("AIza",)),  # (gitleaks: gcp-api-key)
    _rule(
        "google-oauth",  # client secrets, access tokens, refresh tokens
        rf"(?:GOCSPX-[{_B64URL}]{{24,40}}|ya29\.[{_B64URL}]{{20,2048}}|1//0[{_B64URL}]{{40,512}})(?![{_B64URL}])",
        ("GOCSPX-", "ya29.", "1//0"),
        boundary=True,
    ),
    _rule(
        "azure-storage-key",  # connection strings: AccountKey=…, SharedAccessKey=…
        r"(?:accountkey|sharedaccesskey)=(?P<secret>[a-z0-9+/]{20,512}={0,2})",
        ("accountkey=", "sharedaccesskey="),
        ci=True,
    ),
    _rule(
        "azure-ad-client-secret",  # (gitleaks: azure-ad-client-secret)
        r"(?<![A-Za-z0-9_~.])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}(?![A-Za-z0-9_~.\-])",
        ("Q~",),
    ),
    _rule(
        "url-signature",  # Azure SAS `sig=`, S3 presigned `X-Amz-Signature=`, `X-Amz-Security-Token=`
        r"[?&](?:sig|x-amz-signature|x-amz-security-token|x-goog-signature)=(?P<secret>[a-z0-9%+/=_\-]{16,4096})",
        ("sig=", "signature=", "security-token="),
        ci=True,
    ),
    _token("npm", r"npm_[A-Za-z0-9]{36}", "npm_"),  # (gitleaks: npm-access-token)
    _rule("pypi", rf"pypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[{_B64URL}]{{50,1000}}", ("pypi-AgE",)),  # (gitleaks: pypi-upload-token)
    _token("twilio", r"SK[0-9a-fA-F]{32}", "SK"),  # (gitleaks: twilio-api-key)
    _token("sendgrid", rf"SG\.[{_B64URL}]{{22}}\.[{_B64URL}]{{43}}", "SG."),  # (gitleaks: sendgrid-api-token)
    _token("sendinblue", r"xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}", "xkeysib-"),  # (gitleaks: sendinblue-api-token)
    *_tokens("mailgun", r"key-[0-9a-f]{32}", r"pubkey-[0-9a-f]{32}"),  # (gitleaks: mailgun-private-api-token, -pub-key)
    *_tokens("huggingface", r"hf_[A-Za-z]{34}", r"api_org_[A-Za-z]{34}"),  # (gitleaks: huggingface-*)
    _token("databricks", r"dapi[a-f0-9]{32}(?:-\d)?", "dapi"),  # (gitleaks: databricks-api-token)
    _token("shopify", r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}", "shp"),  # (gitleaks: shopify-*)
    HeadRule(  # base64 of the bot's numeric id, a timestamp, an HMAC: found from its first dot
        "discord-bot-token",
        re.compile(r"\.[A-Za-z0-9_\-]{6,7}\.[A-Za-z0-9_\-]{27,40}(?![A-Za-z0-9_\-])"),
        re.compile(r"[MNO][A-Za-z0-9]{23,27}$"),
        28,
    ),
    _rule(
        "telegram-bot-token",
        r"\d{8,10}:AA[A-Za-z0-9_\-]{33}(?![A-Za-z0-9_\-])",
        (":AA",),
        accept=_telegram_boundary,
    ),
    _token("heroku", rf"HRKU-AA[{_B64URL}]{{58}}"),  # (gitleaks: heroku-api-key-v2)
    _token("digitalocean", r"do[opr]_v1_[a-f0-9]{64}", "_v1_"),  # (gitleaks: digitalocean-*)
    *_tokens("vault", rf"hvs\.[{_B64URL}]{{90,120}}", rf"hvb\.[{_B64URL}]{{138,300}}"),  # (gitleaks: vault-*)
    *_tokens("linear", r"lin_api_[A-Za-z0-9]{40}", r"lin_oauth_[A-Za-z0-9]{40}"),  # (gitleaks: linear-api-key)
    _token("postman", r"PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}"),  # (gitleaks: postman-api-token)
    *_tokens("notion", r"ntn_\d{11}[A-Za-z0-9]{35}", r"secret_[A-Za-z0-9]{43}"),  # (gitleaks: notion-api-token)
    _token("atlassian", rf"ATATT3[{_B64URL}=]{{100,300}}"),
    *_tokens(  # (gitleaks: grafana-*)
        "grafana",
        r"glc_[A-Za-z0-9+/]{32,400}={0,3}",
        r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}",
        r"eyJrIjoi[A-Za-z0-9]{70,400}={0,3}",
    ),
    *_tokens("sentry", r"sntrys_eyJ[A-Za-z0-9+/=_]{60,600}", r"sntryu_[a-f0-9]{64}"),  # (gitleaks: sentry-*)
    *_tokens(  # Perplexity (gitleaks: perplexity-api-key), Groq, xAI, Replicate
        "llm-provider",
        r"pplx-[A-Za-z0-9]{48}",
        r"gsk_[A-Za-z0-9]{52}",
        r"xai-[A-Za-z0-9]{80}",
        r"r8_[A-Za-z0-9]{37}",
    ),
    *_tokens(
        "saas-token",
        r"ops_eyJ[A-Za-z0-9+/]{250,}={0,3}",  # (gitleaks: 1password-service-account-token)
        r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",  # (gitleaks: age-secret-key)
        r"pul-[a-f0-9]{40}",  # (gitleaks: pulumi-api-token)
        r"rubygems_[a-f0-9]{48}",  # (gitleaks: rubygems-api-token)
        r"dp\.pt\.[A-Za-z0-9]{43}",  # (gitleaks: doppler-api-token)
        r"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}",  # (gitleaks: dynatrace-api-token)
        r"fo1_[A-Za-z0-9_\-]{43}",  # (gitleaks: flyio-access-token)
        r"fm1[ar]_[A-Za-z0-9+/]{100,}={0,3}",
        r"fm2_[A-Za-z0-9+/]{100,}={0,3}",
        r"ico-[A-Za-z0-9]{32}",  # (gitleaks: infracost-api-token)
        r"sgp_(?:[a-fA-F0-9]{16}_)?[a-fA-F0-9]{40}",  # (gitleaks: sourcegraph-access-token)
        r"sq0atp-[A-Za-z0-9_\-]{22,60}",  # (gitleaks: square-access-token)
        r"sq0csp-[A-Za-z0-9_\-]{22,60}",
        r"EAA[MC][A-Za-z0-9]{100,}",  # (gitleaks: facebook-page-access-token)
        r"sha256~[A-Za-z0-9_\-]{43}",  # (gitleaks: openshift-user-token)
        r"pscale_(?:tkn|oauth|pw)_[A-Za-z0-9_=.\-]{32,64}",  # (gitleaks: planetscale-*)
        r"pnu_[A-Za-z0-9]{36}",  # (gitleaks: prefect-api-token)
        r"rdme_[a-z0-9]{70}",  # (gitleaks: readme-api-token)
        r"tk-us-[A-Za-z0-9_\-]{48}",  # (gitleaks: scalingo-api-token)
        r"shippo_(?:live|test)_[a-fA-F0-9]{40}",  # (gitleaks: shippo-api-token)
        r"CLOJARS_[A-Za-z0-9]{60}",  # (gitleaks: clojars-api-token)
        r"AKCp[A-Za-z0-9]{69}",  # (gitleaks: artifactory-api-key)
        r"EZ[AT]K[A-Za-z0-9]{54}",  # (gitleaks: easypost-*)
        r"LTAI[A-Za-z0-9]{20}",  # (gitleaks: alibaba-access-key-id)
        r"fio-u-[A-Za-z0-9_=\-]{64}",  # (gitleaks: frameio-api-token)
        r"duffel_(?:test|live)_[A-Za-z0-9_=\-]{43}",  # (gitleaks: duffel-api-token)
        r"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}",  # (gitleaks: cloudflare-origin-ca-key)
        r"sbp_[a-f0-9]{40}",  # Supabase access token
    ),
    _rule("jwt", rf"eyJ[{_B64URL}]{{8,}}\.eyJ[{_B64URL}]{{8,}}\.[{_B64URL}]*", ("eyJ",)),
    # --- contexts ------------------------------------------------------------------------------
    _rule(
        "url-password",
        # scheme://user:password@host: keep the user, take the password.
        r"://[^\s:/?#@'\"]{0,256}:(?P<secret>[^\s/?#@'\"]{1,256})@",
        ("://",),
        boundary=False,
        accept=_after_scheme,
    ),
    # ?access_token=…&, &api_key=…, ?password=…: query parameters that carry a credential
    KeywordRule("url-token", _ROOTS, _URL_KEYWORD, _URL_VALUE, None, _vet_url_param),
    _rule(
        "bearer",
        r"bearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{12,}=*)",
        ("bearer",),
        ci=True,
        boundary=True,
        accept=lambda text, m: not m.group("secret").isalpha() or len(m.group("secret")) >= 24,  # "bearer authorization"
    ),
    _rule(
        "basic-auth",
        r"authorization[\"']?\s*[:=]\s*[\"']?basic\s+(?P<secret>[A-Za-z0-9+/]{8,}=*)",
        ("basic",),
        ci=True,
        boundary=True,
    ),
    _rule(
        "auth-header",  # Authorization: Token …, Authorization: ApiKey …, a bare credential
        r"authorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?(?:(?:token|apikey|api-key|key|sso-key|dsn|digest)[ \t]+)?"
        r"(?P<secret>[a-z0-9\-._~+/=:]{16,4096})",
        ("authorization",),
        ci=True,
        boundary=True,
        accept=lambda text, m: not is_placeholder(m.group("secret")) and not m.group("secret").startswith(("bearer", "basic")),
    ),
    _rule(
        "api-key-header",  # X-Api-Key, X-Auth-Key, X-Auth-Token, X-Vault-Token, X-Shopify-Access-Token, …
        rf"x-(?:[a-z0-9]+-){{0,3}}(?:api-?key|auth-key|auth-token|token|access-token|secret)\\?[\"']?\s*[:=]\s*\\?[\"']?"
        rf"(?P<secret>[{_B64URL}.=+/]{{16,}})",
        ("x-",),
        ci=True,
        boundary=True,
    ),
    EnvRule(
        "env-assignment",
        # NAME=value, NAME: value, export NAME="value", "NAME": "value"; not NAME=$OTHER.
        # Quotes may arrive JSON-escaped (\\"); the name may follow a JSON \\n.
        re.compile(
            r"(?:(?<![A-Za-z0-9_])|(?<=\\[ntr]))(?P<name>[A-Z0-9_]{1,128})\b\\?[\"']?[ \t]*[=:][ \t]*(?!\$)"
            # A quoted secret ends before an escaping backslash, so `\\"` survives intact.
            r"(?:\\?\"(?!\$)(?P<secret>[^\"\r\n]{0,4095}[^\"\r\n\\])\\?\""
            r"|\\?'(?P<secret_sq>[^'\r\n]{0,4095}[^'\r\n\\])\\?'"
            r"|(?P<secret_bare>(?:[^\s\"'`\\]|\\(?![nrt\"'])){1,4096}))"
        ),
        _env_name_is_secret,
    ),
    KeywordRule("secret-assignment", _ROOTS, _ASSIGN_KEYWORD, _ASSIGN_TAIL, _KEY_QUALIFIER, _vet_assignment),
    _rule(
        "cli-password",  # mysql -pSECRET, mysqldump -p'SECRET', sshpass -pSECRET
        r"-p" + _CLI_VALUE,
        ("mysql", "mariadb", "sshpass"),
        accept=lambda text, m: _cli_p_is_password(text, m, _P_COMMANDS),
    ),
    _rule(
        "cli-password",  # sshpass -p SECRET, docker login -u me -p SECRET
        r"-p[ \t]+" + _CLI_VALUE,
        ("sshpass", "login"),
        accept=lambda text, m: _cli_p_is_password(text, m, _LOGIN_COMMANDS),
    ),
    _rule(
        "cli-password",
        r"-(?:store|key|srcstore|deststore|srckey|destkey)pass[ \t]+" + _CLI_VALUE,
        ("pass",),
        accept=_cli_value_is_secret,
    ),
    _rule(
        "cli-flag",  # --password X, --api-token=X, --aws-secret-access-key X, --secret_key=X
        r"--(?:[a-z0-9]+[\-_]){0,4}(?:password|passwd|passphrase|token|secret|api[\-_]?key|apikey|"
        r"secret[\-_]?key|secret[\-_]?access[\-_]?key|access[\-_]?token|auth[\-_]?token|client[\-_]?secret)"
        r"(?:=|[ \t]+)" + _CLI_VALUE,
        ("--",),
        ci=True,
        accept=lambda text, m: (
            _cli_value_is_secret(text, m)
            and not re.match(r"--(?:no|ask|prompt|skip)-", m.group(0))
            and (m.group("secret") or m.group("secret_sq") or m.group("secret_bare") or "").lower() not in _PROSE_WORDS
        ),
    ),
    _rule(
        "curl-user",  # curl -u user:pass, curl --user "user:pass": keep the user
        r"-(?:u|-user|-http-user)(?:=|[ \t]+)\\?[\"']?[^\s:\"'$\\]{1,128}:" + _CLI_VALUE,
        ("curl", "wget"),
        accept=_curl_user_is_secret,
    ),
    _rule(
        "netrc",  # machine HOST login USER password SECRET
        r"machine(?:\s|\\[nt])+\S{1,256}(?:\s|\\[nt])+login(?:\s|\\[nt])+\S{1,256}(?:\s|\\[nt])+password(?:\s|\\[nt])+"
        r"(?P<secret>[^\s\\]{1,256})",
        ("machine",),
    ),
    KeywordRule("secret-in-prose", _ROOTS, _PROSE_KEYWORD, _PROSE_TAIL, _PROSE_QUALIFIER, _vet_prose),
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
    lowered = _same_length_lower(text, None)
    hits = Hits(lowered)
    found: list[tuple[int, int, int]] = []  # (start, end, rule index)
    for idx, rule in enumerate(RULES):
        if not _applicable(rule, text, lowered):
            continue
        spans = rule.spans(text, lowered, hits) if isinstance(rule, KeywordRule) else rule.spans(text, lowered)
        found.extend((start, end, idx) for start, end in spans if not _in_placeholder(text, start, end))
    return _merge(found)


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
# tests/test_redact.py keeps it an over-approximation of `find_secrets`.
_MAYBE = re.compile(
    r"[A-Za-z0-9_+/=.~\-]{16}|pass|pwd|secret|token|key|auth|cred|sig|bearer|basic|private|machine|://|-[pu]",
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
