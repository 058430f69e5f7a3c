"""The claude-code provider's pure parts (what Claude Code printed, when a limit resets) and what
`memd status` says about a logged-in Claude Code; the real binary is tests/llm/test_claudecode_real.py."""

from __future__ import annotations

import fcntl
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memd import state
from memd.clock import local_text
from memd.daemon.status import gather, render
from memd.llm.claudecode import (
    DEFAULT_LIMIT_WAIT_S,
    Limited,
    call,
    cli_model,
    command,
    environment,
    limit_wait,
    read_result,
)
from memd.llm.claudehome import find_claude, login_marker, read_pause, write_pause
from memd.llm.client import LLM
from memd.llm.types import Completion, Failure, LLMConfig, ModelUnavailable
from memd.tree import Home
from tests.procs import memd_env, run_memd

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)

OK = {"type": "result", "subtype": "success", "is_error": False, "result": "yes", "stop_reason": "end_turn",
      "total_cost_usd": 0.0002725, "usage": {"input_tokens": 305, "output_tokens": 1, "cache_read_input_tokens": 7,
      "cache_creation_input_tokens": 1932}, "modelUsage": {"claude-haiku-4-5-20251001": {"costUSD": 0.0002725}}}  # fmt: skip


def test_a_success_reads_answer_usage_and_cost() -> None:
    done = read_result("noise\n" + json.dumps(OK) + "\n", 0, "", "haiku", NOW)
    assert isinstance(done, Completion)
    assert (done.text, done.model, done.input_tokens, done.output_tokens) == ("yes", "claude-haiku-4-5-20251001", 305, 1)
    assert (done.cache_read_tokens, done.cache_write_tokens, done.cost_usd) == (7, 1932, 0.0002725)


def test_errors_limits_and_garbage() -> None:
    err = {**OK, "is_error": True, "result": "API Error: 500 boom", "api_error_status": 500}
    f = read_result(json.dumps(err), 1, "", "haiku", NOW)
    assert isinstance(f, Failure) and f.retryable and f.status == 500
    login = {**OK, "is_error": True, "result": "Invalid API key · Please run /login", "api_error_status": 401}
    f = read_result(json.dumps(login), 1, "", "haiku", NOW)
    assert isinstance(f, Failure) and not f.retryable and "log in" in f.message
    limited = {**OK, "is_error": True, "result": "API Error: Request rejected (429) · rate limited", "api_error_status": 429}
    lim = read_result(json.dumps(limited), 1, "", "haiku", NOW)
    assert isinstance(lim, Limited) and lim.wait_s == DEFAULT_LIMIT_WAIT_S
    sub = {**OK, "is_error": True, "result": "You've hit your session limit · resets 3pm (UTC)", "api_error_status": None}
    lim = read_result(json.dumps(sub), 1, "", "haiku", NOW)
    assert isinstance(lim, Limited) and lim.wait_s == 5 * 3600
    f = read_result("not json at all", 2, "Segmentation fault", "haiku", NOW)
    assert isinstance(f, Failure) and "Segmentation fault" in f.message and f.retryable
    f = read_result(json.dumps({**OK, "result": None}), 0, "", "haiku", NOW)
    assert isinstance(f, Failure)  # an answer without text is not an answer


def test_limit_wait_reads_the_forms_claude_code_prints() -> None:
    assert limit_wait(f"Claude AI usage limit reached|{int((NOW + timedelta(hours=3)).timestamp())}", NOW) == 3 * 3600
    assert limit_wait("5-hour limit reached · resets in 2 hours", NOW) == 2 * 3600
    assert limit_wait("You've hit your limit · resets 11:30am (Europe/London)", NOW) == 1.5 * 3600  # UTC+0 in December
    assert limit_wait("resets 9am", NOW) == 23 * 3600  # passed today: tomorrow
    assert limit_wait("rate limited", NOW) == DEFAULT_LIMIT_WAIT_S
    assert limit_wait("resets 3pm (Not/AZone)", NOW) == 5 * 3600  # unknown zone: now's
    assert limit_wait("|1000000000", NOW) == 60  # a time past: at least a minute


def test_the_command_and_model_aliases() -> None:
    argv = command("/bin/claude", "haiku", "/tmp/s.txt")
    for flag in ("-p", "--tools", "--setting-sources", "--strict-mcp-config", "--no-session-persistence",
                 "--disable-slash-commands", "--system-prompt-file"):  # fmt: skip
        assert flag in argv
    assert argv[argv.index("--tools") + 1] == "" and argv[argv.index("--setting-sources") + 1] == ""
    assert cli_model("small", "claude-haiku-4-5", "claude-haiku-4-5") == "haiku"
    assert cli_model("strong", "claude-sonnet-4-6", "claude-sonnet-4-6") == "sonnet"
    assert cli_model("strong", "opus", "claude-sonnet-4-6") == "opus"
    llm = LLM(LLMConfig(provider="claude-code", claude_path="/nonexistent/claude"))
    assert llm.model_for("small") == "haiku"


def test_no_binary_makes_model_jobs_wait(tmp_path: Path) -> None:
    llm = LLM(LLMConfig(provider="claude-code", claude_path=str(tmp_path / "claude")))
    assert llm.available().reason == "no-claude"
    with pytest.raises(ModelUnavailable, match="not found"):
        llm.complete(job="gate", tier="small", system="s", user="u")


def test_the_pause_file(tmp_path: Path) -> None:
    write_pause(tmp_path, NOW + timedelta(hours=2), "claude-code: limit")
    p = read_pause(tmp_path, NOW)
    assert p is not None and p["until"] == NOW + timedelta(hours=2) and p["reason"] == "claude-code: limit"
    assert read_pause(tmp_path, NOW + timedelta(hours=3)) is None
    (tmp_path / "claude-code-pause.json").write_text("{broken")
    assert read_pause(tmp_path, NOW) is None


def _fake_claude(bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "claude"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return exe


def test_status_offers_a_logged_in_claude_code_with_its_rate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home_dir = tmp_path / "user"
    exe = _fake_claude(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")
    monkeypatch.setenv("HOME", str(home_dir))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert find_claude("") == str(exe) and login_marker({"HOME": str(home_dir)}) is None
    (home_dir).mkdir()
    (home_dir / ".claude.json").write_text(json.dumps({"oauthAccount": {"emailAddress": "a@b.c"}}))
    assert login_marker({"HOME": str(home_dir)}) == f"{home_dir / '.claude.json'} (oauthAccount)"
    home = tmp_path / "h"
    home.mkdir()
    conn = state.connect(Home(home).state_db)
    for day in range(7):  # 2 extractions and a summary a day: 5 model calls
        ts = (NOW - timedelta(days=day, hours=1)).isoformat().replace("+00:00", "Z")
        for job in ("extract", "extract", "summary"):
            conn.execute("INSERT INTO runs(run_id, job, target, started_at, outcome) VALUES (?,?,?,?, 'ok')",
                         (f"r{day}{job}", job, "session:k:s", ts))  # fmt: skip
    conn.commit()
    conn.close()
    data = gather(Home(home), NOW)
    cc = data["provider"]["claude_code"]
    assert data["provider"]["effective"] == "offline" and cc["calls_per_day"] == 5.0
    line = next(x for x in render(data).splitlines() if x.startswith("Claude Code is logged in"))
    assert "about 5 calls a day" in line and "`memd provider claude-code` switches" in line
    (home / "settings.json").write_text(json.dumps({"memd": {"provider": "claude-code"}}))
    write_pause(Home(home).memd_dir, NOW + timedelta(hours=4), "claude-code: limit")
    data = gather(Home(home), NOW)
    assert data["provider"]["claude_code"] is None and data["provider"]["effective"] == "claude-code"
    assert "model calls paused until " + local_text("2026-12-02T14:00:00Z") in render(data)


def test_doctor_says_the_same(tmp_path: Path) -> None:
    exe = _fake_claude(tmp_path / "bin")
    user = tmp_path / "user"
    (user / ".claude").mkdir(parents=True)
    (user / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": {"accessToken": "x"}}')
    env = memd_env(PATH=f"{exe.parent}:/usr/bin:/bin", HOME=str(user))
    env.pop("CLAUDE_CONFIG_DIR", None)
    home = tmp_path / "h"
    home.mkdir()
    r = run_memd(home, "doctor", "--json", env=env)
    (check,) = [c for c in json.loads(r.stdout) if c["name"] == "provider"]
    assert check["ok"] and "Claude Code is logged in here" in check["detail"] and ".credentials.json" in check["detail"]
    (home / "settings.json").write_text(json.dumps({"memd": {"provider": "claude-code", "claudePath": str(exe)}}))
    (check,) = [c for c in json.loads(run_memd(home, "doctor", "--json", env=env).stdout) if c["name"] == "provider"]
    assert check["ok"] and check["detail"].startswith(f"claude-code at {exe}, login: ")
    (home / "settings.json").write_text(json.dumps({"memd": {"provider": "claude-code", "claudePath": str(tmp_path / "nope")}}))
    (check,) = [c for c in json.loads(run_memd(home, "doctor", "--json", env=env).stdout) if c["name"] == "provider"]
    assert not check["ok"] and "not found" in check["detail"]


def test_the_environment_keeps_the_login_and_drops_the_parent_session() -> None:
    env = environment({"HOME": "/home/u", "PATH": "/bin", "CLAUDECODE": "1", "CLAUDE_PROJECT_DIR": "/p",
                       "HTTPS_PROXY": "http://proxy"}, 64)  # fmt: skip
    assert env["HOME"] == "/home/u" and env["HTTPS_PROXY"] == "http://proxy"
    assert "CLAUDECODE" not in env and "CLAUDE_PROJECT_DIR" not in env
    assert env["CLAUDE_CODE_DISABLE_AUTO_MEMORY"] == "1" and env["CLAUDE_CODE_DISABLE_THINKING"] == "1"
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "0" and env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "64"


def test_one_call_at_a_time_across_processes(tmp_path: Path) -> None:
    """A slot held elsewhere (another memd process's `flock`, simulated by a second open file
    description) makes a call wait, and give up at its deadline without starting Claude Code."""
    marker = tmp_path / "started"
    exe = tmp_path / "claude"
    exe.write_text(f"#!/bin/sh\ntouch {marker}\necho '{json.dumps(OK)}'\n")
    exe.chmod(0o755)
    request = {"model": "haiku", "max_tokens": 5, "messages": [{"role": "user", "content": "u"}]}
    fd = os.open(tmp_path / "claude-code.slot0.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        got = call(str(exe), request, 0.5, now=NOW, lock_dir=tmp_path, slots=1)
        assert isinstance(got, Failure) and "waiting for another claude-code call" in got.message
        assert not marker.exists()
        two = call(str(exe), request, 30, now=NOW, lock_dir=tmp_path, slots=2)  # a second slot is free
        assert isinstance(two, Completion) and marker.exists()
    finally:
        os.close(fd)
    assert isinstance(call(str(exe), request, 30, now=NOW, lock_dir=tmp_path, slots=1), Completion)


def test_memd_provider_switches_a_strict_file_and_leaves_a_commented_one_alone(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    settings = home / "settings.json"
    settings.write_text(json.dumps({"permissions": {"allow": ["Bash(ls)"]}, "memd": {"logLevel": "debug"}}))
    settings.chmod(0o644)
    r = run_memd(home, "provider", "claude-code", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["previous"], out["configured"]) == ("auto", "claude-code")
    data = json.loads(settings.read_text())
    assert data == {"permissions": {"allow": ["Bash(ls)"]}, "memd": {"logLevel": "debug", "provider": "claude-code"}}
    assert settings.stat().st_mode & 0o777 == 0o644
    assert json.loads((home / "memd" / "settings.previous.json").read_text())["memd"] == {"logLevel": "debug"}
    assert "provider: claude-code" in run_memd(home, "provider").stdout
    commented = '{\n  // mine\n  "memory": {"enabled": true,},\n}\n'
    settings.write_text(commented)
    r = run_memd(home, "provider", "claude-code")
    assert r.returncode == 5 and "not strict JSON" in r.stderr + r.stdout and settings.read_text() == commented
    assert run_memd(home, "provider", "bogus").returncode == 2
    # Claude Code's own file keeps every byte memd does not own: line ends, number spellings, key order
    crlf = '{\r\n  "model": "opus",\r\n  "cleanupPeriodDays": 1E5,\r\n  "memd": {"provider": "auto"}\r\n}\r\n'
    settings.write_text(crlf, newline="")
    assert run_memd(home, "provider", "offline").returncode == 0
    assert settings.read_bytes() == crlf.replace('"auto"', '"offline"').encode()
