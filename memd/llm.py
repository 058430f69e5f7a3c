"""The one place every model call goes through.

DESIGN "Models": the timeout, the retry policy, the daily token budget, the
redaction of secrets and the usage record are applied here, so no job can
forget one of them. Without an API key memd still runs: `complete` raises
`ModelUnavailable` and model jobs wait, visibly, unless the `offline`
provider is chosen (whose gate and extraction logic live with the jobs; this
module makes no offline "calls").

Invariants:

- `anthropic` is imported lazily, on the first call: importing it costs about
  two seconds, and `memd status` and the CLI must start fast and never load
  the SDK (DESIGN "Logs").
- The SDK's own retries are off (`max_retries=0`); memd retries itself, so the
  backoff sleeps go through an injected `sleep` and every attempt is counted.
- Prompts and keys never reach a log line or an exception message: errors
  are rebuilt from the status code and the API's error type, and raised
  outside the SDK's `except` block, so no exception chain carries the
  request (whose headers hold the key).
- `timeout_s` bounds each attempt whole, connect to last byte (issue 16: a
  server sending a byte every 2 s held a 5 s call for 183 s, and the daemon's
  lock and its shutdown with it). The SDK's timeout cannot do that: httpx
  applies it to each phase and each read, so a slow drip never trips it.
  So each attempt runs on a daemon thread and the caller waits for it at most
  `timeout_s`. On expiry the client is closed (its sockets released) and
  replaced, and the thread is abandoned: it ends at its next read or at the
  SDK's own per-read timeout, whatever it got is dropped, and it never calls
  the usage sink (whose state connection belongs to the caller's thread).
  Why a thread rather than streaming with a clock check between chunks: the
  deadline must hold in every phase — name resolution, connect, TLS, the wait
  for a first byte (a non-streamed answer sends nothing until it is whole) —
  and only a wait outside the HTTP stack bounds them all, with the SDK's own
  request and parsing unchanged. (`memd.recall.call_with_deadline` bounds
  recall the same way.) Closing the client cuts any other call sharing it;
  in memd a model layer belongs to one job run (recall builds its own), and a
  call cut that way fails as a connection error and is retried.
- `should_stop` (the job's stop flag, wired in by `memd.runner`) is asked
  before every attempt and during the backoff between attempts: a daemon
  asked to stop lets the attempt in flight end (bounded as above) but never
  starts another; the call raises `ModelCallStopped` and the job is retried
  after the restart. So a stop drains within about `timeout_s`.
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import structlog

from memd.errors import ModelAPIError
from memd.redact import redact

if TYPE_CHECKING:  # pragma: no cover - typing only, never imported at run time
    import anthropic

__all__ = [
    "LLM",
    "PROVIDERS",
    "RETRYABLE_STATUS",
    "TIERS",
    "Availability",
    "BudgetExceeded",
    "Completion",
    "LLMConfig",
    "ModelCallFailed",
    "ModelCallStopped",
    "ModelError",
    "ModelUnavailable",
    "backoff_delay",
    "parse_retry_after",
]

log = structlog.get_logger("memd.llm")

PROVIDERS = ("anthropic", "offline", "auto")
TIERS = ("small", "strong")
Tier = Literal["small", "strong"]

# 408/504 are timeouts by another name; 429 rate limit; 5xx and 529 overload.
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504, 529})
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 30.0
# A server asking for a longer wait than this is not waited for in a worker
# thread: the call fails and the job is retried by the scheduler later.
RETRY_AFTER_MAX_S = 120.0
API_MESSAGE_MAX = 200
# How often a backoff wait asks `should_stop`: a stop request is noticed this fast between attempts.
STOP_POLL_S = 0.25


# --- errors ------------------------------------------------------------------------


class ModelError(ModelAPIError):
    """A model call did not produce an answer. Exit code 4 (README's table)."""


class ModelUnavailable(ModelError):
    """No model can be called (no key, or the offline provider): model jobs wait, visibly."""


class BudgetExceeded(ModelError):
    """Today's token budget is spent: model jobs are deferred to tomorrow."""

    def __init__(self, message: str, *, used: int = 0, budget: int = 0) -> None:
        super().__init__(message)
        self.used = used
        self.budget = budget


class ModelCallFailed(ModelError):
    """The call failed for good: not retryable, or still failing after every retry.

    `status` is the last HTTP status (None for timeouts, connection errors and
    unusable responses); `retryable` says whether trying again later may help.
    """

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 0, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts
        self.retryable = retryable


class ModelCallStopped(ModelError):
    """The caller is stopping (the daemon got SIGTERM): no attempt was started after it asked.

    Not a failure of the model: the runner records the run as deferred, and
    the work is redone from its cursor after the restart.
    """


# --- configuration and results ----------------------------------------------------


@dataclass
class LLMConfig:
    """memd's model settings (SPEC §8.2); every field has a default that needs no file.

    `base_url` None falls back to `ANTHROPIC_BASE_URL`, then to the SDK's
    default; `api_key` None falls back to `ANTHROPIC_API_KEY`. The key is
    kept out of `repr`, so a logged config never shows it.
    """

    provider: str = "auto"  # "anthropic" | "offline" | "auto" (anthropic if a key is configured)
    small_model: str = "claude-haiku-4-5"
    strong_model: str = "claude-sonnet-4-6"
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    max_retries: int = 4
    daily_token_budget: int = 2_000_000  # 0 = unlimited
    max_output_tokens: int = 4096

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"llm provider: {self.provider!r} is not one of {', '.join(PROVIDERS)}")
        for name in ("timeout_s", "max_retries", "daily_token_budget", "max_output_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"llm {name}: {value!r} is not a non-negative number")
        if self.timeout_s <= 0 or self.max_output_tokens <= 0:
            raise ValueError("llm timeout_s and max_output_tokens must be positive")


@dataclass(frozen=True)
class Completion:
    """A model's answer and what it cost."""

    text: str
    model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    stop_reason: str | None = None  # "max_tokens" means the answer was cut off
    attempts: int = 1


@dataclass(frozen=True)
class Availability:
    """Whether `complete` can be called now, and why not.

    Truthy only when it can (a plain tuple would always be truthy). `reason`
    is machine-readable: "ok", "offline", "no-key" or "budget".
    """

    ok: bool
    why: str
    reason: str

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class _Failure:
    """One failed attempt, described without any prompt or key."""

    message: str
    retryable: bool
    status: int | None = None
    retry_after: float | None = None


# --- pure policy --------------------------------------------------------------------


def backoff_delay(attempt: int, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number `attempt` (1-based) without a server hint.

    Exponential, capped, with "equal jitter": never less than half the step,
    so retries spread out without collapsing to zero.
    """
    step = min(BACKOFF_CAP_S, BACKOFF_BASE_S * (2 ** max(0, attempt - 1)))
    return step / 2 + (rng or random).random() * step / 2


def parse_retry_after(headers: Any, now: float) -> float | None:
    """The server's requested wait in seconds: `retry-after-ms`, else `retry-after`.

    `retry-after` may be seconds or an HTTP date; anything unparseable is None
    (the caller falls back to its own backoff).
    """
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def _short(text: str | None, limit: int = API_MESSAGE_MAX) -> str:
    """One redacted line of at most `limit` characters, for error messages."""
    line = " ".join(str(text or "").split())
    line = redact(line)
    return line if len(line) <= limit else line[: limit - 1] + "…"


# --- the model layer ---------------------------------------------------------------


class LLM:
    """Model calls with timeout, retries, budget, redaction and usage accounting.

    `usage_sink` receives one record per answered call and one per final
    failure: {"ts" (epoch seconds), "job", "model", "tier", "input_tokens",
    "output_tokens", "cache_read_tokens", "cache_write_tokens", "ok", "error"}.
    `tokens_used_today` is asked before every call (None: no budget check).
    `sleep`, `clock` and `rng` are injected so tests travel in time.
    `should_stop`, when set, is asked before each attempt and while waiting
    between attempts (see the module docstring).
    Thread-safe: jobs on different threads may share one instance.
    """

    def __init__(
        self,
        config: LLMConfig,
        *,
        usage_sink: Callable[[dict[str, Any]], None] | None = None,
        tokens_used_today: Callable[[], int] | None = None,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.config = config
        self.should_stop = should_stop
        self._usage_sink = usage_sink
        self._tokens_used_today = tokens_used_today
        # The default waits in slices, asking `should_stop`; an injected sleep (a test's clock)
        # is called once per wait, and `should_stop` is asked after it.
        self._sleep = sleep or self._wait_unless_stopped
        self._clock = clock
        self._rng = rng or random.Random()
        self._api_key = config.api_key or os.environ.get("ANTHROPIC_API_KEY") or None
        self._base_url = config.base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        self._client: anthropic.Anthropic | None = None
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LLM(provider={self.provider!r}, base_url={self._base_url!r}, key={'set' if self._api_key else 'unset'})"

    # --- what is available ---

    @property
    def provider(self) -> str:
        """The resolved provider: "anthropic" or "offline" (auto picks by the key)."""
        if self.config.provider == "auto":
            return "anthropic" if self._api_key else "offline"
        return self.config.provider

    @property
    def base_url(self) -> str | None:
        """Where calls go (None: the SDK's default endpoint)."""
        return self._base_url

    def model_for(self, tier: str) -> str:
        if tier == "small":
            return self.config.small_model
        if tier == "strong":
            return self.config.strong_model
        raise ValueError(f"unknown model tier {tier!r} (expected small or strong)")

    def available(self) -> Availability:
        """Whether `complete` would try a call now; `why` is one line for `memd status`."""
        if self.provider == "offline":
            return Availability(False, "offline provider makes no model calls", "offline")
        if not self._api_key:
            return Availability(False, "no API key: set ANTHROPIC_API_KEY or the llm api_key setting", "no-key")
        spent = self._budget_spent()
        if spent is not None:
            return Availability(False, str(spent), "budget")
        return Availability(True, f"anthropic at {self._base_url or 'the default endpoint'}", "ok")

    def _budget_spent(self) -> BudgetExceeded | None:
        """The error to raise when today's budget is used up, else None."""
        budget = int(self.config.daily_token_budget)
        if not budget or self._tokens_used_today is None:
            return None
        used = int(self._tokens_used_today())
        if used < budget:
            return None
        return BudgetExceeded(
            f"daily token budget reached: {used:,} of {budget:,} tokens used today", used=used, budget=budget
        )

    # --- calls ---

    def complete(
        self,
        *,
        job: str,
        tier: Tier,
        system: str,
        user: str,
        max_tokens: int | None = None,
        timeout_s: float | None = None,
    ) -> Completion:
        """One model answer to `system` + `user`, secrets redacted, retried, accounted.

        Raises ModelUnavailable (offline or no key), BudgetExceeded (nothing
        sent), ModelCallStopped (`should_stop` said so before an attempt), or
        ModelCallFailed (after the retries, or at once when retrying cannot
        help: a 4xx, an unusable response). Each attempt takes at most
        `timeout_s` (default: the config's) from connect to last byte.
        """
        model = self.model_for(tier)
        if not user:
            raise ValueError("complete: empty user prompt")
        self._check_callable()
        request = self._request(model, system, user, max_tokens or self.config.max_output_tokens)
        timeout = float(timeout_s if timeout_s is not None else self.config.timeout_s)
        if self._stopping():
            raise ModelCallStopped(f"{job}: not calling {model}: memd is stopping")
        attempts_allowed = int(self.config.max_retries) + 1
        failure: _Failure | None = None
        attempt = 0
        started = time.monotonic()
        for attempt in range(1, attempts_allowed + 1):
            # A new client if the last attempt's was closed when it ran out of time.
            outcome = self._attempt(self._get_client(), request, timeout)
            if isinstance(outcome, Completion):
                done = replace(outcome, attempts=attempt)
                self._record(job, tier, done.model, done, ok=True, error=None)
                log.info(
                    "model.completed", job=job, tier=tier, model=done.model, attempts=attempt,
                    input_tokens=done.input_tokens, output_tokens=done.output_tokens,
                    cache_read_tokens=done.cache_read_tokens, cache_write_tokens=done.cache_write_tokens,
                    duration_ms=int((time.monotonic() - started) * 1000), stop_reason=done.stop_reason,
                )  # fmt: skip
                return done
            failure = outcome
            if not failure.retryable or attempt == attempts_allowed:
                break
            if failure.retry_after is not None and failure.retry_after > RETRY_AFTER_MAX_S:
                failure = _Failure(
                    f"{failure.message}; server asks to wait {failure.retry_after:.0f} s",
                    retryable=True, status=failure.status,
                )  # fmt: skip
                break
            wait = failure.retry_after if failure.retry_after is not None else backoff_delay(attempt, self._rng)
            if not self._stopping():
                log.warning("model.retrying", job=job, model=model, attempt=attempt, error=failure.message, delay_s=round(wait, 3))
                self._sleep(wait)
                if not self._stopping():
                    continue
            self._record(job, tier, model, None, ok=False, error=f"{failure.message}; not retried: memd is stopping")
            log.warning("model.stopped", job=job, model=model, attempts=attempt, error=failure.message)
            raise ModelCallStopped(
                f"{job}: {model} call not retried after {attempt} attempt{'s' if attempt != 1 else ''} "
                f"({failure.message}): memd is stopping"
            )
        assert failure is not None
        message = f"{job}: {model} call failed after {attempt} attempt{'s' if attempt != 1 else ''}: {failure.message}"
        self._record(job, tier, model, None, ok=False, error=failure.message)
        log.error("model.failed", job=job, model=model, attempts=attempt, error=failure.message, status=failure.status)
        raise ModelCallFailed(message, status=failure.status, attempts=attempt, retryable=failure.retryable)

    def close(self) -> None:
        """Close the HTTP connection pool (the daemon does at shutdown)."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # --- internals ---

    def _stopping(self) -> bool:
        return self.should_stop is not None and bool(self.should_stop())

    def _wait_unless_stopped(self, seconds: float) -> None:
        """The backoff wait: `seconds`, cut short when `should_stop` says so (asked every
        STOP_POLL_S), so a 30 s backoff or a server's retry-after does not hold up a stop."""
        if self.should_stop is None:
            time.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        while not self._stopping():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(STOP_POLL_S, left))

    def _check_callable(self) -> None:
        if self.provider == "offline":
            raise ModelUnavailable("offline provider makes no model calls")
        if not self._api_key:
            raise ModelUnavailable("no API key: set ANTHROPIC_API_KEY or the llm api_key setting")
        spent = self._budget_spent()
        if spent is not None:
            raise spent

    @staticmethod
    def _request(model: str, system: str, user: str, max_tokens: int) -> dict[str, Any]:
        """The Messages API arguments, redacted; the system prompt is the cached prefix.

        System prompts are static per job, so marking them `ephemeral` lets
        repeated calls read them from the prompt cache at a tenth of the price.
        """
        request: dict[str, Any] = {
            "model": model,
            "max_tokens": int(max_tokens),
            "messages": [{"role": "user", "content": redact(user)}],
        }
        if system:
            request["system"] = [{"type": "text", "text": redact(system), "cache_control": {"type": "ephemeral"}}]
        return request

    def _get_client(self) -> anthropic.Anthropic:
        with self._client_lock:
            if self._client is None:
                import anthropic  # lazy: see the module docstring

                self._client = anthropic.Anthropic(
                    api_key=self._api_key,
                    base_url=self._base_url,
                    max_retries=0,
                    timeout=float(self.config.timeout_s),
                )
            return self._client

    def _retire(self, client: anthropic.Anthropic) -> None:
        """Close `client` (an attempt on it ran out of time) so its sockets are released;
        the next attempt builds a new one."""
        with self._client_lock:
            if self._client is client:
                self._client = None
        try:
            client.close()
        except Exception as exc:  # closing is best effort; the attempt already failed
            log.debug("model.close_failed", error=type(exc).__name__)

    def _attempt(self, client: anthropic.Anthropic, request: dict[str, Any], timeout: float) -> Completion | _Failure:
        """One attempt, bounded whole by `timeout`: the HTTP call runs on a daemon thread (module docstring)."""
        box: list[Completion | _Failure] = []

        def work() -> None:
            try:
                box.append(self._call(client, request, timeout))
            except BaseException as exc:  # a bug in the SDK's path must not end the thread silently
                box.append(_Failure(f"client error ({type(exc).__name__})", retryable=False))

        worker = threading.Thread(target=work, name="memd-model-call", daemon=True)
        worker.start()
        worker.join(timeout)
        if box:
            return box[0]
        self._retire(client)
        return _Failure(f"timed out after {timeout:g} s", retryable=True)

    def _call(self, client: anthropic.Anthropic, request: dict[str, Any], timeout: float) -> Completion | _Failure:
        """One HTTP call; every SDK error is turned into a `_Failure` here, inside the except."""
        import anthropic

        try:
            response = client.messages.create(**request, timeout=timeout)
        except anthropic.APIStatusError as exc:
            return self._status_failure(exc)
        except anthropic.APITimeoutError:
            return _Failure(f"timed out after {timeout:g} s", retryable=True)
        except anthropic.APIConnectionError as exc:
            cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "unknown cause"
            return _Failure(f"connection error ({cause})", retryable=True)
        except anthropic.APIResponseValidationError:
            return _Failure("malformed response: it does not match the Messages API schema", retryable=False)
        except json.JSONDecodeError:
            return _Failure("malformed response: the body is not valid JSON", retryable=False)
        except anthropic.AnthropicError as exc:
            return _Failure(f"client error ({type(exc).__name__})", retryable=False)
        return self._completion(response, request["model"])

    def _status_failure(self, exc: Any) -> _Failure:
        status = int(getattr(exc, "status_code", 0) or 0)
        err_type = getattr(exc, "type", None) or "error"
        api_message = getattr(exc, "api_message", None)
        text = f"HTTP {status} {err_type}"
        if api_message:
            text += f": {_short(api_message)}"
        if status == 401:
            text += " (check the API key)"
        response = getattr(exc, "response", None)
        retry_after = parse_retry_after(getattr(response, "headers", None), self._clock())
        return _Failure(text, retryable=status in RETRYABLE_STATUS, status=status, retry_after=retry_after)

    @staticmethod
    def _completion(response: Any, requested_model: str) -> Completion | _Failure:
        """Read an answer defensively: a response that parsed may still lack its parts."""
        content = getattr(response, "content", None)
        usage = getattr(response, "usage", None)
        if not isinstance(content, list) or usage is None:
            return _Failure("malformed response: no content or usage", retryable=False)
        text = "".join(
            getattr(block, "text", "") or "" for block in content if getattr(block, "type", None) == "text"
        )
        return Completion(
            text=text,
            model=str(getattr(response, "model", None) or requested_model),
            input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
            cache_read_tokens=int(getattr(usage, "cache_read_input_tokens", 0) or 0),
            cache_write_tokens=int(getattr(usage, "cache_creation_input_tokens", 0) or 0),
            stop_reason=getattr(response, "stop_reason", None),
        )

    def _record(self, job: str, tier: str, model: str, done: Completion | None, *, ok: bool, error: str | None) -> None:
        """Hand one usage record to the sink; a failing sink must not lose a paid answer."""
        if self._usage_sink is None:
            return
        record = {
            "ts": self._clock(),
            "job": job,
            "model": model,
            "tier": tier,
            "input_tokens": done.input_tokens if done else 0,
            "output_tokens": done.output_tokens if done else 0,
            "cache_read_tokens": done.cache_read_tokens if done else 0,
            "cache_write_tokens": done.cache_write_tokens if done else 0,
            "ok": ok,
            "error": error,
        }
        try:
            self._usage_sink(record)
        except Exception as exc:  # accounting must not undo the call
            log.error("usage.unrecorded", job=job, model=model, error=type(exc).__name__)
