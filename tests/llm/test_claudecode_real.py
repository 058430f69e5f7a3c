"""The `claude-code` provider against the REAL Claude Code binary, pointed at the loopback fake API.

`ANTHROPIC_BASE_URL` (tests/fakeapi.py) and a dummy `ANTHROPIC_API_KEY` stand in for the user's
login; the Claude Code home is a temp directory holding a `CLAUDE.md`, a project `MEMORY.md` and
hooks, each with a marker that must never reach the request. Skipped when Claude Code cannot be
had (tests/realclaude.py says why).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import structlog

from jobs import extract
from memd import settings as st
from memd import state
from memd.job.context import JobContext, llm_config, record_call, tokens_today
from memd.job.runner import run_job
from memd.llm.claudehome import PAUSE_FILE, read_pause
from memd.llm.client import LLM
from memd.llm.types import LLMConfig, ModelCallFailed, ModelPaused
from memd.memory.scan import scan_dir
from memd.tree import Home, Place
from tests.fakeapi import FakeAnthropic, delay, op, ops_reply, status, text
from tests.jobkit import ingest, make_settings, write_session
from tests.procs import run_memd
from tests.realclaude import claude_env, claude_memory_key, claude_or_skip

SECRET = "sk-ant-api03-" + "Q" * 40
MARKERS = ("USER-CLAUDE-MD-MARKER", "PROJECT-MEMORY-MD-MARKER", "HOOK-OUTPUT-MARKER", "PROJECT-CLAUDE-MD-MARKER")


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A Claude Code home with everything isolation must keep out, and a project as the cwd."""
    claude = claude_or_skip()
    home = tmp_path / "home"
    config = home / ".claude"
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "CLAUDE.md").write_text("PROJECT-CLAUDE-MD-MARKER\n")
    config.mkdir(parents=True)
    (config / "CLAUDE.md").write_text("USER-CLAUDE-MD-MARKER\n")
    mem = config / "projects" / claude_memory_key(project) / "memory"
    mem.mkdir(parents=True)
    (mem / "MEMORY.md").write_text("- PROJECT-MEMORY-MD-MARKER\n")
    hook = f"echo HOOK-OUTPUT-MARKER; touch {tmp_path}/hook-ran"
    (config / "settings.json").write_text(json.dumps({"hooks": {
        event: [{"hooks": [{"type": "command", "command": hook}]}] for event in ("SessionStart", "UserPromptSubmit")}}))
    monkeypatch.chdir(project)
    return {"tmp": tmp_path, "home": home, "config": config, "project": project, "bin": Path(claude.bin),
            "memd": config / "memd"}  # fmt: skip


def _point(monkeypatch: pytest.MonkeyPatch, w: dict[str, Path], url: str) -> None:
    for k, v in claude_env(w["config"], url, w["home"]).items():
        monkeypatch.setenv(k, v)


def _llm(w: dict[str, Path], sink: list[dict], **kw: object) -> LLM:
    opts: dict = {"timeout_s": 60, "max_retries": 0, **kw}
    cfg = LLMConfig(provider="claude-code", claude_path=str(w["bin"]), state_dir=str(w["memd"]), **opts)
    return LLM(cfg, usage_sink=sink.append)


def _transcripts(config: Path) -> list[Path]:
    return sorted(config.rglob("*.jsonl"))


def test_a_call_sends_memds_prompt_only_and_leaves_no_transcript(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    sink: list[dict] = []
    scratch = world["tmp"] / "scratch"  # this test's own temporary directory: other tests' calls run beside it
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with FakeAnthropic([text("yes")]) as api:
        _point(monkeypatch, world, api.base_url)
        done = _llm(world, sink).complete(job="gate", tier="small", system="MEMD-GATE-SYSTEM: answer yes or no",
                                          user=f"Is this durable? we always use tabs. key {SECRET}")  # fmt: skip
        reqs = api.message_requests
    assert done.text == "yes" and done.input_tokens > 0 and done.output_tokens > 0
    (req,) = reqs
    body = json.dumps(req)
    assert "MEMD-GATE-SYSTEM" in json.dumps(req["system"]) and "we always use tabs" in json.dumps(req["messages"])
    assert not req.get("tools") and "thinking" not in req, sorted(req)
    assert req["model"].startswith("claude-haiku") or "haiku" in req["model"]
    for marker in MARKERS:
        assert marker not in body, marker
    assert SECRET not in body and "Q" * 40 not in body  # redacted before it left memd
    assert not (world["tmp"] / "hook-ran").exists()  # no hook ran: memd's own would recurse
    assert _transcripts(world["config"]) == [] and _transcripts(world["home"]) == []
    assert [r["job"] for r in sink] == ["gate"] and sink[0]["ok"] and sink[0]["input_tokens"] == done.input_tokens
    assert done.cost_usd is not None and done.cost_usd >= 0
    assert not list(scratch.glob("memd-claude-*"))  # the neutral directory and its prompt file are removed


def test_a_rate_limit_answer_pauses_model_jobs_for_hours(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    sink: list[dict] = []
    with FakeAnthropic([status(429, error_type="rate_limit_error", message="You've hit your session limit")] * 3) as api:
        _point(monkeypatch, world, api.base_url)
        llm = _llm(world, sink)
        with pytest.raises(ModelPaused) as err:
            llm.complete(job="extract", tier="strong", system="S", user="u")
        sent = len(api.message_requests)
        assert sent == 1  # neither Claude Code nor memd retried it
        with pytest.raises(ModelPaused):  # the second call starts no Claude Code at all
            llm.complete(job="extract", tier="strong", system="S", user="u")
        assert len(api.message_requests) == sent
    pause = read_pause(world["memd"], datetime.now(UTC))
    assert pause is not None and (world["memd"] / PAUSE_FILE).is_file()
    hours = (pause["until"] - datetime.now(UTC)).total_seconds() / 3600
    assert 0.9 < hours <= 1.0 and err.value.until > time.time() + 3000
    assert llm.available().reason == "paused"
    assert [r["ok"] for r in sink] == [False]


def test_a_hang_is_cut_at_the_deadline(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeAnthropic([delay(120, text("late"))] * 4) as api:
        _point(monkeypatch, world, api.base_url)
        llm = _llm(world, [], timeout_s=4)
        t0 = time.monotonic()
        with pytest.raises(ModelCallFailed, match="timed out after 4 s"):
            llm.complete(job="gate", tier="small", system="S", user="u")
        took = time.monotonic() - t0
        assert _processes_using(api.base_url) == []  # the whole process group is gone
    assert took < 60, took  # the fake would have held it 120 s: the process group was killed


def _processes_using(base_url: str) -> list[int]:
    """Pids whose environment points at this fake (Claude Code and anything it started)."""
    needle = f"ANTHROPIC_BASE_URL={base_url}".encode()
    found = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in env.read_bytes().split(b"\0"):
                found.append(int(env.parent.name))
        except OSError:
            continue
    return found


def _ctx(home: Path, settings: st.Settings, w: dict[str, Path]) -> JobContext:
    h = Home(home)
    conn = state.connect(h.state_db)
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

    def factory(ctx: JobContext) -> LLM:
        return LLM(llm_config(settings, h.memd_dir), usage_sink=lambda rec: record_call(ctx, rec),
                   tokens_used_today=lambda: tokens_today(ctx.conn, ctx.now()))  # fmt: skip

    return JobContext(h, settings, conn, lambda: now, structlog.get_logger("test"), llm_factory=factory)


def test_a_memory_lands_through_an_extraction_run(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The Claude Code home is memd's home too: after the run, the ledger knows one session, the user's."""
    home = world["config"]
    key, sid = "-work-repo", "s1"
    write_session(home / "projects" / key / f"{sid}.jsonl",
                  [("user", "Please always run the linter before committing; broken CI costs us hours."),
                   ("assistant", "Understood.")])  # fmt: skip
    ingest(home)
    settings = make_settings({"provider": "claude-code", "claudePath": str(world["bin"]), "maxRetries": 0})
    ops = ops_reply(op(scope="global", name="run-linter-first", type="feedback", description="run the linter before committing"))
    with FakeAnthropic([text("yes"), ops]) as api:
        _point(monkeypatch, world, api.base_url)
        ctx = _ctx(home, settings, world)
        r = run_job(ctx, extract, Place("session", key, sid))
        assert r.outcome == "ok" and r.details["applied"]["added"] == 1, r
        gate, ex = api.message_requests
        assert "haiku" in gate["model"] and "sonnet" in ex["model"]
        assert "Please always run the linter" in json.dumps(ex["messages"])
    (m,) = scan_dir(home / "memory", "global", None).memories
    assert m.name == "run-linter-first"
    calls = [tuple(c) for c in ctx.conn.execute("SELECT job, ok FROM model_calls ORDER BY id")]
    assert calls == [("gate", 1), ("extract", 1)]
    ingest(home)  # memd scans its home again: Claude Code's calls left nothing it would take for a session
    sessions = [tuple(r) for r in ctx.conn.execute("SELECT key, session_id FROM sessions")]
    assert sessions == [(key, sid)]
    assert [p.name for p in _transcripts(home)] == [f"{sid}.jsonl"]


def test_a_limit_during_an_extraction_defers_it_and_status_shows_the_pause(world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    home = world["config"]
    key, sid = "-work-repo", "s1"
    write_session(home / "projects" / key / f"{sid}.jsonl",
                  [("user", "Please always run the linter before committing."), ("assistant", "Understood.")])  # fmt: skip
    ingest(home)
    settings = make_settings({"provider": "claude-code", "claudePath": str(world["bin"]), "maxRetries": 2})
    (home / "settings.json").write_text(json.dumps({"memd": {"provider": "claude-code", "claudePath": str(world["bin"])}}))
    limit = status(429, error_type="rate_limit_error", message="You've hit your session limit · resets in 3 hours")
    with FakeAnthropic([limit, limit, limit]) as api:
        _point(monkeypatch, world, api.base_url)
        ctx = _ctx(home, settings, world)
        r = run_job(ctx, extract, Place("session", key, sid))
        assert r.outcome == "deferred" and "wait until" in r.reason, r
        assert len(api.message_requests) == 1  # not retried: a retry would spend more of the plan
        again = run_job(ctx, extract, Place("session", key, sid))
        assert again.outcome == "deferred" and len(api.message_requests) == 1
    st_json = json.loads(run_memd(home, "status", "--json", env=dict(os.environ)).stdout)
    until = datetime.fromisoformat(st_json["provider"]["paused_until"])
    assert 2.9 < (until - datetime.now(UTC)).total_seconds() / 3600 <= 3.0
    sessions = json.loads(run_memd(home, "sessions", "--json", env=dict(os.environ)).stdout)
    assert [s.get("session_id") for s in (sessions if isinstance(sessions, list) else sessions["sessions"])] == [sid]
