"""Shared pieces of the summary tests: settings, contexts, transcript records, an independent due count.

Real parts throughout: the ledger ingests real transcripts, jobs run through
`memd.job.runner.run_job` (locks, run records), the model path goes through the
real `anthropic` client to a local fake of the Messages API.
"""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from jobs.summary.document import (
    FOOTER_PREFIX,
    HEADINGS,
    SECTION_IDS,
    Summary,
    parse_summary,
)
from jobs.summary.trigger import Thresholds
from memd import state
from memd.discovery import discover_sessions
from memd.job.context import JobContext, record_call
from memd.ledger import store as ledger
from memd.llm.client import LLM
from memd.llm.types import LLMConfig
from memd.settings import Settings, parse_text
from memd.tree import Home
from tests.fakeapi import request_user_text
from tests.reference import _result_len, _text, _tool_len

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NOW_ISO = "2026-11-30T12:00:00.000Z"
SMALL = Thresholds(enabled=True, min_init_tokens=2000, min_update_tokens=1000, tool_calls_between=3)
SMALL_SETTINGS = {"minInitTokens": 2000, "minUpdateTokens": 1000, "toolCallsBetween": 3}
ORDER = [HEADINGS[s] for s in SECTION_IDS]


def make_settings(session: dict[str, Any] | None = None, provider: str = "offline", **memory: Any) -> Settings:
    body = {"memory": {"sessionMemory": session or {}, **memory}, "memd": {"provider": provider}}
    s = parse_text(json.dumps(body))
    assert not s.warnings, s.warnings
    return s


def offline_llm(ctx: JobContext) -> Any:
    """The real model layer with the offline provider (no network)."""

    return LLM(_config("offline", None), usage_sink=lambda rec: None, tokens_used_today=lambda: 0)


def _config(provider: str, base_url: str | None) -> Any:
    return LLMConfig(
        provider=provider, small_model="claude-haiku-4-5", strong_model="claude-sonnet-4-6", base_url=base_url,
        api_key="test", timeout_s=10.0, max_retries=0, daily_token_budget=10_000_000, max_output_tokens=16_000,
    )  # fmt: skip


def make_ctx(home: Path, settings: Settings, llm_factory: Any = None) -> JobContext:
    h = Home(home)
    return JobContext(
        home=h, settings=settings, conn=state.connect(h.state_db), now=lambda: NOW,
        log=structlog.get_logger(), llm_factory=llm_factory,
    )  # fmt: skip


def ingest(ctx: JobContext) -> None:
    for sf in discover_sessions(ctx.home):
        ledger.ingest(ctx.conn, sf, NOW_ISO)


def assert_whole(text: str) -> Summary:
    """A summary file as memd writes it: a title, all sections in order, the footer last."""
    assert text.startswith("# "), text[:200]
    heads = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert heads == ORDER, heads
    assert text.rstrip("\n").splitlines()[-1].startswith(FOOTER_PREFIX), text[-300:]
    assert text.endswith("-->\n")
    parsed = parse_summary(text)
    assert set(parsed.sections) == set(SECTION_IDS)
    return parsed


def rec_user(text: str, ts: str = "2026-11-30T10:00:00.000Z", **extra: Any) -> dict[str, Any]:
    return {"type": "user", "uuid": f"u{random.random()}", "sessionId": "s", "timestamp": ts,
            "message": {"role": "user", "content": text}, **extra}  # fmt: skip


def rec_assistant(blocks: list[dict[str, Any]], mid: str, ts: str = "2026-11-30T10:00:01.000Z") -> dict[str, Any]:
    return {"type": "assistant", "uuid": f"a{random.random()}", "sessionId": "s", "timestamp": ts,
            "message": {"id": mid, "role": "assistant", "content": blocks}}  # fmt: skip


def rec_result(tid: str, content: str, is_error: bool = False) -> dict[str, Any]:
    return {"type": "user", "uuid": f"r{random.random()}", "sessionId": "s", "timestamp": "2026-11-30T10:00:02.000Z",
            "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": tid, "content": content, "is_error": is_error}]}}  # fmt: skip


def write_jsonl(path: Path, records: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as fh:
        fh.writelines((r if isinstance(r, str) else json.dumps(r)).encode() + b"\n" for r in records)


class IndependentCounter:
    """The §4 trigger recomputed from raw lines with stdlib json, apart from memd.transcripts.formats.

    Mirrors the counting rules of tests/reference.py record by record: the safe
    point is after a record that leaves no tool call unanswered; a natural break
    is a last main-thread assistant turn (one message id) without a tool call.
    """

    def __init__(self) -> None:
        self.chars = 0
        self.tool_ids: set[str] = set()
        self.answered: set[str] = set()
        self.turns: list[Any] = []
        self.last_had_tool = False
        self.safe_chars = 0
        self.safe_calls = 0
        self.subagent: bool | None = None

    def feed(self, r: Any) -> None:
        if not isinstance(r, dict):
            return
        t = r.get("type")
        if t in ("user", "assistant") and self.subagent is None:
            self.subagent = r.get("isSidechain") is True and bool(r.get("agentId"))
        if t in ("user", "assistant") and r.get("isSidechain") is not True and isinstance(r.get("message"), dict):
            msg = r["message"]
            content = msg.get("content")
            if t == "assistant":
                mid = msg.get("id")
                if not self.turns or mid is None or self.turns[-1] != mid:
                    self.turns.append(mid)
                    self.last_had_tool = False
                if isinstance(content, str):
                    self.chars += len(content)
                for b in content if isinstance(content, list) else []:
                    if b.get("type") == "text":
                        self.chars += len(b.get("text") or "")
                    elif b.get("type") == "tool_use":
                        self.chars += _tool_len(b)
                        self.tool_ids.add(b["id"])
                        self.last_had_tool = True
            elif r.get("isCompactSummary") is not True:
                for b in content if isinstance(content, list) else []:
                    if isinstance(b, dict) and b.get("type") == "tool_result":
                        self.answered.add(b.get("tool_use_id"))
                        self.chars += _result_len(b.get("content"))
                self.chars += len(_text(content))
        if not (self.tool_ids - self.answered):
            self.safe_chars, self.safe_calls = self.chars, len(self.tool_ids)

    @property
    def tokens(self) -> int:
        return (self.safe_chars + 3) // 4

    @property
    def natural_break(self) -> bool:
        return bool(self.turns) and not self.last_had_tool and not (self.tool_ids - self.answered)


def expected_due_lines(path: Path, init: int, update: int, between: int) -> list[int]:
    """Line numbers after which a summary is due, with the cursor moving at each."""
    raw = path.read_bytes()
    lines = raw[: raw.rfind(b"\n") + 1].split(b"\n")[:-1] if b"\n" in raw else []
    c = IndependentCounter()
    last: tuple[int, int] | None = None
    out = []
    for n, line in enumerate(lines, 1):
        try:
            c.feed(json.loads(line))
        except ValueError:
            pass
        if c.subagent:
            continue
        base_tokens, base_calls = last or (0, 0)
        if last is None and c.tokens < init:
            continue
        if c.tokens - base_tokens < update:
            continue
        if c.safe_calls - base_calls >= between or c.natural_break:
            out.append(n)
            last = (c.tokens, c.safe_calls)
    return out


def first_request(path: Path) -> str:
    for line in path.read_bytes().splitlines():
        r = json.loads(line)
        if r.get("type") != "user" or r.get("isSidechain") or r.get("isMeta"):
            continue
        c = r["message"]["content"]
        if isinstance(c, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in c):
            continue
        text = _text(c).strip()
        if text and not text.startswith("<"):
            return text
    raise AssertionError("no human request")


def shell_commands(path: Path) -> list[str]:
    out = []
    for line in path.read_bytes().splitlines():
        r = json.loads(line)
        if r.get("type") == "assistant" and not r.get("isSidechain"):
            for b in r["message"].get("content") or []:
                if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") == "Bash":
                    out.append(b["input"]["command"])
    return out


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def api_llm(url: str) -> Any:
    """The real model layer and the real `anthropic` client, pointed at the fake server."""

    return lambda ctx: LLM(_config("anthropic", url), usage_sink=lambda rec: record_call(ctx, rec),
                           tokens_used_today=lambda: 0)  # fmt: skip


def model_answer(marker: str, **over: str) -> str:
    """A well-formed answer; `over` replaces section bodies by id ("" drops the section)."""
    bodies = {sid: f"- {marker} {sid}" for sid in SECTION_IDS}
    bodies.update(over)
    parts = [f"# Title {marker}"] + [f"## {HEADINGS[sid]}\n{b}" for sid, b in bodies.items() if b]
    return "\n\n".join(parts)


def user_text(body: dict[str, Any]) -> str:
    return request_user_text(body)


def synthetic_session(path: Path, turns: int, start: int = 0, chars: int = 2000) -> None:
    recs: list[Any] = []
    for i in range(start, start + turns):
        recs += [
            rec_user(f"request number {i}: " + "word " * (chars // 5), ts=f"2026-11-30T10:{i % 60:02d}:00.000Z"),
            rec_assistant([{"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": f"make step{i}"}}], f"m{i}"),
            rec_result(f"t{i}", f"step {i} ok"),
            rec_assistant([{"type": "text", "text": f"Finished step {i}."}], f"n{i}"),
        ]  # fmt: skip
    write_jsonl(path, recs)

