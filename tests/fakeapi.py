"""A local fake of the Messages API subset memd uses, for the real `anthropic` client.

Tests point `base_url` (or `ANTHROPIC_BASE_URL`) at it, so the whole path —
SDK, HTTP, retries, parsing — is exercised without a network or a key.

Two ways to run it:

- in-process: `with FakeAnthropic([text("yes")]) as api: ...` with `api.url` as the
  base URL, `api.enqueue(reply, ...)` / `api.text("...")` to script more, and
  `api.requests` to inspect what arrived: each a `Recorded`, which is the JSON
  body itself (a dict) with `.path`, `.headers` (credential removed) and
  `.has_credential`;
- as a process, for integration tests that start memd's daemon as a real
  subprocess: `python tests/fakeapi.py --port-file F [--script S.json] [--record R.jsonl]`
  writes its port to F (atomically) once it listens, and serves until SIGTERM.

What answers a request, in order: the queue of scripted replies (FIFO), else
the `responder` callable, else the first matching rule, else the default reply,
else a 400 "no scripted reply" (not retried by memd, so a missing script fails
fast and says why).

Script file format (JSON):

    {
      "replies": [{"kind": "status", "status": 529}, {"kind": "text", "text": "yes"}],
      "rules": [
        {"if_system_contains": "GATE", "reply": {"kind": "text", "text": "no"}},
        {"if_user_contains": "tabs", "if_model_contains": "sonnet",
         "reply": {"kind": "text", "text": "{\\"operations\\": []}"}}
      ],
      "default": {"kind": "text", "text": "no"},
      "cache_min_tokens": 1024
    }

A reply is `{"kind": "text", "text": str, "usage"?: {...}, "model"?: str,
"stop_reason"?: str, "content"?: [block, ...]}` (`content`, when given, is the
message's content blocks verbatim, e.g. a `tool_use` block; `tool_use()` builds one, and `{"kind": "tool_use", "name": str, "input"?: {...},
"preamble"?: str}` is its script shorthand), `{"kind": "status", "status": int, "retry_after"?: num,
"error_type"?: str, "message"?: str}`, `{"kind": "malformed"}`, and any reply
may carry `"delay": seconds` (the server waits before answering; a client with
a shorter timeout sees a timeout) and `"until": path` (the server answers only
once that file exists: a test holds a call in flight for exactly as long as it
needs, however slow the machine, and releases it by creating the file). A bare string is shorthand for a text reply.
A text reply may also carry `"drip": seconds` (`drip()` builds one): the status
line and headers go out at once, then the body one byte every `drip` seconds —
a server that is never silent long enough to trip a per-read timeout, so only a
bound on the whole call stops it (issue 16). A streamed request gets its events
dripped the same way.

Usage is what the real API would report: `input_tokens` estimated as a quarter
of the JSON length of system and messages (`estimate_input_tokens`), and prompt
caching simulated — a system block marked `cache_control` of at least
`cache_min_tokens` is written on first sight and read afterwards, its tokens
moving from `input_tokens` to `cache_creation_input_tokens` /
`cache_read_input_tokens` — so benchmarks count tokens the way the API would.

Streaming: a request with `"stream": true` (as Claude Code sends) gets the
chosen reply as Server-Sent Events — message_start, ping, per content block
content_block_start / content_block_delta (text_delta, or input_json_delta for
a tool_use block) / content_block_stop, message_delta (stop_reason, output
usage), message_stop. Errors (`status`) are answered as JSON before any event,
as the API does; `malformed` streams a message_start and then cuts the stream.
Beside `POST /v1/messages` and `/v1/messages/count_tokens`, GET/HEAD probes are
recorded and answered 200 with an empty JSON object (`/v1/models` lists one
fake model).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = [
    "FAKE_SECRET",
    "FakeAnthropic",
    "Recorded",
    "Reply",
    "Rule",
    "delay",
    "drip",
    "estimate_input_tokens",
    "json_text",
    "malformed",
    "op",
    "op_absolute_path",
    "op_huge_body",
    "op_path_traversal",
    "op_secret_body",
    "op_unknown_type",
    "ops_reply",
    "ops_text",
    "request_system_text",
    "request_tool_results",
    "request_user_text",
    "sse_events",
    "status",
    "text",
    "tool_use",
]

_HIDDEN_HEADERS = frozenset({"x-api-key", "authorization"})
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    529: "overloaded_error",
}


# --- replies -----------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build with `text()`, `status()`, `malformed()`, `delay()`."""

    kind: str  # "text" | "status" | "malformed"
    text: str = ""
    status: int = 200
    retry_after: float | None = None
    error_type: str | None = None
    message: str | None = None
    usage: dict[str, int] | None = None
    model: str | None = None
    stop_reason: str = "end_turn"
    delay: float = 0.0
    content: tuple[dict[str, Any], ...] | None = None  # content blocks verbatim; None: one text block
    drip: float = 0.0  # > 0: headers at once, then the body one byte every `drip` seconds
    until: str | None = None  # a path: the answer waits (after `delay`) until that file exists

    def blocks(self) -> list[dict[str, Any]]:
        """The message's content blocks: `content` if given, else one text block of `text`."""
        if self.content is not None:
            return [dict(b) for b in self.content]
        return [{"type": "text", "text": self.text}]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        defaults = Reply(kind=self.kind)
        for name in ("text", "status", "retry_after", "error_type", "message", "usage", "model", "stop_reason", "delay", "content", "drip", "until"):
            value = getattr(self, name)
            if value != getattr(defaults, name):
                out[name] = list(value) if name == "content" else value
        return out

    @classmethod
    def from_dict(cls, raw: Any) -> Reply:
        """Parse one reply of the script format (a bare string is a text reply)."""
        if isinstance(raw, str):
            return text(raw)
        if isinstance(raw, dict) and raw.get("kind") == "tool_use":
            extra = set(raw) - {"kind", "name", "input", "preamble", "id", "usage", "model", "delay", "drip"}
            if extra or not isinstance(raw.get("name"), str):
                raise ValueError(f"not a tool_use reply: {raw!r:.80}")
            made = tool_use(raw["name"], raw.get("input"), preamble=raw.get("preamble", ""), id=raw.get("id"),
                            usage=raw.get("usage"), model=raw.get("model"))
            return replace(made, delay=float(raw.get("delay", 0.0)), drip=float(raw.get("drip", 0.0)))
        if not isinstance(raw, dict) or raw.get("kind") not in ("text", "status", "malformed"):
            raise ValueError(f"not a reply: {raw!r:.80}")
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"unknown reply fields: {sorted(unknown)}")
        if raw.get("content") is not None:
            raw = {**raw, "content": tuple(raw["content"])}
        return cls(**raw)


def text(body: str, *, usage: dict[str, int] | None = None, model: str | None = None, stop_reason: str = "end_turn") -> Reply:
    """A successful Messages API response whose content is one text block.

    `usage` overrides any of the estimated counts (input_tokens, output_tokens,
    cache_creation_input_tokens, cache_read_input_tokens).
    """
    return Reply("text", text=body, usage=usage, model=model, stop_reason=stop_reason)


def tool_use(
    name: str,
    input: dict[str, Any] | None = None,
    *,
    preamble: str = "",
    id: str | None = None,
    usage: dict[str, int] | None = None,
    model: str | None = None,
) -> Reply:
    """A response asking the client to call tool `name` with `input` (stop_reason "tool_use").

    `preamble`, if given, is a text block before the tool_use block. The id is
    `toolu_fake_<name>` unless given; a client answers with a `tool_result` of that id.
    """
    blocks: list[dict[str, Any]] = []
    if preamble:
        blocks.append({"type": "text", "text": preamble})
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)
    blocks.append({"type": "tool_use", "id": id or f"toolu_fake_{safe}", "name": name, "input": dict(input or {})})
    return Reply("text", text=preamble, usage=usage, model=model, stop_reason="tool_use", content=tuple(blocks))


def json_text(obj: Any, **kw: Any) -> Reply:
    """A text reply holding `obj` as JSON, as a model answering with JSON would."""
    return text(json.dumps(obj), **kw)


def status(code: int, *, retry_after: float | None = None, error_type: str | None = None, message: str | None = None) -> Reply:
    """An API error: HTTP `code` with the API's error body, and `retry-after` if given."""
    return Reply("status", status=code, retry_after=retry_after, error_type=error_type, message=message)


def malformed() -> Reply:
    """HTTP 200 whose body is cut-off JSON."""
    return Reply("malformed")


def delay(seconds: float, then: Reply | None = None) -> Reply:
    """`then` (default: a text reply "late"), answered only after `seconds`."""
    return replace(then or text("late"), delay=seconds)


def drip(every: float, then: Reply | None = None) -> Reply:
    """`then` (default: a text reply "late") sent as headers at once, then one body byte every `every` seconds.

    A whole message is a few hundred bytes, so at 2 s a byte the answer takes
    minutes to arrive, and no single read ever waits longer than `every`.
    """
    if every <= 0:
        raise ValueError("drip: the interval must be positive")
    return replace(then or text("late"), drip=float(every))


# --- typical model outputs, good and bad ------------------------------------------

# Built at run time so secret scanners do not flag this file.
FAKE_SECRET = "sk-" + "ant-api03-" + "Zx9" * 12 + "-fakeAA"


def op(**overrides: Any) -> dict[str, Any]:
    """A valid `add` operation; override any field (None removes it)."""
    base: dict[str, Any] = {
        "op": "add",
        "scope": "project",
        "name": "prefers-tabs",
        "description": "the user indents with tabs in this project",
        "type": "feedback",
        "body": "This project indents with tabs. **Why:** history uses tabs.",
        "reason": "the user corrected the agent",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def op_path_traversal() -> dict[str, Any]:
    return op(name="../../.bashrc")


def op_absolute_path() -> dict[str, Any]:
    return op(name="/etc/passwd")


def op_huge_body(size: int = 5 * 1024 * 1024) -> dict[str, Any]:
    return op(name="huge", body="x" * size)


def op_secret_body() -> dict[str, Any]:
    return op(name="deploy-key", type="reference", body=f"Deploy with ANTHROPIC key {FAKE_SECRET} from CI.")


def op_unknown_type() -> dict[str, Any]:
    return op(name="weird", type="rumour")


def ops_text(*ops: dict[str, Any], fenced: bool = False, prose: str = "") -> str:
    """The JSON a extraction/dream model returns, optionally fenced and wrapped in prose."""
    body = json.dumps({"operations": list(ops)}, indent=1)
    if fenced:
        body = f"```json\n{body}\n```"
    return f"{prose}\n{body}\n" if prose else body


def ops_reply(*ops: dict[str, Any], **kw: Any) -> Reply:
    return text(ops_text(*ops, **kw))


# --- request helpers ----------------------------------------------------------------


def estimate_input_tokens(body: dict[str, Any]) -> int:
    """About four characters a token over the JSON of system and messages."""
    system = body.get("system")
    messages = body.get("messages")
    size = len(json.dumps(system)) if system is not None else 0
    size += len(json.dumps(messages)) if messages is not None else 0
    return max(1, size // 4)


def request_system_text(body: dict[str, Any]) -> str:
    """The system prompt of a request, whether a string or a list of text blocks."""
    system = body.get("system")
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "".join(b.get("text", "") for b in system if isinstance(b, dict))
    return ""


def request_user_text(body: dict[str, Any]) -> str:
    """The text of every user message of a request, joined."""
    parts: list[str] = []
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict) or msg.get("role") != "user":
            continue
        content = msg.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(b.get("text", "") for b in content if isinstance(b, dict))
    return "\n".join(parts)


def request_tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The `tool_result` blocks of a request's user messages, in order."""
    out: list[dict[str, Any]] = []
    for msg in body.get("messages") or []:
        if isinstance(msg, dict) and msg.get("role") == "user" and isinstance(msg.get("content"), list):
            out.extend(b for b in msg["content"] if isinstance(b, dict) and b.get("type") == "tool_result")
    return out


def _cached_prefix(body: dict[str, Any]) -> str | None:
    """The system text up to and including the last block marked for caching."""
    system = body.get("system")
    if not isinstance(system, list):
        return None
    prefix: list[str] = []
    marked = None
    for block in system:
        if not isinstance(block, dict):
            continue
        prefix.append(json.dumps(block))
        if block.get("cache_control"):
            marked = "".join(prefix)
    return marked


# --- recorded requests --------------------------------------------------------------


class Recorded(dict):  # type: ignore[type-arg]
    """One request as received: the JSON body itself, plus where and how it came.

    A dict of the body, so `estimate_input_tokens(r)` and `r["system"]` work on it
    directly; the rest is in attributes. The credential headers are never kept:
    `has_credential` only says one was sent.
    """

    def __init__(self, body: dict[str, Any], *, method: str, path: str, headers: dict[str, str], has_credential: bool) -> None:
        super().__init__(body)
        self.method = method
        self.path = path
        self.headers = headers
        self.has_credential = has_credential
        self.ts = time.time()

    def to_json(self) -> dict[str, Any]:
        """The line written to the `--record` file."""
        return {
            "ts": self.ts,
            "method": self.method,
            "path": self.path,
            "headers": self.headers,
            "has_credential": self.has_credential,
            "body": dict(self),
        }


# --- rules --------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """Answer `reply` when every given condition holds (substring tests)."""

    reply: Reply
    if_system_contains: str | None = None
    if_user_contains: str | None = None
    if_model_contains: str | None = None

    def matches(self, body: dict[str, Any]) -> bool:
        if self.if_system_contains is not None and self.if_system_contains not in request_system_text(body):
            return False
        if self.if_user_contains is not None and self.if_user_contains not in request_user_text(body):
            return False
        if self.if_model_contains is not None and self.if_model_contains not in str(body.get("model", "")):
            return False
        return True

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Rule:
        if not isinstance(raw, dict) or "reply" not in raw:
            raise ValueError(f"a rule needs a reply: {raw!r:.80}")
        conds = {k: raw[k] for k in ("if_system_contains", "if_user_contains", "if_model_contains") if k in raw}
        unknown = set(raw) - set(conds) - {"reply"}
        if unknown:
            raise ValueError(f"unknown rule fields: {sorted(unknown)}")
        return cls(Reply.from_dict(raw["reply"]), **conds)


Responder = Callable[[dict[str, Any]], Reply | None]


# --- the server ---------------------------------------------------------------------


class FakeAnthropic:
    """A threaded HTTP server on 127.0.0.1 speaking `POST /v1/messages`.

    Every request is recorded in `.requests` as a `Recorded` (the JSON body,
    with method, path, headers without the credential, and whether a
    credential was sent) before it is answered, so a test sees requests that
    timed out on the client side too.
    """

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        responder: Responder | None = None,
        rules: Iterable[Rule] = (),
        default: Reply | None = None,
        record_path: str | os.PathLike[str] | None = None,
        cache_min_tokens: int = 1024,
        port: int = 0,
    ) -> None:
        self._queue: deque[Reply] = deque(replies)
        self.responder = responder
        self.rules: list[Rule] = list(rules)
        self.default = default
        self.cache_min_tokens = cache_min_tokens
        self.requests: list[Recorded] = []
        self._record_path = Path(record_path) if record_path else None
        self._lock = threading.Lock()
        self._cache: set[str] = set()
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.fake = self
        self._thread: threading.Thread | None = None

    # lifecycle

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    url = base_url

    def start(self) -> FakeAnthropic:
        # A short poll interval: stop() waits for the loop to notice, once per test.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fakeapi", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; delayed replies still sleeping are cut short."""
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # scripting

    def enqueue(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def text(self, body: str, **kw: Any) -> None:
        """Queue one text reply (shorthand for `enqueue(text(body))`)."""
        self.enqueue(text(body, **kw))

    @property
    def pending(self) -> int:
        """Scripted replies not yet used."""
        with self._lock:
            return len(self._queue)

    @property
    def message_requests(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path == "/v1/messages"]

    @classmethod
    def from_script(cls, script: dict[str, Any], **kw: Any) -> FakeAnthropic:
        """A server scripted by the JSON format of the module docstring."""
        unknown = set(script) - {"replies", "rules", "default", "cache_min_tokens"}
        if unknown:
            raise ValueError(f"unknown script fields: {sorted(unknown)}")
        return cls(
            [Reply.from_dict(r) for r in script.get("replies", [])],
            rules=[Rule.from_dict(r) for r in script.get("rules", [])],
            default=Reply.from_dict(script["default"]) if "default" in script else None,
            cache_min_tokens=int(script.get("cache_min_tokens", 1024)),
            **kw,
        )

    # request handling (server threads)

    def _record(self, entry: Recorded) -> None:
        with self._lock:
            self.requests.append(entry)
            if self._record_path is not None:
                with open(self._record_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry.to_json()) + "\n")

    def _choose(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.responder is not None:
            chosen = self.responder(body)
            if chosen is not None:
                return chosen
        for rule in self.rules:
            if rule.matches(body):
                return rule.reply
        if self.default is not None:
            return self.default
        return status(400, message="fakeapi: no scripted reply for this request")

    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, int]:
        total_in = estimate_input_tokens(body)
        created = read = 0
        prefix = _cached_prefix(body)
        if prefix is not None:
            prefix_tokens = len(prefix) // 4
            if prefix_tokens >= self.cache_min_tokens:
                with self._lock:
                    hit = prefix in self._cache
                    self._cache.add(prefix)
                if hit:
                    read = prefix_tokens
                else:
                    created = prefix_tokens
        usage = {
            "input_tokens": max(1, total_in - created - read),
            "output_tokens": max(1, (len(reply.text) if reply.content is None else len(json.dumps(reply.content))) // 4),
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
        }
        usage.update(reply.usage or {})
        return usage

    def _message(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        return {
            "id": f"msg_fake{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": reply.model or body.get("model") or "claude-fake",
            "content": reply.blocks(),
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": self._usage(body, reply),
        }

    def _wait(self, seconds: float) -> bool:
        """Sleep `seconds` unless the server stops first; True if it is stopping."""
        return self._stopping.wait(seconds) if seconds > 0 else self._stopping.is_set()

    def _wait_for_file(self, path: Path) -> bool:
        """Wait until `path` exists unless the server stops first; True if it is stopping."""
        while not path.exists():
            if self._stopping.wait(0.05):
                return True
        return False


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a delayed reply must not hold up stop()
    allow_reuse_address = True
    fake: FakeAnthropic


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _probe(self, method: str) -> None:
        fake = self.server.fake
        path = self.path.split("?", 1)[0]
        fake._record(
            Recorded(
                {},
                method=method,
                path=path,
                headers={k.lower(): v for k, v in self.headers.items() if k.lower() not in _HIDDEN_HEADERS},
                has_credential=any(k.lower() in _HIDDEN_HEADERS for k in self.headers.keys()),
            )
        )
        obj: Any = {}
        if path == "/v1/models":
            obj = {"data": [{"type": "model", "id": "claude-fake", "display_name": "Fake", "created_at": "2025-01-01T00:00:00Z"}],
                   "has_more": False, "first_id": "claude-fake", "last_id": "claude-fake"}
        data = json.dumps(obj).encode("utf-8")
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(data)
            self.wfile.flush()

    def do_GET(self) -> None:
        self._probe("GET")

    def do_HEAD(self) -> None:
        self._probe("HEAD")

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        path = self.path.split("?", 1)[0]
        fake._record(
            Recorded(
                body,
                method="POST",
                path=path,
                headers={k.lower(): v for k, v in self.headers.items() if k.lower() not in _HIDDEN_HEADERS},
                has_credential=any(k.lower() in _HIDDEN_HEADERS for k in self.headers.keys()),
            )
        )
        if path == "/v1/messages/count_tokens":
            self._send_json(200, {"input_tokens": estimate_input_tokens(body)})
            return
        if path != "/v1/messages":
            self._send_json(404, _error_body(404, "not_found_error", f"fakeapi: no route {path}"))
            return
        reply = fake._choose(body)
        if fake._wait(reply.delay) or (reply.until and fake._wait_for_file(Path(reply.until))):
            return
        try:
            self._answer(fake, body, reply)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout): nothing to answer

    def _answer(self, fake: FakeAnthropic, body: dict[str, Any], reply: Reply) -> None:
        if reply.drip > 0 and reply.kind == "text":
            self._send_drip(fake, body, reply)
        elif reply.kind == "malformed" and body.get("stream") is True:
            events = sse_events(fake._message(body, text("")))[:1]
            self._send_stream(events)
            self.wfile.write(b'event: content_block_start\ndata: {"type": "content_block_st')
            self.wfile.flush()
        elif reply.kind == "malformed":
            self._send_raw(200, b'{"id": "msg_broken", "type": "message", "content": [{"type": "te', {})
        elif reply.kind == "status":
            headers = {}
            if reply.retry_after is not None:
                ra = reply.retry_after
                headers["retry-after"] = str(int(ra)) if float(ra).is_integer() else str(ra)
            err_type = reply.error_type or _ERROR_TYPES.get(reply.status, "api_error")
            message = reply.message or f"fakeapi: scripted {reply.status}"
            self._send_json(reply.status, _error_body(reply.status, err_type, message), headers)
        elif body.get("stream") is True:
            self._send_stream(sse_events(fake._message(body, reply)))
        else:
            self._send_json(200, fake._message(body, reply))

    def _send_stream(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        """Server-Sent Events, closing the connection at the end (no content-length)."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.send_header("request-id", f"req_fake{time.monotonic_ns()}")
        self.end_headers()
        self.close_connection = True
        for name, data in events:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

    def _send_drip(self, fake: FakeAnthropic, body: dict[str, Any], reply: Reply) -> None:
        """Headers now, then the body a byte at a time, `reply.drip` seconds apart, until the
        server stops or the client goes away (the write then fails; the caller ignores that)."""
        message = fake._message(body, reply)
        if body.get("stream") is True:
            data = b"".join(f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in sse_events(message))
            ctype = "text/event-stream; charset=utf-8"
        else:
            data, ctype = json.dumps(message).encode("utf-8"), "application/json"
        self.send_response(200)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_fake{time.monotonic_ns()}")
        self.end_headers()
        self.wfile.flush()
        for i in range(len(data)):
            if fake._wait(reply.drip):
                self.close_connection = True
                return
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()

    def _send_json(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send_raw(code, json.dumps(obj).encode("utf-8"), headers or {})

    def _send_raw(self, code: int, data: bytes, headers: dict[str, str]) -> None:
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_fake{time.monotonic_ns()}")
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


def sse_events(message: dict[str, Any], *, chunk: int = 40) -> list[tuple[str, dict[str, Any]]]:
    """A complete message as the (event, data) pairs of the streaming API.

    Text is sent in `chunk`-character text_delta pieces, a tool_use input as
    input_json_delta pieces of its JSON (the start block's input is `{}`).
    """
    usage = dict(message.get("usage") or {})
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start}),
                                                ("ping", {"type": "ping"})]
    for index, block in enumerate(message.get("content") or []):
        kind = block.get("type")
        if kind == "text":
            body = str(block.get("text", ""))
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))
            for i in range(0, len(body), chunk):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                       "delta": {"type": "text_delta", "text": body[i:i + chunk]}}))
        elif kind == "tool_use":
            raw = json.dumps(block.get("input") or {})
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {**block, "input": {}}}))
            for i in range(0, len(raw), chunk):
                events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                       "delta": {"type": "input_json_delta", "partial_json": raw[i:i + chunk]}}))
        else:  # e.g. thinking: sent whole in the start event
            events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": block}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": message.get("stop_reason"), "stop_sequence": None},
                                     "usage": {"output_tokens": usage.get("output_tokens", 1)}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _error_body(code: int, err_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": err_type, "message": message}}


# --- process mode -------------------------------------------------------------------


def _write_port(path: Path, port: int) -> None:
    """Atomically, so a poller never reads an empty or half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(f"{port}\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--port-file", type=Path, required=True, help="write the listening port here")
    parser.add_argument("--script", type=Path, help="JSON script: replies, rules, default")
    parser.add_argument("--record", type=Path, help="append every request as a JSON line here")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)

    script = json.loads(args.script.read_text(encoding="utf-8")) if args.script else {}
    fake = FakeAnthropic.from_script(script, record_path=args.record, port=args.port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with fake:
        _write_port(args.port_file, fake.port)
        while not stop.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
