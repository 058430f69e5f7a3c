"""Effective settings: the agent's `settings.json` `memory` object (SPEC §8) and memd's own.

An invalid value never invalidates the whole configuration (§8.1): each field
falls back to its own default and one warning names the field, the bad value and
the default used. `parse_text` is pure given the file's text, so tests need no files.

A file that does not parse at all fails **closed**: `load` keeps the last
settings that parsed (`memd/settings.last-good.json`, written whenever the file
parses) or, with none, marks the settings `refused` so no model job runs. It
never falls back to defaults that would turn memory or the API back on.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

# Field specs: (dotted path, kind, default). Kinds: bool, int:<lo>..<hi> (an integer in that range,
# both ends included), share (a number from 0 to 1), str (at most MAX_STR characters), choice:<a|b>,
# url (empty or http(s)://, no white space or control character), model (a model name: no path, no control),
# dirs (a list of at most MAX_LIST directory paths, each absolute or `~/…`, no control character).
# Every number has a range (issue 16): a value JSON accepts but memd cannot use — 2^63 tokens,
# 10^400 hours, a 10^20-second timeout — falls back to its default with the usual one-line warning
# instead of overflowing SQLite, a float conversion or a timer later.
MEMORY_FIELDS: list[tuple[str, str, Any]] = [
    ("enabled", "bool", True),
    ("extractEveryTurns", "int:1..10000", 1),
    ("sessionMemory.enabled", "bool", True),
    ("sessionMemory.minInitTokens", "int:1..10000000", 10000),
    ("sessionMemory.minUpdateTokens", "int:1..10000000", 5000),
    ("sessionMemory.toolCallsBetween", "int:0..100000", 3),
    ("dream.enabled", "bool", True),
    ("dream.minHours", "int:1..87600", 24),  # ten years
    ("dream.minSessions", "int:1..1000000", 5),
    ("global.enabled", "bool", True),
    ("global.maxBytes", "int:1..16777216", 8192),  # 16 MiB
    ("indexConsolidation.enabled", "bool", True),
    ("review", "bool", False),  # extraction, dream and MCP writes become proposals (`memd review`)
    ("readOnly", "bool", False),  # nothing is written to memory directories (memd/memory/readonly.py)
    ("backfillDays", "int:0..36500", 7),  # sessions idle longer wait for `memd backfill` (SPEC §8.3)
]

# memd's own settings live under "memd" in the same file; all optional (§8.2).
MEMD_FIELDS: list[tuple[str, str, Any]] = [
    ("provider", "choice:auto|anthropic|offline|claude-code", "auto"),
    ("smallModel", "model", "claude-haiku-4-5"),
    ("strongModel", "model", "claude-sonnet-4-6"),
    ("baseUrl", "url", ""),
    ("claudePath", "str", ""),  # provider claude-code: the `claude` binary ("" = found on PATH)
    ("claudeConcurrency", "int:1..16", 1),  # provider claude-code: calls at once across memd's processes
    ("timeoutSeconds", "int:1..3600", 60),
    ("recallBudgetMs", "int:200..60000", 1500),  # the prompt hook, from its process's start to its answer
    ("maxRetries", "int:0..20", 4),
    ("dailyTokenBudget", "int:0..1000000000000", 2_000_000),
    ("pollSeconds", "int:1..86400", 5),
    ("forcePolling", "bool", False),
    ("reconcileSeconds", "int:1..604800", 300),  # a week
    ("agentQuietSeconds", "int:0..3600", 30),  # the daemon's MEMORY.md rewrites wait this long after an agent's last append (0: never)
    ("lockTimeoutSeconds", "int:1..86400", 10),
    ("retrySeconds", "int:1..86400", 30),
    ("logLevel", "choice:debug|info|warning|error", "info"),
    ("historyKeep", "int:1..100000", 20),
    ("dreamMaxDeleteShare", "share", 0.5),
    ("git", "bool", False),
    ("sync.remote", "str", ""),
    ("sync.everyMinutes", "int:1..525600", 15),  # a year
    ("roots", "dirs", []),  # where MewCode projects keep their own `.mewcode/sessions/` (memd.ledger.outside)
]

T = TypeVar("T")

MAX_STR = 4096  # a model name, a URL, a git remote: longer is a mistake, not a setting
MAX_LIST = 64  # directories in a list-valued field (`memd.roots`): more is a mistake, not a setting
_URL = re.compile(r"https?://[^\x00-\x20\x7f/?#]+(?:[/?#][^\x00-\x20\x7f]*)?")  # kind `url`: no space, no control character
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}", re.ASCII)  # kind `model`: no separator, no control
MAX_FILE_BYTES = 1 << 20  # settings.json over 1 MiB is refused like one that does not parse (fails closed)


# The typed view of the two tables above: one immutable record per group (a NamedTuple: frozen and
# typed like a frozen dataclass, but built at import without generated code, which every hook would
# pay: 9 frozen dataclasses cost 5 ms of each start-up here, these 0.5 ms), one attribute per field,
# named for its JSON key in snake case (`global` → `global_`). The tables stay the one place for
# keys, kinds, ranges and defaults; `_check_mirror` (run by the tests) proves that these classes
# hold exactly their fields, and `_typed` builds them from a validated tree.


class SessionMemory(NamedTuple):
    """memory.sessionMemory: rolling session summaries (SPEC §4)."""

    enabled: bool
    min_init_tokens: int
    min_update_tokens: int
    tool_calls_between: int


class Dream(NamedTuple):
    """memory.dream: consolidation (SPEC §5)."""

    enabled: bool
    min_hours: int
    min_sessions: int


class Drawer(NamedTuple):
    """memory.global: the global drawer."""

    enabled: bool
    max_bytes: int


class IndexConsolidation(NamedTuple):
    """memory.indexConsolidation: MEMORY.md kept by dream."""

    enabled: bool


class Memory(NamedTuple):
    """The agent's `memory` object (SPEC §8)."""

    enabled: bool
    extract_every_turns: int
    session_memory: SessionMemory
    dream: Dream
    global_: Drawer
    index_consolidation: IndexConsolidation
    review: bool
    read_only: bool
    backfill_days: int


class Sync(NamedTuple):
    """memd.sync: memory on several machines."""

    remote: str
    every_minutes: int


class Memd(NamedTuple):
    """memd's own `memd` object (SPEC §8.2)."""

    provider: str
    small_model: str
    strong_model: str
    base_url: str
    claude_path: str
    claude_concurrency: int
    timeout_seconds: int
    recall_budget_ms: int
    max_retries: int
    daily_token_budget: int
    poll_seconds: int
    force_polling: bool
    reconcile_seconds: int
    agent_quiet_seconds: int
    lock_timeout_seconds: int
    retry_seconds: int
    log_level: str
    history_keep: int
    dream_max_delete_share: float
    git: bool
    sync: Sync
    roots: list[str]


def _json_name(attr: str) -> str:
    """`min_init_tokens` → `minInitTokens`; `global_` → `global`."""
    head, *rest = attr.rstrip("_").split("_")
    return head + "".join(w.capitalize() for w in rest)


def _group(cls: Any, name: str) -> Any:
    """The group class field `name` of `cls` holds, or None for a leaf (annotations are strings here)."""
    hint = cls.__annotations__[name]
    return _GROUPS.get(getattr(hint, "__forward_arg__", hint))


def _leaves(cls: Any, prefix: str = "") -> list[str]:
    out: list[str] = []
    for name in cls._fields:
        key = prefix + _json_name(name)
        group = _group(cls, name)
        out += _leaves(group, key + ".") if group is not None else [key]
    return out


def _typed(cls: type[T], tree: dict[str, Any]) -> T:
    """The record `cls` from a validated tree (JSON keys), groups recursively."""
    values: dict[str, Any] = {}
    for name in cls._fields:  # type: ignore[attr-defined]
        value = tree[_json_name(name)]
        group = _group(cls, name)
        values[name] = _typed(group, value) if group is not None else value
    return cls(**values)


def _tree(obj: Any) -> dict[str, Any]:
    """A typed group back as the JSON tree it came from."""
    out: dict[str, Any] = {}
    for name in obj._fields:
        value = getattr(obj, name)
        out[_json_name(name)] = _tree(value) if type(value).__name__ in _GROUPS else value
    return out


_GROUPS: dict[str, Any] = {c.__name__: c for c in (SessionMemory, Dream, Drawer, IndexConsolidation, Sync)}


def _check_mirror(cls: type, fields: list[tuple[str, str, Any]]) -> None:
    want = [d for d, _k, _v in fields]
    got = _leaves(cls)
    if sorted(want) != sorted(got):
        raise AssertionError(f"{cls.__name__} does not mirror its field table: {sorted(set(want) ^ set(got))}")


@dataclass(frozen=True, eq=False)
class Settings:
    """Effective settings, typed (`s.memory.dream.min_hours`, `s.memd.lock_timeout_seconds`), plus
    the warnings that produced them and where they came from."""

    memory: Memory
    memd: Memd
    warnings: list[str] = field(default_factory=list)
    source: str = "defaults"
    broken: str | None = None  # why the file did not parse (line and column), when it did not
    refused: str | None = None  # why model jobs must not run: a broken file and no last good settings
    strict_json: bool = True  # False when the file needed JSON5 (comments, trailing commas)

    def get(self, dotted: str) -> Any:
        """The value at a JSON path (`memory.dream.minHours`): for the loader, `memd config` and
        tests. memd's own code reads the typed attributes."""
        node: Any = self.as_dict()
        for part in dotted.split("."):
            node = node[part]
        return node

    def as_dict(self) -> dict[str, Any]:
        return {"memory": _tree(self.memory), "memd": _tree(self.memd)}


def _settings(memory: dict[str, Any], memd: dict[str, Any], **rest: Any) -> Settings:
    return Settings(memory=_typed(Memory, memory), memd=_typed(Memd, memd), **rest)


def _defaults(fields: list[tuple[str, str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dotted, _kind, default in fields:
        _put(out, dotted, copy.deepcopy(default))
    return out


def _put(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        tree = tree.setdefault(p, {})
    tree[parts[-1]] = value


_MISSING = object()


def _lookup(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return _MISSING
        tree = tree[part]
    return tree


def check_value(kind: str, value: Any) -> str | None:
    """Why `value` is not a valid `kind`, or None when it is."""
    if kind == "bool":
        return None if isinstance(value, bool) else "not true/false"
    if kind in ("posint", "nonnegint"):
        kind = "int:1.." if kind == "posint" else "int:0.."
    if kind.startswith("int:"):
        lo_text, _, hi_text = kind[len("int:") :].partition("..")
        lo, hi = int(lo_text), (int(hi_text) if hi_text else None)
        if isinstance(value, bool) or not isinstance(value, int):
            return "not an integer"
        if value < lo:
            return "not a positive integer" if lo == 1 else "negative" if lo == 0 else f"below {lo:,}"
        if hi is not None and value > hi:
            return f"over {hi:,}"
        return None
    if kind == "share":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "not a number"
        return None if 0 <= value <= 1 else "not between 0 and 1"
    if kind == "str":
        if not isinstance(value, str):
            return "not a string"
        return None if len(value) <= MAX_STR else f"over {MAX_STR:,} characters"
    if kind == "url":  # the Messages API's address: http(s) only (a `file:///etc/passwd` is no API)
        if not isinstance(value, str):
            return "not a string"
        return None if value == "" or _URL.fullmatch(value) else "not an http(s) URL"
    if kind == "model":  # a model name goes into a request and a log line: no path, no control characters
        if not isinstance(value, str):
            return "not a string"
        return None if _MODEL.fullmatch(value) and ".." not in value else "not a model name"
    if kind == "dirs":
        return _check_dirs(value)
    if kind.startswith("choice:"):
        options = kind[len("choice:") :].split("|")
        return None if value in options else f"not one of {', '.join(options)}"
    raise ValueError(kind)


def _check_dirs(value: Any) -> str | None:
    """Why `value` is not a list of directory paths (kind `dirs`), or None. A relative path is refused:
    relative to what? The daemon, a hook and the CLI each run from a directory of their own."""
    if not isinstance(value, list):
        return "not a list of directories"
    if len(value) > MAX_LIST:
        return f"a list of over {MAX_LIST} directories"
    for i, item in enumerate(value, 1):
        if not isinstance(item, str):
            return f"not a list of directories (item {i} is not a string)"
        if not item or len(item) > MAX_STR or any(not c.isprintable() for c in item):
            return f"not a list of directories (item {i} is not a path)"
        if not (item.startswith("/") or item == "~" or item.startswith("~/")):
            return f"not a list of directories (item {i} is not absolute or ~/…)"
    return None


def _apply(
    section: str, raw: Any, fields: list[tuple[str, str, Any]], warnings: list[str]
) -> dict[str, Any]:
    out = _defaults(fields)
    if raw is _MISSING:
        return out
    if not isinstance(raw, dict):
        warnings.append(f"{section}: not an object; every field takes its default")
        return out
    _check_shape(section, raw, fields, warnings)
    for dotted, kind, default in fields:
        value = _lookup(raw, dotted)
        if value is _MISSING:
            continue
        why = check_value(kind, value)
        if why is None:
            _put(out, dotted, value)
        else:
            warnings.append(f"{section}.{dotted}: {_show(value)} is {why}; using default {_show(default)}")
    return out


def _check_shape(section: str, raw: dict[str, Any], fields: list[tuple[str, str, Any]], warnings: list[str]) -> None:
    """Warn about groups that are not objects and about fields memd does not know (typos)."""
    known = {d for d, _k, _v in fields}
    groups = {d.rsplit(".", 1)[0] for d in known if "." in d}

    def walk(node: dict[str, Any], prefix: str) -> None:
        for k, v in node.items():
            dotted = f"{prefix}{k}"
            if dotted in groups:
                if isinstance(v, dict):
                    walk(v, dotted + ".")
                else:
                    warnings.append(f"{section}.{dotted}: {_show(v)} is not an object; its fields take their defaults")
            elif dotted not in known:
                unknown.append(dotted)

    unknown: list[str] = []
    walk(raw, "")
    for dotted in unknown[:MAX_UNKNOWN_WARNINGS]:
        warnings.append(f"{section}.{_show_key(dotted)}: unknown field, ignored")
    if len(unknown) > MAX_UNKNOWN_WARNINGS:
        warnings.append(f"{section}: {len(unknown) - MAX_UNKNOWN_WARNINGS:,} more unknown fields, ignored")


MAX_UNKNOWN_WARNINGS = 20  # a file of 100,000 stray keys is one summary line, not 100,000 warnings


def _show_key(dotted: str) -> str:
    text = " ".join(dotted.split())
    return text if len(text) <= 80 else text[:77] + "..."


def _show(value: Any) -> str:
    import json  # noqa: PLC0415 - start-up
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_text(text: str, source: str = "settings.json") -> Settings:
    """Effective settings from the text of a settings file (JSON with comments).

    A text that does not parse gives defaults with `broken` set: the caller (`load`)
    decides what stands in for it; this function stays pure.
    """

    warnings: list[str] = []
    strict = True
    import json  # noqa: PLC0415 - start-up
    try:
        data = json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError):
        strict = False
        try:
            data = json.loads(_without_comments(text))  # the JSON5 people write: comments, trailing commas
        except (ValueError, RecursionError) as exc:
            if len(text) > JSON5_MAX_CHARS:  # json5 is pure Python, ~12 ms a KB: 44-109 s for 10 MB
                return _broken(source, f"not valid JSON: {_json_where(exc)} (too large to try JSON5)")
            try:
                import json5  # noqa: PLC0415 - start-up: json5 only for a settings file that is not plain JSON

                data = json5.loads(text)
            except (ValueError, RecursionError) as exc:  # json5 recurses: a few hundred nested brackets overflow it
                return _broken(source, f"not valid JSON: {_where(exc)}")
    if not isinstance(data, dict):
        return _broken(source, "the top level is not an object")
    memory = _apply("memory", data.get("memory", _MISSING), MEMORY_FIELDS, warnings)
    memd = _apply("memd", data.get("memd", _MISSING), MEMD_FIELDS, warnings)
    return _settings(memory, memd, warnings=warnings, source=source, strict_json=strict)


JSON5_MAX_CHARS = 64 * 1024  # beyond comments and trailing commas, JSON5 is tried only on a file this small
_STRING = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
_STRING_OR_COMMENT = re.compile(_STRING + r"|//[^\n]*|/\*.*?\*/", re.S)
_TRAILING_COMMA = re.compile(_STRING + r"|,(?=\s*[\]}])")


def _without_comments(text: str) -> str:
    """`text` with `//` and `/* */` comments and trailing commas blanked out (strings untouched).

    Blanked, not removed: every other character keeps its line and column, so `json.loads`
    errors point at the right place. Linear (two regex passes), unlike json5.
    """
    def blank(m: re.Match[str]) -> str:
        t = m.group(0)
        return t if t.startswith('"') else re.sub(r"[^\n]", " ", t)

    return _TRAILING_COMMA.sub(blank, _STRING_OR_COMMENT.sub(blank, text))


def _json_where(exc: BaseException) -> str:
    import json  # noqa: PLC0415 - start-up
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno}, column {exc.colno}: {exc.msg}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _where(exc: BaseException) -> str:
    """json5's message (`<string>:LINE Unexpected … at column COL`) as `line L, column C: …`."""

    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    m = re.match(r"<string>:(\d+) (.*) at column (\d+)$", text)
    return f"line {m.group(1)}, column {m.group(3)}: {m.group(2)}" if m else text


def _broken(source: str, why: str) -> Settings:
    return replace(defaults(), source=source, broken=f"{source}: {why}")


LAST_GOOD = "settings.last-good.json"


def load(path: Path) -> Settings:
    """Settings from `path`; a missing file means defaults; one that cannot be used fails closed.

    Only a regular file of at most `MAX_FILE_BYTES` is read: a FIFO (or a link to `/dev/zero`)
    in its place would hang every command, a huge file would cost seconds at each one; both are
    refused like a syntax error, keeping the last settings that parsed.
    """
    from memd.fsutil import UnusableFile, read_regular  # noqa: PLC0415 - start-up

    try:
        raw = read_regular(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return defaults()
    except UnusableFile as exc:
        why = str(exc).removeprefix(f"{path}: ")
        return _closed(path, _broken(str(path), why))
    except OSError as exc:
        return _closed(path, _broken(str(path), f"cannot read ({exc.strerror or exc})"))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _closed(path, _broken(str(path), f"not UTF-8 at byte {exc.start}"))
    s = parse_text(text, source=str(path))
    if s.broken:
        return _closed(path, s)
    _keep_last_good(path, s)
    return s


def _last_good_path(path: Path) -> Path:
    return path.parent / "memd" / LAST_GOOD


def _keep_last_good(path: Path, s: Settings) -> None:
    """Remember settings that parsed, for the day the file does not (only in a home memd already uses)."""

    target = _last_good_path(path)
    try:  # memd's own directory, never through a link (`fsutil.ensure_own_dir`)
        import stat  # noqa: PLC0415 - start-up
        if not stat.S_ISDIR(target.parent.lstat().st_mode):
            return
    except OSError:
        return
    import json  # noqa: PLC0415 - start-up
    data = json.dumps(s.as_dict(), sort_keys=True)
    from memd.fsutil import atomic_write, read_regular  # noqa: PLC0415 - start-up
    try:
        if read_regular(target, MAX_FILE_BYTES, follow=False) == data.encode():
            return
    except OSError:
        pass
    try:
        atomic_write(target, data.encode())
    except OSError:
        pass  # a read-only home still runs on the settings it has


def _closed(path: Path, s: Settings) -> Settings:
    """A file that does not parse: the last good settings, or defaults that refuse model jobs."""

    why = s.broken or f"{path}: unusable"
    try:
        import json  # noqa: PLC0415 - start-up

        from memd.fsutil import read_regular  # noqa: PLC0415 - start-up
        last = json.loads(read_regular(_last_good_path(path), MAX_FILE_BYTES, follow=False).decode("utf-8"))
        kept = _settings(_apply("memory", last.get("memory", _MISSING), MEMORY_FIELDS, []),
                         _apply("memd", last.get("memd", _MISSING), MEMD_FIELDS, []),
                         source=str(path), broken=why)  # fmt: skip
        kept.warnings.append(f"{why}; keeping the last settings that parsed")
        return kept
    except (OSError, ValueError, AttributeError):
        refused = f"{why}; no earlier settings to keep, so model jobs wait until it is fixed"
        return replace(s, refused=refused, warnings=[*s.warnings, refused])


CLAUDE_MARKERS = (".claude.json", ".credentials.json", "statsig", "todos", "shell-snapshots", "plugins", "ide")


def looks_like_claude_home(root: Path) -> bool:
    """A Claude Code home (`~/.claude` or `$CLAUDE_CONFIG_DIR`): by its name or by what Claude Code keeps
    there. Its settings.json is shared with Claude Code, which ignores a file that is not strict JSON."""
    if root.name == ".claude":
        return True
    return any((root / m).exists() for m in CLAUDE_MARKERS)


def defaults() -> Settings:
    return _settings(_defaults(MEMORY_FIELDS), _defaults(MEMD_FIELDS))


# the classes mirror the tables: tests/test_settings_typed.py checks it (`_check_mirror`), not every start-up


def effective_provider(
    s: Settings, env: dict[str, str] | None = None, memd_dir: Path | None = None
) -> tuple[str, str | None]:
    """The provider memd will use, and why model jobs would wait, if they would.

    `auto` means anthropic when a key is configured (the environment, or the
    private key file under `memd_dir`), otherwise the deterministic offline
    provider; an explicit `anthropic` without a key makes model jobs wait.
    """

    import os  # noqa: PLC0415 - start-up
    env = dict(os.environ) if env is None else env
    key, problem = (env.get("ANTHROPIC_API_KEY") or None), None
    if key is None and memd_dir is not None:
        from memd.keyfile import load_key  # noqa: PLC0415 - start-up
        key, problem = load_key(memd_dir, env)
    chosen = s.memd.provider
    if chosen == "auto":
        return ("anthropic", None) if key else ("offline", problem)
    if chosen == "anthropic" and not key:
        return "anthropic", problem or "no ANTHROPIC_API_KEY and no memd/anthropic.key: model jobs wait until one is set"
    if chosen == "claude-code":
        import shutil  # noqa: PLC0415 - start-up

        if shutil.which(s.memd.claude_path or "claude", path=env.get("PATH")) is None:
            return chosen, f"{s.memd.claude_path or 'claude'} not found on PATH: model jobs wait (set memd.claudePath)"
    return chosen, None
