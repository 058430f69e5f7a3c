"""Shared by the dream tests: settings, a job context, memory files, transcripts, two prepared scopes."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from memd import state
from memd.clock import iso
from memd.discovery import discover_sessions
from memd.index.refresh import refresh_dir
from memd.job.context import JobContext
from memd.ledger import store as ledger
from memd.llm.client import LLM
from memd.llm.types import LLMConfig
from memd.memory.file import Memory, render_memory
from memd.settings import Settings, parse_text
from memd.tree import Home, Place
from tests.fakeapi import (
    FakeAnthropic,
)

KEY = "-work-proj"
TARGET = Place("project", KEY)


# ----------------------------------------------------------------------------- helpers


def mk_settings(provider: str = "offline", memd: dict[str, Any] | None = None, **memory: Any) -> Settings:
    s = parse_text(json.dumps({"memory": memory, "memd": {"provider": provider, **(memd or {})}}))
    assert not s.warnings, s.warnings
    return s


def fake_llm(url: str) -> Any:
    cfg = LLMConfig(provider="anthropic", base_url=url, api_key="test-key", timeout_s=20, max_retries=0,
                    daily_token_budget=0)  # fmt: skip
    return lambda ctx: LLM(cfg, usage_sink=lambda rec: None)


def make_ctx(home: Path, s: Settings, *, now: Any = None, url: str | None = None) -> JobContext:
    h = Home(home)
    clock = now if callable(now) else (lambda: now) if now is not None else (lambda: datetime.now(UTC))
    return JobContext(h, s, state.connect(h.state_db), clock, structlog.get_logger("test"),
                      llm_factory=fake_llm(url) if url else None)  # fmt: skip


def mdir(home: Path, key: str | None = KEY) -> Path:
    d = home / "memory" if key is None else home / "projects" / key / "memory"
    d.mkdir(parents=True, exist_ok=True)
    return d


def write_mem(d: Path, name: str, desc: str, typ: str, body: str, *, age_h: float = 48.0, memd: bool = True,
              extra: dict[str, Any] | None = None) -> Path:  # fmt: skip
    """A memory file dated `age_h` hours ago; memd's own files say so (source + matching `updated`)."""
    t = time.time() - age_h * 3600
    meta: dict[str, Any] = {"source": "memd", "updated": iso(datetime.fromtimestamp(t, UTC))} if memd else {}
    meta.update(extra or {})
    p = d / f"{name}.md"
    p.write_text(render_memory(name, desc, typ, body, meta), encoding="utf-8")
    os.utime(p, (t, t))
    return p


def files_of(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def snapshot_files(entry: Path) -> dict[str, bytes]:
    """The top-level files a history entry's snapshot kept, whichever its layout (pack or `files/`)."""
    from memd.history import kept  # noqa: PLC0415 - test helper

    return kept.top_files(entry, lambda _n: True)


def mtimes_of(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted(d.iterdir()) if p.is_file()}


def write_session(home: Path, key: str, sid: str, ts: datetime, *, sidechain: bool = False, text_: str = "hello there, please fix the build") -> None:  # fmt: skip
    d = home / "projects" / key
    d.mkdir(parents=True, exist_ok=True)
    base: dict[str, Any] = {"sessionId": sid, "timestamp": iso(ts)}
    if sidechain:
        base.update(isSidechain=True, agentId="a1")
    recs = [
        {**base, "type": "user", "uuid": f"{sid}-u", "message": {"role": "user", "content": text_}},
        {**base, "type": "assistant", "uuid": f"{sid}-a", "message": {"id": f"m-{sid}", "role": "assistant",
                                                                      "content": [{"type": "text", "text": "ok"}]}},
    ]  # fmt: skip
    (d / f"{sid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def ingest(home: Path) -> None:
    h = Home(home)
    conn = state.connect(h.state_db)
    try:
        for sf in discover_sessions(h):
            ledger.ingest(conn, sf, iso(datetime.now(UTC)))
    finally:
        conn.close()


def msgs(api: FakeAnthropic) -> list[Any]:
    """Messages API requests the fake received (each a dict of the body; `.path` says where it went)."""
    return [r for r in list(api.requests) if r.path == "/v1/messages"]


def mem(name: str, typ: str, desc: str, body: str, mtime: float = 1.7e9, metadata: dict[str, Any] | None = None) -> Memory:
    return Memory(Path(f"/m/{name}.md"), name, desc, typ, body, mtime, len(body), metadata=metadata or {})


def offline_scope(home: Path) -> Path:
    d = mdir(home)
    write_mem(d, "tabs", "the user indents with tabs here", "feedback", "Use tabs, not spaces. Why: history uses tabs.", age_h=72)
    write_mem(d, "tabs-2", "The user indents with tabs here", "feedback", "Use tabs, not spaces! Why: history uses tabs", age_h=30)
    write_mem(d, "freeze", "deploy freeze", "project", "We freeze deploys tomorrow, until next Monday.", age_h=24 * 3)
    write_mem(d, "board", "the team board", "reference", "See https://example.com/board, updated yesterday.", age_h=50, memd=False)  # by hand
    write_mem(d, "board-copy", "the team board", "reference", "See https://example.com/board, updated yesterday!", age_h=40)
    return d


def model_scope(home: Path) -> Path:
    d = mdir(home)
    write_mem(d, "pnpm", "the project uses pnpm", "project", "Use pnpm, not npm. Why: lockfile.", age_h=80)
    write_mem(d, "pnpm-ci", "CI installs with pnpm", "project", "CI runs pnpm install --frozen-lockfile.", age_h=70)
    write_mem(d, "node", "node version", "project", "Node 18 until tomorrow, then Node 22.", age_h=60)
    write_mem(d, "staging-url", "staging dashboard", "reference", "https://staging.example.com", age_h=50)
    write_mem(d, "mine", "my own note", "project", "Written by the user by hand.", age_h=40, memd=False)
    refresh_dir(Home(home), "project", KEY, d)
    return d
