"""The `claude-code` provider: one model answer from the user's own Claude Code, isolated and bounded.

SPEC §15. Users with a Claude subscription have no API key; their installed `claude` CLI, in
print mode, answers with their own login. `memd.llm.client.LLM` sends every call of this
provider here (after the redaction, budget and stop checks it applies to every provider), so the
gate, extraction, summaries, dream and recall all use it alike.

One call is one process (measured with Claude Code 2.1.332, tests/llm/test_claudecode_real.py):

    claude -p --output-format json --model <haiku|sonnet|configured> --tools ""
      --setting-sources "" --strict-mcp-config --no-session-persistence
      --disable-slash-commands --system-prompt-file <memd's system prompt>

with the user prompt on stdin, from an empty temporary working directory, and the environment
`CLAUDE_CODE_DISABLE_AUTO_MEMORY=1`, `CLAUDE_CODE_DISABLE_THINKING=1` (thinking off: the request
carries no `thinking` block; `MAX_THINKING_TOKENS=0` alone leaves adaptive thinking on),
`CLAUDE_CODE_MAX_OUTPUT_TOKENS`, `CLAUDE_CODE_MAX_RETRIES=0` (Claude Code retries a 429 on its
own otherwise, past memd's deadline and its stop flag), and no non-essential traffic; what a
parent Claude Code session set for its hooks (`PARENT_SESSION_ENV`) is dropped. What each switch
removes:
`--tools ""` the 12 built-in tools; `--setting-sources ""` the user's and the project's
settings, so no hook runs (memd's own SessionStart and UserPromptSubmit hooks would recurse) and
no `CLAUDE.md` is read; `--strict-mcp-config` every MCP server (memd's included);
`--no-session-persistence` the transcript (memd would ingest it as a session);
`--system-prompt-file` Claude Code's 7 KB agent prompt (memd's prompt replaces it); the neutral
directory any project's `CLAUDE.md`, `MEMORY.md` or git state.

Invariants:

- Bounded end to end: the process runs in its own session (process group) and the whole group
  is killed at the deadline; the deadline counts the wait for a call slot too.
- One call at a time by default (`memd.claudeConcurrency` slots): a thread lock per process and
  an exclusive `flock` on a slot file under memd's directory across processes (the daemon and a
  `memd run-now` share the user's plan).
- A usage-limit or rate-limit answer is not retried: it becomes a `Limited` with the time the
  answer names (default `DEFAULT_LIMIT_WAIT_S`), which `attempt` records as a pause
  (`memd.llm.claudehome.write_pause`) and raises as `ModelPaused` (the job is deferred; every
  later call finds the pause in `availability` and starts no process until it ends).
- Nothing of the prompt reaches an error message: errors are built from the result's status and
  a short redacted excerpt of Claude Code's own message.
- `read_result` and `limit_wait` are pure (time passed in), tested without a process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import structlog

from memd.llm.types import (
    RETRYABLE_STATUS,
    Availability,
    BudgetExceeded,
    Completion,
    Failure,
    LLMConfig,
    ModelPaused,
    short,
)

__all__ = ["DEFAULT_LIMIT_WAIT_S", "Limited", "attempt", "availability", "call", "cli_model", "command", "limit_wait",
           "read_result"]

log = structlog.get_logger("memd.llm")

# A limit whose answer names no time: wait this long (hours, not seconds: a subscription's limit
# resets in hours, and trying every five minutes would only burn more of it).
DEFAULT_LIMIT_WAIT_S = 3600.0
MAX_LIMIT_WAIT_S = 8 * 24 * 3600.0  # a weekly limit, plus a day
KILL_GRACE_S = 5.0
SLOT_POLL_S = 0.05

ISOLATION_FLAGS = ("--tools", "", "--setting-sources", "", "--strict-mcp-config", "--no-session-persistence",
                   "--disable-slash-commands")  # fmt: skip
ISOLATION_ENV = {
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",
    "CLAUDE_CODE_DISABLE_THINKING": "1",
    "MAX_THINKING_TOKENS": "0",
    "CLAUDE_CODE_MAX_RETRIES": "0",  # memd retries itself (its policy, its stop flag, its deadline)
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "NO_COLOR": "1",
}
# Claude Code's aliases for memd's two tiers, used while the model settings keep their defaults
# (which are API model ids a subscription may not offer under that name).
ALIASES = {"small": "haiku", "strong": "sonnet"}
_LIMIT_WORDS = re.compile(
    r"(usage|rate|session|weekly|5-hour|five.hour|spend)[ _-]?limit|hit your (\w+ )?limit|limit reached|rate_limit",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Limited:
    """A usage-limit or rate-limit answer: wait `wait_s` seconds before any further call."""

    message: str
    wait_s: float


def cli_model(tier: str, configured: str, default: str) -> str:
    """The `--model` value: Claude Code's alias for the tier while the setting is memd's default."""
    return ALIASES.get(tier, configured) if configured == default else configured


def command(binary: str, model: str, system_file: str) -> list[str]:
    """The argument vector of one call (the prompt goes on stdin)."""
    return [binary, "-p", "--output-format", "json", "--model", model, *ISOLATION_FLAGS,
            "--system-prompt-file", system_file]  # fmt: skip


# What a parent Claude Code session sets for its hooks (memd's recall hook may make this call):
# none of it may tie memd's call to that session, its project or its IDE.
PARENT_SESSION_ENV = ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SSE_PORT", "CLAUDE_PROJECT_DIR",
                      "CLAUDE_ENV_FILE", "CLAUDE_SESSION_ID")  # fmt: skip


def environment(base: Mapping[str, str], max_tokens: int) -> dict[str, str]:
    """The user's environment (their login, PATH, proxies) plus the isolation switches, without
    what a parent Claude Code session set."""
    env = {k: v for k, v in base.items() if k not in PARENT_SESSION_ENV}
    env.update(ISOLATION_ENV)
    env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(int(max_tokens))
    return env


# --- reading what Claude Code printed (pure) ------------------------------------------------------


def _result_object(stdout: str) -> dict[str, Any] | None:
    """The `{"type": "result", ...}` object of `--output-format json` (the last JSON line that is one)."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "result":
            return obj
    return None


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else 0


def read_result(stdout: str, returncode: int, stderr: str, requested_model: str, now: datetime) -> Completion | Failure | Limited:
    """What one `claude -p --output-format json` run answered: an answer, a failure, or a limit."""
    obj = _result_object(stdout)
    if obj is None:
        said = stderr.strip() or stdout.strip()
        if _LIMIT_WORDS.search(said):
            return Limited(f"claude-code: {short(said)}", limit_wait(said, now))
        return Failure(f"claude-code exited {returncode} without a result: {short(said) or 'no output'}",
                       retryable=returncode != 0)  # fmt: skip
    text = obj.get("result")
    status = obj.get("api_error_status")
    status = int(status) if isinstance(status, int) and not isinstance(status, bool) else None
    if obj.get("is_error") or obj.get("subtype") != "success" or not isinstance(text, str):
        said = text if isinstance(text, str) else str(obj.get("subtype") or "error")
        if status == 429 or obj.get("api_error_type") == "rate_limit_error" or _LIMIT_WORDS.search(said):
            return Limited(f"claude-code: {short(said)}", limit_wait(said, now))
        hint = " (log in: run `claude` once and /login)" if status == 401 or "/login" in said else ""
        return Failure(f"claude-code: {short(said)}{hint}", retryable=status in RETRYABLE_STATUS, status=status)
    raw_usage, raw_models = obj.get("usage"), obj.get("modelUsage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    models: dict[str, Any] = raw_models if isinstance(raw_models, dict) else {}
    cost = obj.get("total_cost_usd")
    return Completion(
        text=text,
        model=str(next(iter(models), None) or requested_model),
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cache_read_tokens=_int(usage.get("cache_read_input_tokens")),
        cache_write_tokens=_int(usage.get("cache_creation_input_tokens")),
        stop_reason=obj.get("stop_reason") if isinstance(obj.get("stop_reason"), str) else None,
        cost_usd=float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None,
    )


_EPOCH = re.compile(r"\|\s*(\d{10})\b")
_RESETS_IN = re.compile(r"resets? in\s+(\d+)\s*(h|hours?|m|min|minutes?)\b", re.IGNORECASE)
_RESETS_AT = re.compile(r"resets?\s+(?:at\s+)?(\d{1,2})(?::(\d{2}))?\s*(am|pm)(?:\s*\(([^)]+)\))?", re.IGNORECASE)


def limit_wait(text: str, now: datetime) -> float:
    """Seconds until the limit `text` names resets, seen at `now` (an aware datetime).

    Understands Claude Code's forms: `…|<epoch seconds>`, `resets in 3 hours`, `resets 3pm
    (Europe/London)` / `resets 11:30am` (the next such wall-clock time in the named zone, else in
    `now`'s zone). Anything else waits `DEFAULT_LIMIT_WAIT_S`. Never below a minute, never above
    `MAX_LIMIT_WAIT_S`.
    """
    wait = DEFAULT_LIMIT_WAIT_S
    if m := _EPOCH.search(text):
        wait = int(m.group(1)) - now.timestamp()
    elif m := _RESETS_IN.search(text):
        wait = int(m.group(1)) * (3600 if m.group(2).lower().startswith("h") else 60)
    elif m := _RESETS_AT.search(text):
        wait = _until_wall_clock(now, int(m.group(1)), int(m.group(2) or 0), m.group(3).lower(), m.group(4))
    return min(MAX_LIMIT_WAIT_S, max(60.0, float(wait)))


def _until_wall_clock(now: datetime, hour: int, minute: int, ampm: str, zone: str | None) -> float:
    if not (1 <= hour <= 12 and 0 <= minute < 60):
        return DEFAULT_LIMIT_WAIT_S
    hour = hour % 12 + (12 if ampm == "pm" else 0)
    local = now
    if zone:
        try:
            from zoneinfo import ZoneInfo  # noqa: PLC0415 - only when a limit names a zone

            local = now.astimezone(ZoneInfo(zone.strip()))
        except (ValueError, KeyError, OSError):
            local = now
    target = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if target <= local:
        target += timedelta(days=1)
    return (target - local).total_seconds()


# --- running it ----------------------------------------------------------------------------------

_thread_slots: dict[int, threading.Semaphore] = {}
_thread_slots_lock = threading.Lock()


def _process_slots(n: int) -> threading.Semaphore:
    with _thread_slots_lock:
        return _thread_slots.setdefault(n, threading.Semaphore(n))


@contextlib.contextmanager
def _slot(lock_dir: Path | None, slots: int, deadline: float) -> Iterator[bool]:
    """Hold one of `slots` call slots (this process and, through `flock`, every memd process
    using `lock_dir`), waiting no later than `deadline`; yields False when none came free."""
    sem = _process_slots(max(1, slots))
    if not sem.acquire(timeout=max(0.0, deadline - time.monotonic())):
        yield False
        return
    fd: int | None = None
    try:
        if lock_dir is not None:
            import fcntl  # noqa: PLC0415 - POSIX only; no lock file elsewhere

            lock_dir.mkdir(parents=True, exist_ok=True)
            while fd is None:
                for i in range(max(1, slots)):
                    cand = os.open(lock_dir / f"claude-code.slot{i}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                    try:
                        fcntl.flock(cand, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        fd = cand
                        break
                    except OSError:
                        os.close(cand)
                if fd is None:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(SLOT_POLL_S)
        yield True
    finally:
        if fd is not None:
            os.close(fd)
        sem.release()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def call(
    binary: str,
    request: dict[str, Any],
    timeout: float,
    *,
    now: datetime,
    lock_dir: Path | None,
    slots: int = 1,
    env: Mapping[str, str] | None = None,
) -> Completion | Failure | Limited:
    """One `claude -p` run for a Messages-API-shaped, already redacted `request` (model,
    max_tokens, system blocks, one user message), bounded whole by `timeout` seconds."""
    deadline = time.monotonic() + timeout
    system = "\n\n".join(b.get("text", "") for b in request.get("system") or [] if isinstance(b, dict))
    user = str(request["messages"][0]["content"])
    with _slot(lock_dir, slots, deadline) as got:
        if not got:
            return Failure(f"timed out after {timeout:g} s waiting for another claude-code call", retryable=True)
        with tempfile.TemporaryDirectory(prefix="memd-claude-") as tmp:
            neutral = Path(tmp) / "cwd"
            neutral.mkdir(mode=0o700)
            system_file = Path(tmp) / "system.txt"
            system_file.write_text(system or "Answer the request.", encoding="utf-8")
            os.chmod(system_file, 0o600)
            argv = command(binary, str(request["model"]), str(system_file))
            return _run(argv, user, neutral, environment(env if env is not None else os.environ,
                                                        int(request.get("max_tokens") or 4096)),
                        deadline, timeout, str(request["model"]), now)  # fmt: skip


def _run(argv: list[str], user: str, cwd: Path, env: dict[str, str], deadline: float, timeout: float,
         model: str, now: datetime) -> Completion | Failure | Limited:  # fmt: skip
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
    except OSError as exc:
        return Failure(f"claude-code: cannot run {argv[0]} ({exc.strerror or type(exc).__name__})", retryable=False)
    try:
        out, err = proc.communicate(user.encode("utf-8"), timeout=max(0.01, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(KILL_GRACE_S)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        return Failure(f"timed out after {timeout:g} s (claude-code killed)", retryable=True)
    finally:
        _kill_group(proc)  # anything it left behind in its group goes with it
    return read_result(out.decode("utf-8", "replace"), proc.returncode, err.decode("utf-8", "replace"), model, now)


# --- what `memd.llm.client.LLM` asks of this provider -----------------------------------------------


def availability(config: LLMConfig, now_epoch: float, budget_spent: Callable[[], BudgetExceeded | None]) -> Availability:
    """The binary is there, no usage limit waits, today's budget is not spent."""
    from memd.llm.claudehome import find_claude, read_pause  # noqa: PLC0415 - start-up

    binary = find_claude(config.claude_path)
    if binary is None:
        where = config.claude_path or "`claude` on PATH"
        return Availability(False, f"claude-code: {where} not found (install Claude Code or set memd.claudePath)",
                            "no-claude")  # fmt: skip
    state_dir = Path(config.state_dir) if config.state_dir else None
    pause = read_pause(state_dir, datetime.fromtimestamp(now_epoch, UTC))
    if pause is not None:
        return Availability(False, f"claude-code: {pause['reason']}; model calls wait until "
                                   f"{pause['until'].isoformat(timespec='minutes')}", "paused")  # fmt: skip
    spent = budget_spent()
    if spent is not None:
        return Availability(False, str(spent), "budget")
    return Availability(True, f"claude-code at {binary}", "ok")


def attempt(config: LLMConfig, request: dict[str, Any], timeout: float, now_epoch: float,
            record: Callable[[str, str], None]) -> Completion | Failure:  # fmt: skip
    """One call. A usage or rate limit pauses every model job until the time it names (the pause
    file), is recorded as a failed call (`record(model, error)`) and raises `ModelPaused`: it is
    not retried, which would only spend more of the plan."""
    from memd.llm.claudehome import find_claude, write_pause  # noqa: PLC0415 - start-up

    binary = find_claude(config.claude_path) or config.claude_path or "claude"
    now = datetime.fromtimestamp(now_epoch, UTC)
    state_dir = Path(config.state_dir) if config.state_dir else None
    outcome = call(binary, request, timeout, now=now, lock_dir=state_dir, slots=int(config.claude_concurrency))
    if not isinstance(outcome, Limited):
        return outcome
    until = now + timedelta(seconds=outcome.wait_s)
    if state_dir is not None:
        try:
            write_pause(state_dir, until, outcome.message)
        except OSError as exc:  # the job is deferred either way; only the pause is not kept
            log.error("model.pause_unrecorded", error=type(exc).__name__)
    record(str(request["model"]), outcome.message)
    log.warning("model.paused", provider="claude-code", until=until.isoformat(timespec="seconds"), error=outcome.message)
    raise ModelPaused(f"{outcome.message}; model calls wait until {until.isoformat(timespec='minutes')}",
                      until=until.timestamp())  # fmt: skip
