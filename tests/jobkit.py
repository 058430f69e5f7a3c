"""Building job contexts for tests: a real state DB, real settings, a real LLM at a fake server."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from memd import settings as st
from memd import state
from memd.clock import iso
from memd.discovery import discover_sessions
from memd.job.context import JobContext, llm_config, record_call, tokens_today
from memd.ledger import store as ledger
from memd.llm.client import LLM
from memd.tree import Home

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def make_settings(memd: dict[str, Any] | None = None, memory: dict[str, Any] | None = None) -> st.Settings:
    return st.parse_text(json.dumps({"memory": memory or {}, "memd": memd or {}}))


def context(home: Path, settings: st.Settings, *, fake_url: str | None = None, now: datetime = NOW,
            sleep: Any = None) -> JobContext:  # fmt: skip
    """A context whose model layer is the real `memd.llm.client.LLM` talking to `fake_url`."""

    h = Home(home)
    conn = state.connect(h.state_db)

    def factory(ctx: JobContext) -> LLM:
        cfg = replace(llm_config(settings), provider="anthropic" if fake_url else "offline", base_url=fake_url,
                      api_key="test-key", max_retries=3)  # fmt: skip
        return LLM(cfg, usage_sink=lambda rec: record_call(ctx, rec),
                   tokens_used_today=lambda: tokens_today(ctx.conn, ctx.now()), sleep=sleep or (lambda s: None))  # fmt: skip

    return JobContext(h, settings, conn, lambda: now, structlog.get_logger("test"), llm_factory=factory)


def ingest(home: Path, now: datetime = NOW) -> list[ledger.IngestResult]:
    h = Home(home)
    conn = state.connect(h.state_db)
    try:
        return [ledger.ingest(conn, sf, iso(now)) for sf in discover_sessions(h)]
    finally:
        conn.close()


def write_session(path: Path, turns: list[tuple[str, str]], start: int = 0) -> None:
    """Append a transcript in the Claude Code form: (role, text) pairs; role 'user' or 'assistant'."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        for i, (role, text) in enumerate(turns, start):
            rec: dict[str, Any] = {"type": role, "uuid": f"u{i}", "sessionId": path.stem,
                                   "timestamp": f"2026-11-29T10:{i // 60:02d}:{i % 60:02d}Z"}  # fmt: skip
            if role == "assistant":
                rec["message"] = {"id": f"msg_{i}", "role": "assistant", "content": [{"type": "text", "text": text}],
                                  "usage": {"input_tokens": 10, "output_tokens": 5}}  # fmt: skip
            else:
                rec["message"] = {"role": "user", "content": text}
            fh.write(json.dumps(rec) + "\n")
