"""Whether a match is a secret: placeholders, and the checks context rules run on what they matched.

A *placeholder* stands for a secret rather than being one (`<password>`, `${TOKEN}`,
`xxx`, `changeme`, `YOUR_API_KEY`) and survives redaction. The context rules of
`memd.redact.rules` (`.env` lines, assignments, URL parameters, prose, command lines)
match a name and a value; the functions here look at the match and its surroundings
in Python — a bounded distance — to tell a literal secret from code that refers to
one (`password=password`, `api_key=settings.API_KEY`, `token: str`), a path, a
version, a sentence or a uid. Keeping this out of the regexes keeps them linear.
"""

from __future__ import annotations

import base64
import binascii
import re

from memd.redact.detectors import starts_word
from memd.redact.lazyre import lazy

__all__ = [
    "after_scheme",
    "b64_pem_is_private",
    "cli_p_is_password",
    "cli_value_is_secret",
    "curl_user_is_secret",
    "env_name_is_secret",
    "is_placeholder",
    "telegram_boundary",
    "value_is_secret_shaped",
    "vet_assignment",
    "vet_prose",
    "vet_url_param",
]


# --- placeholders --------------------------------------------------------------------------

_MASK = lazy(r"[xX*.•…#?_\-]+")
_DUMMIES = frozenset({
    "changeme", "change_me", "change-me", "changeit", "password", "passwd", "secret", "token",
    "apikey", "api_key", "api-key", "example", "sample", "dummy", "placeholder", "redacted",
    "hidden", "masked", "none", "null", "nil", "undefined", "empty", "todo", "tbd", "fixme",
    "foo", "bar", "foobar", "test", "testing", "required", "optional", "string", "str", "pass", "pw",
})
# A value naming where a secret lives: ANTHROPIC_AUTH_TOKEN, "challengePassword", privateKeyUsagePeriod.
_ENV_REF = lazy(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
_NAMES_A_SECRET = lazy(r"key|token|secret|passw|credential", re.IGNORECASE)
_DUMMY_PARTS = lazy(r"your|here\b|_here|-here|replace|placeholder|changeme|change[_-]me|redacted|\.\.\.|…")


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
_ENV_NAME = lazy(
    r"[A-Z0-9_]*(?:KEY|SECRET|TOKEN|PASSWORD|PASSWD|PWD|CREDENTIAL)S?(?:_[A-Z0-9]+)*"
)
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})  # the shell's working directories
_KEYWORD_LAST = lazy(r"(?:KEY|SECRET|TOKEN|PASSWORD|PASSWD|PWD|CREDENTIAL)S?$")
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


def env_name_is_secret(text: str, m: re.Match[str]) -> bool:
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


def after_scheme(text: str, m: re.Match[str]) -> bool:
    """`://` counts only after a URL scheme (a letter or digit right before it)."""
    return m.start() > 0 and text[m.start() - 1].isalnum() and not is_placeholder(m.group("secret"))


# The name before a keyword, read back: the lookbehind makes every start but the run's first fail at once.
_NAME_CHARS = lazy(r"(?<![a-z0-9_.\-])[a-z0-9_.\-]{0,64}$")
# Names ending in a keyword that are not secrets.
_NOT_SECRET_PREFIXES = frozenset({"page", "next", "nextpage", "next_page", "continuation", "pagination", "csrf",
                                   "xsrf", "cancellation", "cancel", "sync", "resume", "public", "publishable", "max",
                                   "num", "pwd", "oldpwd"})
_TYPE_WORDS = frozenset({
    "str", "string", "bytes", "int", "bool", "boolean", "any", "none", "null", "nil", "undefined", "true",
    "false", "yes", "no", "on", "off", "optional", "secretstr", "object", "number", "required", "prompt",
    "stdin", "env", "file", "inherit", "text", "password", "secret", "token", "hidden", "masked",
})
_DOTTED_IDENT = lazy(r"[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z_$][A-Za-z0-9_$]*)+")
_IDENT = lazy(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL_TYPE = lazy(r"(?:[A-Z][a-z]+)+")
_PATH_LIKE = lazy(r"(?:/|~/|\./|\.\./|[A-Za-z]:\\|[a-z][a-z0-9+.\-]*://)")


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


_VERSION = lazy(r"[\^~<>=v]{0,3}\d+(?:\.[\dx*]+){1,3}(?:[\-+][0-9A-Za-z.\-]+)?")


_COLOR = lazy(r"#(?:[0-9a-fA-F]{3,4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})")


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


def vet_assignment(text: str, low: str, start: int, end: int, m: re.Match[str]) -> tuple[int, int] | None:
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


_URL_PARAM = lazy(
    r"[?&](?:access_|refresh_|id_|auth_|client_)?(?:token|api_?key|api-key|apikey|secret|password|passwd|pwd)=$"
)


def vet_url_param(text: str, low: str, start: int, end: int, m: re.Match[str]) -> tuple[int, int] | None:
    if _URL_PARAM.search(low, max(0, start - 16), end) is None:
        return None
    s, e = m.span("secret")
    return None if is_placeholder(text[s:e]) else (s, e)


_FILE_LIKE = lazy(r"id_(?:rsa|dsa|ecdsa|ed25519)\b|\.(?:pem|key|json|txt|pub|p12|pfx|env|ya?ml|crt|py|js|ts)$")


def vet_prose(text: str, low: str, start: int, end: int, m: re.Match[str]) -> tuple[int, int] | None:
    s, e = m.span("secret")
    value = text[s:e].rstrip(".:!")
    if len(value) < 8 or not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return None  # cheap rejections first: dense inputs call this for every keyword
    if not starts_word(text, start) or low[end : end + 1].isalnum() or low[end : end + 1] == "_":
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


def value_is_secret_shaped(value: str) -> bool:
    """Whether a value said after a password word looks like a password or a key: letters and digits,
    or ten characters or more mixing cases and symbols; not a path, a file, a version, or an identifier
    that names a secret (`password_hash2`)."""
    if _PATH_LIKE.match(value) or _FILE_LIKE.search(value.lower()) or _VERSION.fullmatch(value):
        return False
    if (value.isidentifier() or _DOTTED_IDENT.fullmatch(value)) and _NAMES_A_SECRET.search(value):
        return False
    alpha = any(c.isalpha() for c in value)
    if alpha and any(c.isdigit() for c in value):
        return True
    return len(value) >= 10 and alpha and not value.isalnum() and value.lower() != value and value.upper() != value


def cli_value_is_secret(text: str, m: re.Match[str]) -> bool:
    value = m.group("secret") or m.group("secret_sq") or m.group("secret_bare") or ""
    return not (value.startswith("-") or is_placeholder(value) or _PATH_LIKE.match(value))


def _command_start(text: str, i: int, reach: int = 300) -> int:
    """Where the command line holding offset `i` starts: its line, or its last `|`, `;`, `&` (bounded)."""
    lo = max(0, i - reach)
    return max(lo, *(text.rfind(sep, lo, i) for sep in ("\n", "\\n", "|", ";", "&")))


_CURL = lazy(r"\b(?:curl|wget)\b")


def cli_p_is_password(text: str, m: re.Match[str], commands: re.Pattern[str]) -> bool:
    """`-p` takes a password right after it for the MySQL clients (`-p PASS` would prompt and read PASS
    as the database) and after a gap for sshpass and the registry logins."""
    i = m.start()
    if i == 0 or text[i - 1] not in " \t":
        return False
    found = commands.search(text, _command_start(text, i), i)
    return found is not None and cli_value_is_secret(text, m)


def curl_user_is_secret(text: str, m: re.Match[str]) -> bool:
    """`-u user:pass` in a curl or wget command line (docker's `-u 1000:1000` is a uid)."""
    i = m.start()
    if i == 0 or text[i - 1] not in " \t":
        return False
    if _CURL.search(text, _command_start(text, i, 500), i) is None:
        return False
    value = m.group("secret") or m.group("secret_sq") or m.group("secret_bare") or ""
    return not (is_placeholder(value) or value.isdigit())


def telegram_boundary(text: str, m: re.Match[str]) -> bool:
    """A bot token starts a word, or follows `/bot` in an API URL."""
    i = m.start()
    return i == 0 or (not text[i - 1].isdigit() and (starts_word(text, i) or text[max(0, i - 3) : i] == "bot"))


def b64_pem_is_private(text: str, m: re.Match[str]) -> bool:
    head = m.group(0)[:80]
    try:
        decoded = base64.b64decode(head, validate=False)
    except (binascii.Error, ValueError):
        return False
    return b"PRIVATE KEY" in decoded
