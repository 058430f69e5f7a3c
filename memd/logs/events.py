"""Structured logs: one JSON object per line, for people, journald and `memd status` (DESIGN "Logs").

This module sets the pipeline up (`configure`, `cli_defaults`, `get_logger`; the loggers of
modules that must import fast are `memd.logs.lazy`'s) and holds its steps (redaction, time stamp, key order). The log file's handler is
`memd.logs.file`; reading the log back (`memd logs`, rotation, following) is `memd.logs.read`.

Invariants this module keeps:

* Every event — from structlog or from a stdlib logger such as APScheduler's —
  goes through one pipeline and lands as one JSON line in `memd/logs/memd.jsonl`
  with `ts` (ISO 8601, UTC), `level`, `event`, `logger` and its keyword data.
* Nothing that looks like a prompt, a message list or a credential is written:
  redaction is the last step before rendering, after exceptions are turned into
  text, so it sees every field a line will hold.
* The log file is private (0600 in a 0700 directory) and rotated by size, so a
  daemon that runs for months cannot fill the disk.
* `configure` may be called again (tests, `memd run` after `memd status`
  checks); it replaces its own handlers and leaves foreign ones alone.
* Importing this module is cheap: structlog and logging.handlers are imported
  by `configure`, so `memd status` can import it without paying for them.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import time
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime
from typing import IO, Any, TypeVar

from memd.fsutil import UnusableFile, ensure_own_dir
from memd.logs.lazy import import_structlog
from memd.tree import Home

MAX_BYTES = 10 * 1024 * 1024
BACKUP_COUNT = 5
LEVELS = ("debug", "info", "warning", "error", "critical")
# Environment override for the stderr copy's level. The launchd plist sets it to
# "warning": launchd's StandardErrorPath is never rotated, and every event is
# already in the rotated memd.jsonl.
STDERR_LEVEL_ENV = "MEMD_STDERR_LEVEL"
REDACTED = "[redacted]"
_HANDLER_TAG = "_memd_handler"

# Keys whose values must never reach a log line (compared after lower-casing and
# mapping "-" to "_"). Exact names for the generic ones ("system", "messages"),
# substrings for the unambiguous ones. Numbers and booleans are kept: a count
# such as `prompt_tokens` carries no secret and is what `memd status` reports.
_SECRET_EXACT = frozenset({"system", "messages", "prompt", "prompts", "api_key", "apikey",
                           "authorization", "password", "secret", "cookie", "set_cookie",
                           "x_api_key", "access_token", "refresh_token", "auth_token"})
_SECRET_PARTS = ("prompt", "api_key", "apikey", "authorization", "password", "secret")
# Credentials that leak into free text, e.g. an exception that quotes a header.
_SECRET_TEXT = re.compile(
    r"(sk-ant-[A-Za-z0-9_\-]{8,}|sk-[A-Za-z0-9]{20,}|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{8,}=*)"
)
_MAX_DEPTH = 6


# --- redaction (pure) -------------------------------------------------------------------


def is_secret_key(key: object) -> bool:
    """Whether a field named `key` holds what must never reach a log line. Pure: the verdict of a text
    key is kept (a line's keys are the same few names, line after line), for short keys, up to a bounded number."""
    if type(key) is not str or len(key) > _MEMO_CHARS:
        return _secret_name(str(key))
    return _remembered(_key_verdicts, key, _secret_name)


_key_verdicts: dict[str, bool] = {}
_MEMO_ENTRIES = 4096  # a memo's bound: a process's keys and short strings are few, a daemon's too
_T = TypeVar("_T")


def _remembered(memo: dict[str, _T], text: str, make: Callable[[str], _T]) -> _T:
    """`make(text)`, kept in `memo` (up to `_MEMO_ENTRIES` texts): for pure functions of short strings."""
    got = memo.get(text)
    if got is None:
        got = make(text)
        if len(memo) < _MEMO_ENTRIES:
            memo[text] = got
    return got


def _secret_name(key: str) -> bool:
    name = key.lower().replace("-", "_")
    return name in _SECRET_EXACT or any(part in name for part in _SECRET_PARTS)


def _scrub(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return _SECRET_TEXT.sub(REDACTED, value)
    if depth >= _MAX_DEPTH:
        return value
    if isinstance(value, dict):
        return {k: _redact_value(k, v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v, depth + 1) for v in value]
    return value


def _redact_value(key: object, value: Any, depth: int) -> Any:
    if is_secret_key(key) and not isinstance(value, (bool, int, float)) and value is not None:
        return REDACTED
    return _scrub(value, depth)


def redact(_logger: object, _method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: no prompts, message lists or keys in logs, at any depth.

    `event` is scrubbed for credential patterns but never dropped: it is the
    line's name (and a stdlib record's whole message).
    """
    for key in list(event_dict):
        if key == "event":
            event_dict[key] = _scrub(event_dict[key])
        else:
            event_dict[key] = _redact_value(key, event_dict[key], 0)
    return event_dict


def _redact_strings(value: Any, depth: int, redact_text: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if depth >= _MAX_DEPTH:
        return REDACTED  # too deep to look into: not rendered as it is
    if isinstance(value, dict):
        return {k: _redact_strings(v, depth + 1, redact_text) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact_strings(v, depth + 1, redact_text) for v in value]
    # Anything else is rendered through str() (the JSON renderer's default): redact that text.
    return _redact_strings(str(value), depth, redact_text)


def redact_secrets(_logger: object, _method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: every string of an event, at any depth, through memd.redact.redactor's rules.

    After `redact` (which drops whole values under secret-looking keys), this catches
    secrets in free text: an API key echoed in an error body, a model's answer quoted
    in a reason, a URL with a password. Keys stay; numbers and booleans are not looked
    at; a string that `may_hold_secret` rules out costs one regex search, and a short one
    seen lately costs a cache lookup (`_redact_text`). The rules load on the first event, not when
    this module is imported.
    """
    for key in list(event_dict):
        if key not in _RENDERER_OWNED:
            event_dict[key] = _redact_strings(event_dict[key], 0, _redact_text)
    return event_dict


# Short strings come back line after line (an event's name, a logger's, a job's target, an outcome): each
# one's answer is kept (the rules are pure) in a bounded least-recently-used cache, so the strings a line
# holds once (its time stamp, a run id) pass through without crowding out the ones that come back. The
# pre-check alone is a search of some 80 alternatives: 3-20 µs a short string here (timeit).
_MEMO_CHARS = 256
_RECENT = 1024


def _redact_text(text: str) -> str:
    """`text` through memd.redact.redactor's rules (`_checked`); a short one's answer kept (`_recent`), and a
    time stamp as `stamp` writes them (digits and the form's own marks: nothing a secret could hide in) kept as
    it is: a line's `ts` is new at every line, and the rules' pre-check alone took 20 µs on one here."""
    if len(text) > _MEMO_CHARS:
        return _checked(text)
    return text if len(text) == _STAMP_CHARS and _STAMP.fullmatch(text) else _recent(text)


_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", re.ASCII)  # `stamp`'s form
_STAMP_CHARS = len("2026-01-01T00:00:00.000000Z")


def _checked(text: str) -> str:
    """`memd.redact.redactor.redact(text)`, when its cheap pre-check says the text may hold a secret."""
    from memd.redact.redactor import may_hold_secret, redact  # noqa: PLC0415 - start-up: the rules load on the first event

    return redact(text) if may_hold_secret(text) else text


_recent = functools.lru_cache(maxsize=_RECENT)(_checked)


# Left to the renderer: exc_info is an exception (tuple) the console renderer formats itself;
# the JSON pipeline has turned it into `exception` text before this step.
_RENDERER_OWNED = frozenset({"exc_info", "stack_info"})


# --- pipeline steps (pure) ------------------------------------------------------------


def stamp(_logger: object, _method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """`ts`: ISO 8601 UTC. A stdlib record keeps the time it was made, not the time a handler formats it."""
    if "ts" not in event_dict:
        record = event_dict.get("_record")
        created = record.created if isinstance(record, logging.LogRecord) else time.time()
        ts = datetime.fromtimestamp(created, UTC).isoformat(timespec="microseconds")
        event_dict["ts"] = ts.replace("+00:00", "Z")
    return event_dict


_FIRST = ("ts", "level", "event", "logger")


def _order_keys(_logger: object, _method: str, event_dict: MutableMapping[str, Any]) -> dict[str, Any]:
    """The fixed fields first, so a raw line reads well in `less` too."""
    out = {k: event_dict[k] for k in _FIRST if k in event_dict}
    out.update((k, v) for k, v in event_dict.items() if k not in out)
    return out


# --- configuration ---------------------------------------------------------------------


def level_no(name: str) -> int:
    name = name.lower()
    if name not in LEVELS:
        raise ValueError(f"log level {name!r} is not one of {', '.join(LEVELS)}")
    return int(getattr(logging, name.upper()))


def _shared_processors() -> list[Any]:
    """Steps every event takes, structlog's and stdlib's alike, before rendering."""
    structlog = import_structlog()

    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        stamp,
    ]


def _json_formatter() -> logging.Formatter:
    structlog = import_structlog()

    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,  # exc_info -> "exception": traceback text
            redact,
            redact_secrets,
            _order_keys,
            structlog.processors.JSONRenderer(ensure_ascii=False, default=str),
        ],
    )


def _console_formatter(colors: bool) -> logging.Formatter:
    structlog = import_structlog()

    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared_processors(),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            redact,
            redact_secrets,
            structlog.dev.ConsoleRenderer(colors=colors, timestamp_key="ts"),
        ],
    )


def _tag(handler: logging.Handler) -> logging.Handler:
    setattr(handler, _HANDLER_TAG, True)
    return handler


def _remove_own_handlers(root: logging.Logger) -> None:
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_TAG, False):
            root.removeHandler(handler)
            handler.close()


def configure(
    home: Home,
    *,
    level: str = "info",
    stderr: bool = True,
    file: bool = True,
    json_stderr: bool | None = None,
    stderr_level: str | None = None,
    stream: IO[str] | None = None,
    max_bytes: int = MAX_BYTES,
    backups: int = BACKUP_COUNT,
) -> None:
    """Route structlog and stdlib logging to the JSON log file and/or stderr.

    stderr gets a human console rendering on a TTY and JSON otherwise, so
    journald and launchd keep parseable lines. `stderr_level` (default:
    `$MEMD_STDERR_LEVEL`, else `level`) lets the service keep its unrotated
    stderr file small. Idempotent: a second call replaces the first's handlers.
    """

    file_level = level_no(level)
    err_level = level_no(stderr_level or os.environ.get(STDERR_LEVEL_ENV) or level)
    root = logging.getLogger()
    _remove_own_handlers(root)
    levels: list[int] = []
    fh: logging.Handler | None = None
    if file:
        try:  # memd/logs is memd's own: never through a link; the log itself only a regular file
            ensure_own_dir(home.logs_dir, home.memd_dir)
            from memd.logs.file import private_rotating_handler  # noqa: PLC0415 - start-up
            fh = private_rotating_handler(home.log_file, max_bytes, backups)
        except UnusableFile as exc:
            sys.stderr.write(f"memd: {exc}; logging to stderr only\n")  # one line, and memd goes on
    if fh is not None:
        fh.setFormatter(_json_formatter())
        fh.setLevel(file_level)
        root.addHandler(_tag(fh))
        levels.append(file_level)
    if stderr:
        out = stream if stream is not None else sys.stderr
        as_json = (not _isatty(out)) if json_stderr is None else json_stderr
        sh = logging.StreamHandler(out)
        sh.setFormatter(_json_formatter() if as_json else _console_formatter(_isatty(out)))
        sh.setLevel(err_level)
        root.addHandler(_tag(sh))
        levels.append(err_level)
    root.setLevel(min(levels) if levels else logging.WARNING)
    structlog = import_structlog()
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared_processors(),
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def shutdown() -> None:
    """Flush and detach memd's handlers and return structlog to its defaults.

    For the daemon's exit and for tests; handlers that are not memd's stay.
    """

    _remove_own_handlers(logging.getLogger())
    structlog = import_structlog()
    structlog.reset_defaults()


def _isatty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def get_logger(name: str = "memd", **initial: Any) -> Any:
    """A structlog logger bound to `initial`; works before `configure` too (lazily)."""
    structlog = import_structlog()

    return structlog.get_logger(name, **initial)


__all__ = [
    "BACKUP_COUNT",
    "LEVELS",
    "MAX_BYTES",
    "REDACTED",
    "configure",
    "get_logger",
    "is_secret_key",
    "level_no",
    "redact",
    "redact_secrets",
    "shutdown",
    "stamp",
]


def command_logging(home: Home, level: str, stderr_level: str = "warning") -> None:
    """A one-shot command's logging: every event to the log file, and to stderr only at
    `stderr_level`, as one human line (never JSON, even when stderr is a pipe: a piped
    command's reader gets messages, the log file keeps the records). `memd run` keeps
    `configure`'s JSON stderr for journald."""
    configure(home, level=level, stderr_level=stderr_level, json_stderr=False)


def cli_defaults() -> None:
    """For one-shot commands before (or without) `configure`: warnings to stderr, nothing to stdout.

    structlog's own default prints every level to stdout, which would corrupt
    `--json` output; commands that keep a log file call `configure` after this.
    """
    structlog = import_structlog()

    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            redact,
            redact_secrets,
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
