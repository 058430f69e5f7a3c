"""What a job gets and gives back: its target, its context, its result — the job contract — and
how a context is built (settings, a state connection, the clock, a lazily built model layer that
records every call's usage).

A job module in `jobs/` knows *what* to do; `memd.job.runner` decides *under which
lock*, records the run and turns exceptions into outcomes. The contract of a
job module is `Job` below (a `typing.Protocol` that mypy checks every module in
`memd.daemon.registry` against). `due` gathers facts with I/O and decides with pure
functions of those facts, the settings and `ctx.now()`.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from memd import state
from memd.clock import Clock, iso, system_clock
from memd.settings import Settings
from memd.tree import Home, Place

Outcome = Literal["ok", "skipped", "deferred", "failed"]




class Job(Protocol):
    """The contract of a job module (`jobs/<name>`): what it is, what it locks, what is due, the run."""

    NAME: str  # "extract", "summary", "dream", "index"
    TRIGGER: str  # one line for `memd jobs`
    NEEDS_MODEL: bool  # refused while the settings fail closed (memd.job.runner.refusal)
    TARGET_KINDS: tuple[str, ...]  # which Place kinds it takes ("session", "project", "global")

    def scopes(self, target: Place) -> list[Place]:
        """The locks held for the whole run (a job may take more itself, e.g. only to apply)."""
        ...

    def targets(self, ctx: JobContext) -> list[Place]:
        """Every target (`run-now --force --all`)."""
        ...

    def due(self, ctx: JobContext, only: Place | None = None) -> list[Place]:
        """The targets due now by the thresholds; `only` narrows to one."""
        ...

    def run(self, ctx: JobContext, target: Place, force: bool) -> RunResult:
        """The work; `force` skips thresholds, never a switch that says no."""
        ...


@dataclass
class RunResult:
    """How a run ended. `deferred` means: not now, try later (lock, key, budget)."""

    outcome: Outcome
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


class Deferred(Exception):
    """Raised by a job (or the model layer) when it must wait: it is retried later."""


@dataclass
class JobContext:
    """Everything a run may use. One per run, so the sqlite connection is never shared across threads."""

    home: Home
    settings: Settings
    conn: sqlite3.Connection
    now: Callable[[], datetime]
    log: Any
    should_stop: Callable[[], bool] = lambda: False
    llm_factory: Callable[[JobContext], Any] | None = None
    # The daemon's: its rewrites of a project's MEMORY.md wait for the agent to go quiet (memd.index.hold),
    # and a held one is handed back here (the scope, the seconds left) to be run again then. None: at once.
    hold_index: Callable[[Place, float], None] | None = None
    # The daemon's answer to a hook (memd.agent.hooks.respond): the hook's records, kept to be written on a
    # connection once the hook has taken the answer. None: written at once.
    deferred: list[Callable[[sqlite3.Connection], None]] | None = None
    usage: dict[str, int] = field(default_factory=lambda: {"calls": 0, "input_tokens": 0, "output_tokens": 0})
    # `memd run-now`'s: one search index writer for all of this context's runs (a connection opened, its schema
    # read and its WAL made and removed once, not once a scope: ~0.5 ms each of 21 scopes' nothing-changed
    # checks). False (the daemon's runs): each refresh opens and closes its own.
    keep_search: bool = False
    _llm: Any = None
    _provider: str | None = None
    _search: Any = None

    def search_index(self) -> Any:
        """The search index writer kept for this context's runs, opened at its first use (`keep_search`);
        None when each refresh opens its own."""
        if not self.keep_search:
            return None
        if self._search is None:
            from memd.index.writer import SearchIndex  # noqa: PLC0415 - start-up

            self._search = SearchIndex.for_home(self.home)
        return self._search

    def drop_search(self) -> None:
        """Close the kept search index writer, if open: at the context's end, or before its file is set
        aside (the next use opens the new one)."""
        search, self._search = self._search, None
        if search is not None:
            search.close()

    @property
    def provider(self) -> str:
        """The provider of this run, resolved once (from the settings and the key, by the model
        layer): "offline" or "anthropic". A model provider without a key makes the run wait
        (`Deferred`) before it does any work, in every job alike."""
        if self._provider is None and self.llm_factory in (None, make_llm) and self.settings.memd.provider == "offline":
            self._provider = "offline"  # what memd's model layer would say, without building it (~30 ms of imports)
        if self._provider is None:
            chosen = str(getattr(self.llm, "provider", "offline"))
            available = getattr(self.llm, "available", None)
            if chosen in ("anthropic", "claude-code") and available is not None:
                avail = available()
                if not avail and getattr(avail, "reason", None) in ("no-key", "no-claude", "paused"):
                    raise Deferred(str(getattr(avail, "why", "no API key")))
            self._provider = chosen
        return self._provider

    def index_held(self, place: Place, seconds: float) -> None:
        """A rewrite of `place`'s MEMORY.md this run held for an agent at work: the daemon runs the
        index job again when the `seconds` are over (nothing to do outside the daemon)."""
        if seconds > 0 and self.hold_index is not None:
            self.hold_index(place, seconds)

    @property
    def llm(self) -> Any:
        """The model layer, built on first use so jobs without model calls never import the SDK."""
        if self._llm is None:
            llm = (self.llm_factory or make_llm)(self)
            if getattr(llm, "should_stop", False) is None:
                llm.should_stop = self.should_stop  # a stop request starts no further attempt (issue 16)
            self._llm = llm
        return self._llm


def get_cursor(conn: sqlite3.Connection, job: str, target: str) -> dict[str, Any] | None:
    row = conn.execute("SELECT value FROM cursors WHERE job=? AND target=?", (job, target)).fetchone()
    import orjson  # noqa: PLC0415 - start-up: orjson only where JSON is read (the hooks skip it)
    return None if row is None else orjson.loads(row[0])


def set_cursor(conn: sqlite3.Connection, job: str, target: str, value: dict[str, Any], now_iso: str) -> None:
    """Advance a cursor. Call only once the run's outputs are durable (the cursor rule)."""
    import orjson  # noqa: PLC0415 - start-up: orjson only where JSON is read (the hooks skip it)

    conn.execute(
        "INSERT INTO cursors(job, target, value, updated_at) VALUES (?,?,?,?) "
        "ON CONFLICT(job, target) DO UPDATE SET value=excluded.value, updated_at=excluded.updated_at",
        (job, target, orjson.dumps(value).decode(), now_iso),
    )


# --------------------------------------------------------------------------- building a context

_usage_lock = threading.Lock()


def llm_config(settings: Settings, memd_dir: Path | None = None) -> Any:
    """The model layer's config from settings; the key from the environment or the private key file."""

    m = settings.memd
    from memd.keyfile import load_key  # noqa: PLC0415 - start-up
    from memd.llm.types import LLMConfig  # noqa: PLC0415 - start-up
    return LLMConfig(
        provider=m.provider,
        small_model=m.small_model,
        strong_model=m.strong_model,
        base_url=m.base_url or None,
        api_key=load_key(memd_dir)[0] if memd_dir is not None else None,
        claude_path=m.claude_path,
        claude_concurrency=m.claude_concurrency,
        state_dir=str(memd_dir) if memd_dir is not None else None,
        timeout_s=float(m.timeout_seconds),
        max_retries=m.max_retries,
        daily_token_budget=m.daily_token_budget,
    )


def tokens_today(conn: Any, now: datetime) -> int:
    row = conn.execute(
        "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM model_calls WHERE day=?", (now.date().isoformat(),)
    ).fetchone()
    return int(row[0])


def record_call(ctx: JobContext, rec: dict[str, Any]) -> None:
    """The usage sink: one `model_calls` row per call, and the run's running totals."""
    now = ctx.now()
    ctx.conn.execute(
        "INSERT INTO model_calls(ts, day, job, model, tier, input_tokens, output_tokens, cache_read_tokens, "
        "cache_write_tokens, ok, error) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (
            iso(now), now.date().isoformat(), rec.get("job") or "?", rec.get("model") or "?", rec.get("tier"),
            int(rec.get("input_tokens") or 0), int(rec.get("output_tokens") or 0),
            int(rec.get("cache_read_tokens") or 0), int(rec.get("cache_write_tokens") or 0),
            1 if rec.get("ok") else 0, rec.get("error"),
        ),
    )  # fmt: skip
    ctx.usage["calls"] = ctx.usage.get("calls", 0) + 1
    ctx.usage["input_tokens"] = ctx.usage.get("input_tokens", 0) + int(rec.get("input_tokens") or 0)
    ctx.usage["output_tokens"] = ctx.usage.get("output_tokens", 0) + int(rec.get("output_tokens") or 0)


def make_llm(ctx: JobContext) -> Any:
    from memd.llm.client import LLM  # noqa: PLC0415 - start-up
    return LLM(
        llm_config(ctx.settings, ctx.home.memd_dir),
        usage_sink=lambda rec: record_call(ctx, rec),
        tokens_used_today=lambda: tokens_today(ctx.conn, ctx.now()),
    )


def make_context(
    home: Home,
    settings: Settings,
    *,
    log: Any,
    now: Clock = system_clock,
    should_stop: Callable[[], bool] = lambda: False,
    readonly: bool = False,
    hold_index: Callable[[Place, float], None] | None = None,
) -> JobContext:
    conn = state.connect(home.state_db, readonly=readonly)
    return JobContext(home=home, settings=settings, conn=conn, now=now, log=log, should_stop=should_stop,
                      llm_factory=make_llm, hold_index=hold_index)  # fmt: skip
