"""Builds a job's context: settings, a state connection, the clock, the model layer.

The model layer is built lazily (the SDK is imported only on a model call) and
wired to record every call's usage in `model_calls` and the run's own totals.
"""

from __future__ import annotations

import threading
from pathlib import Path
from collections.abc import Callable
from datetime import datetime
from typing import Any

from memd import state
from memd.clock import Clock, iso, system_clock
from memd.jobctx import JobContext
from memd.settings import Settings
from memd.tree import Home

_usage_lock = threading.Lock()


def llm_config(settings: Settings, memd_dir: Path | None = None) -> Any:
    """The model layer's config from settings; the key from the environment or the private key file."""
    from memd.keyfile import load_key
    from memd.llmtypes import LLMConfig

    m = settings.memd
    return LLMConfig(
        provider=m["provider"],
        small_model=m["smallModel"],
        strong_model=m["strongModel"],
        base_url=m["baseUrl"] or None,
        api_key=load_key(memd_dir)[0] if memd_dir is not None else None,
        timeout_s=float(m["timeoutSeconds"]),
        max_retries=int(m["maxRetries"]),
        daily_token_budget=int(m["dailyTokenBudget"]),
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
    from memd.llm import LLM

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
) -> JobContext:
    conn = state.connect(home.state_db, readonly=readonly)
    return JobContext(
        home=home, settings=settings, conn=conn, now=now, log=log, should_stop=should_stop, llm_factory=make_llm
    )
