"""The one place every model call goes through: `LLM`, its retries and its deadline.

DESIGN "Models": the timeout, the retry policy, the daily token budget, the
redaction of secrets and the usage record are applied here, so no job can
forget one of them. Without an API key memd still runs: `complete` raises
`ModelUnavailable` and model jobs wait, visibly, unless the `offline`
provider is chosen (whose gate and extraction logic live with the jobs; this
module makes no offline "calls"). The settings, answers, errors and the
pure retry policy are in `memd.llm.types`.

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
  request and parsing unchanged. (`memd.agent.recall.call_with_deadline` bounds
  recall the same way.) Closing the client cuts any other call sharing it;
  in memd a model layer belongs to one job run (recall builds its own), and a
  call cut that way fails as a connection error and is retried.
- `should_stop` (the job's stop flag, wired in by `memd.job.runner`) is asked
  before every attempt and during the backoff between attempts: a daemon
  asked to stop lets the attempt in flight end (bounded as above) but never
  starts another; the call raises `ModelCallStopped` and the job is retried
  after the restart. So a stop drains within about `timeout_s`.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from memd.llm.types import (
    RETRY_AFTER_MAX_S,
    Availability,
    BudgetExceeded,
    Completion,
    Failure,
    LLMConfig,
    ModelCallFailed,
    ModelCallStopped,
    ModelPaused,
    ModelUnavailable,
    Tier,
    backoff_delay,
    completion_of,
    status_failure,
)
from memd.redact.redactor import redact

if TYPE_CHECKING:  # pragma: no cover - typing only, never imported at run time
    import anthropic

__all__ = ["LLM"]

log = structlog.get_logger("memd.llm")

# How often a backoff wait asks `should_stop`: a stop request is noticed this fast between attempts.
STOP_POLL_S = 0.25


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
        """The resolved provider: "anthropic", "claude-code" or "offline" (auto picks by the key,
        and never picks claude-code: that spends the user's plan, SPEC §15)."""
        if self.config.provider == "auto":
            return "anthropic" if self._api_key else "offline"
        return self.config.provider

    @property
    def base_url(self) -> str | None:
        """Where calls go (None: the SDK's default endpoint)."""
        return self._base_url

    def model_for(self, tier: str) -> str:
        if tier not in ("small", "strong"):
            raise ValueError(f"unknown model tier {tier!r} (expected small or strong)")
        model = self.config.small_model if tier == "small" else self.config.strong_model
        if self.provider == "claude-code":
            from memd.llm.claudecode import cli_model  # noqa: PLC0415 - start-up

            return cli_model(tier, model, getattr(LLMConfig(), f"{tier}_model"))
        return model

    def available(self) -> Availability:
        """Whether `complete` would try a call now; `why` is one line for `memd status`."""
        if self.provider == "offline":
            return Availability(False, "offline provider makes no model calls", "offline")
        if self.provider == "claude-code":
            return self._claude_code_availability()
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
        failure: Failure | None = None
        attempt = 0
        started = time.monotonic()
        for attempt in range(1, attempts_allowed + 1):
            # A new client if the last attempt's was closed when it ran out of time.
            if self.provider == "claude-code":
                outcome = self._claude_code_attempt(job, tier, request, timeout)
            else:
                outcome = self._attempt(self._get_client(), request, timeout)
            if isinstance(outcome, Completion):
                done = replace(outcome, attempts=attempt)
                self._record(job, tier, done.model, done, ok=True, error=None)
                log.info(
                    "model.completed", job=job, tier=tier, model=done.model, attempts=attempt,
                    input_tokens=done.input_tokens, output_tokens=done.output_tokens,
                    cache_read_tokens=done.cache_read_tokens, cache_write_tokens=done.cache_write_tokens,
                    duration_ms=int((time.monotonic() - started) * 1000), stop_reason=done.stop_reason,
                    provider=self.provider, cost_usd=done.cost_usd,
                )  # fmt: skip
                return done
            failure = outcome
            if not failure.retryable or attempt == attempts_allowed:
                break
            if failure.retry_after is not None and failure.retry_after > RETRY_AFTER_MAX_S:
                failure = Failure(
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

    def _claude_code_availability(self) -> Availability:
        from memd.llm import claudecode  # noqa: PLC0415 - start-up

        return claudecode.availability(self.config, self._clock(), self._budget_spent)

    def _claude_code_attempt(self, job: str, tier: str, request: dict[str, Any], timeout: float) -> Completion | Failure:
        """One claude-code call; a usage or rate limit is recorded and raised as `ModelPaused`."""
        from memd.llm import claudecode  # noqa: PLC0415 - start-up

        return claudecode.attempt(self.config, request, timeout, self._clock(),
                                  record=lambda model, err: self._record(job, tier, model, None, ok=False, error=err))  # fmt: skip

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
        if self.provider == "claude-code":
            ready = self._claude_code_availability()
            if ready.reason == "paused":
                raise ModelPaused(ready.why)
            if not ready and ready.reason != "budget":
                raise ModelUnavailable(ready.why)
        elif not self._api_key:
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
                import anthropic  # noqa: PLC0415 - lazy: see the module docstring

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

    def _attempt(self, client: anthropic.Anthropic, request: dict[str, Any], timeout: float) -> Completion | Failure:
        """One attempt, bounded whole by `timeout`: the HTTP call runs on a daemon thread (module docstring)."""
        box: list[Completion | Failure] = []

        def work() -> None:
            try:
                box.append(self._call(client, request, timeout))
            except BaseException as exc:  # a bug in the SDK's path must not end the thread silently
                box.append(Failure(f"client error ({type(exc).__name__})", retryable=False))

        worker = threading.Thread(target=work, name="memd-model-call", daemon=True)
        worker.start()
        worker.join(timeout)
        if box:
            return box[0]
        self._retire(client)
        return Failure(f"timed out after {timeout:g} s", retryable=True)

    def _call(self, client: anthropic.Anthropic, request: dict[str, Any], timeout: float) -> Completion | Failure:
        """One HTTP call; every SDK error is turned into a `Failure` here, inside the except."""
        import anthropic  # noqa: PLC0415 - start-up: the ~1 s anthropic import only where a model call is made

        try:
            response = client.messages.create(**request, timeout=timeout)
        except anthropic.APIStatusError as exc:
            return status_failure(exc, self._clock())
        except anthropic.APITimeoutError:
            return Failure(f"timed out after {timeout:g} s", retryable=True)
        except anthropic.APIConnectionError as exc:
            cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "unknown cause"
            return Failure(f"connection error ({cause})", retryable=True)
        except anthropic.APIResponseValidationError:
            return Failure("malformed response: it does not match the Messages API schema", retryable=False)
        except json.JSONDecodeError:
            return Failure("malformed response: the body is not valid JSON", retryable=False)
        except anthropic.AnthropicError as exc:
            return Failure(f"client error ({type(exc).__name__})", retryable=False)
        return completion_of(response, request["model"])

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
