"""What a model call is made with, returns and raises, and the pure rules that read its outcome.

The model layer's vocabulary, without the calls (those are `memd.llm.client.LLM`'s): the
settings (`LLMConfig`), an answer (`Completion`), whether a call can be made
(`Availability`), the errors a call raises (exit code 4, README's table), the retry
policy (`backoff_delay`, `parse_retry_after`, `RETRYABLE_STATUS`), and how an API
error or a response is read into a `Failure` or a `Completion` without any prompt
or key in the text. Cheap to import: the `anthropic` SDK is never loaded here.
"""

from __future__ import annotations

import email.utils
import random
from dataclasses import dataclass, field
from typing import Any, Literal

from memd.errors import ModelAPIError
from memd.redact.redactor import redact

__all__ = [
    "PROVIDERS",
    "RETRYABLE_STATUS",
    "TIERS",
    "Availability",
    "BudgetExceeded",
    "Completion",
    "Failure",
    "LLMConfig",
    "ModelCallFailed",
    "ModelCallStopped",
    "ModelError",
    "ModelPaused",
    "ModelUnavailable",
    "backoff_delay",
    "completion_of",
    "parse_retry_after",
    "short",
    "status_failure",
]

PROVIDERS = ("anthropic", "offline", "auto", "claude-code")
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


# --- errors ------------------------------------------------------------------------


class ModelError(ModelAPIError):
    """A model call did not produce an answer. Exit code 4 (README's table)."""


class ModelUnavailable(ModelError):
    """No model can be called (no key, or the offline provider): model jobs wait, visibly."""


class ModelPaused(ModelUnavailable):
    """The model's provider said to wait (a usage or rate limit, `claude-code`): model jobs are
    deferred until `until` (epoch seconds) without calling again."""

    def __init__(self, message: str, *, until: float = 0.0) -> None:
        super().__init__(message)
        self.until = until


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

    provider: str = "auto"  # "anthropic" | "offline" | "claude-code" | "auto" (anthropic if a key is configured)
    small_model: str = "claude-haiku-4-5"
    strong_model: str = "claude-sonnet-4-6"
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0
    max_retries: int = 4
    daily_token_budget: int = 2_000_000  # 0 = unlimited
    max_output_tokens: int = 4096
    claude_path: str = ""  # claude-code: the `claude` binary ("" = on PATH)
    claude_concurrency: int = 1  # claude-code: calls at once across memd's processes
    state_dir: str | None = None  # claude-code: where its pause file and call slots live (memd's directory)

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
    cost_usd: float | None = None  # what the provider itself reported (claude-code's `total_cost_usd`)


@dataclass(frozen=True)
class Availability:
    """Whether `complete` can be called now, and why not.

    Truthy only when it can (a plain tuple would always be truthy). `reason`
    is machine-readable: "ok", "offline", "no-key", "budget", and for
    `claude-code` "no-claude" (no binary) or "paused" (a usage limit not yet reset).
    """

    ok: bool
    why: str
    reason: str

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class Failure:
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


# --- reading the API's answers ----------------------------------------------------------------


def short(text: str | None, limit: int = API_MESSAGE_MAX) -> str:
    """One redacted line of at most `limit` characters, for error messages."""
    line = " ".join(str(text or "").split())
    line = redact(line)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def status_failure(exc: Any, now: float) -> Failure:
    """An HTTP error status as a `Failure`: status, the API's error type and a short redacted
    message (never the request), and the server's retry hint read against `now`."""
    status = int(getattr(exc, "status_code", 0) or 0)
    err_type = getattr(exc, "type", None) or "error"
    api_message = getattr(exc, "api_message", None)
    text = f"HTTP {status} {err_type}"
    if api_message:
        text += f": {short(api_message)}"
    if status == 401:
        text += " (check the API key)"
    response = getattr(exc, "response", None)
    retry_after = parse_retry_after(getattr(response, "headers", None), now)
    return Failure(text, retryable=status in RETRYABLE_STATUS, status=status, retry_after=retry_after)


def completion_of(response: Any, requested_model: str) -> Completion | Failure:
    """Read an answer defensively: a response that parsed may still lack its parts."""
    content = getattr(response, "content", None)
    usage = getattr(response, "usage", None)
    if not isinstance(content, list) or usage is None:
        return Failure("malformed response: no content or usage", retryable=False)
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
