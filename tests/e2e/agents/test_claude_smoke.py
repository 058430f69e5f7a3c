"""Claude Code in print mode against the fake API: answer, transcript, resume, tools.

Ground truth for memd's watcher: where a real Claude Code writes a session
(`<config>/projects/<key>/<session-id>.jsonl`), what its lines look like, and
that a test can drive it through tool calls, built-in and MCP.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.fakeapi import FakeAnthropic, request_tool_results, request_user_text, text, tool_use
from tests.realclaude import ClaudeInstall, claude_key, run_claude

HERE = Path(__file__).resolve().parent


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _says(entry: dict[str, Any]) -> str:
    content = (entry.get("message") or {}).get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    return proj.resolve()


def test_print_mode_answers_and_writes_transcript(
    claude: ClaudeInstall, fake_api: FakeAnthropic, claude_home: Path, tmp_path: Path, ground_truth: list[str]
) -> None:
    proj = _project(tmp_path)
    fake_api.text("PONG-7f3a from the fake")
    config = claude_home / ".claude"
    run = run_claude("say ping 91c2", proj, config, fake_api.url, claude=claude)
    assert run.returncode == 0, run.stderr
    assert "PONG-7f3a from the fake" in run.stdout

    # the fake got a streamed request carrying the prompt
    asked = fake_api.message_requests
    assert asked, [(r.method, r.path) for r in fake_api.requests]
    assert asked[0].get("stream") is True
    assert "say ping 91c2" in request_user_text(asked[0])
    assert asked[0].has_credential

    # the transcript: <config>/projects/<key of cwd>/<session-id>.jsonl
    expected = config / "projects" / claude_key(str(proj)) / f"{run.session_id}.jsonl"
    assert run.transcript() == expected, sorted(p.relative_to(config) for p in config.rglob("*"))
    entries = _lines(expected)
    users = [e for e in entries if e.get("type") == "user"]
    helpers = [e for e in entries if e.get("type") == "assistant"]
    assert any("say ping 91c2" in _says(e) for e in users)
    assert any("PONG-7f3a" in _says(e) for e in helpers)
    assert {e.get("sessionId") for e in users + helpers} == {run.session_id}
    assert all(e.get("cwd") == str(proj) for e in users)
    # nothing written to the real home: HOME was the temp home
    assert not (claude_home / "projects").exists()
    ground_truth.append(
        f"smoke: {run.elapsed:.2f}s, transcript projects/{expected.parent.name}/<sid>.jsonl, "
        f"{len(entries)} lines of types {sorted({str(e.get('type')) for e in entries})}, "
        f"version field {users[0].get('version')!r}; requests {[(r.method, r.path) for r in fake_api.requests]}"
    )


def test_resume_continues_the_same_transcript(
    claude: ClaudeInstall, fake_api: FakeAnthropic, claude_home: Path, tmp_path: Path, ground_truth: list[str]
) -> None:
    proj = _project(tmp_path)
    config = claude_home / ".claude"
    fake_api.text("first answer a1")
    first = run_claude("first prompt q1", proj, config, fake_api.url, claude=claude)
    assert first.returncode == 0, first.stderr
    fake_api.text("second answer a2")
    second = run_claude("second prompt q2", proj, config, fake_api.url, resume=first.session_id, claude=claude)
    assert second.returncode == 0, second.stderr
    assert "second answer a2" in second.stdout

    last = fake_api.message_requests[-1]
    history = json.dumps(last.get("messages"))
    assert "first prompt q1" in history and "first answer a1" in history and "second prompt q2" in history

    transcript = first.transcript()
    assert transcript is not None and second.transcript() == transcript
    said = " ".join(_says(e) for e in _lines(transcript))
    assert "q1" in said and "a1" in said and "q2" in said and "a2" in said
    ground_truth.append(f"resume: {first.elapsed:.2f}s + {second.elapsed:.2f}s, one transcript {transcript.name}")


def test_tool_use_runs_a_builtin_tool(
    claude: ClaudeInstall, fake_api: FakeAnthropic, claude_home: Path, tmp_path: Path
) -> None:
    proj = _project(tmp_path)
    target = proj / "out.txt"
    fake_api.enqueue(
        tool_use("Write", {"file_path": str(target), "content": "written by the tool\n"}, preamble="writing"),
        text("done writing"),
    )
    # --dangerously-skip-permissions is refused as root; allowing the one tool works everywhere
    run = run_claude("write the file", proj, claude_home / ".claude", fake_api.url, args=["--allowedTools", "Write"],
                     claude=claude)
    assert run.returncode == 0, run.stderr
    assert "done writing" in run.stdout
    assert target.read_text(encoding="utf-8") == "written by the tool\n"
    results = request_tool_results(fake_api.message_requests[-1])
    assert [r["tool_use_id"] for r in results] == ["toolu_fake_Write"]


def test_tool_use_calls_an_mcp_tool(
    claude: ClaudeInstall, fake_api: FakeAnthropic, claude_home: Path, tmp_path: Path, ground_truth: list[str]
) -> None:
    proj = _project(tmp_path)
    log = tmp_path / "mcp.log"
    config = {"mcpServers": {"memdtest": {"type": "stdio", "command": sys.executable,
                                          "args": [str(HERE / "mcp_echo.py")], "env": {"MCP_ECHO_LOG": str(log)}}}}
    fake_api.enqueue(tool_use("mcp__memdtest__echo", {"text": "hello mcp"}), text("mcp done"))
    run = run_claude(
        "call echo", proj, claude_home / ".claude", fake_api.url, claude=claude,
        args=["--mcp-config", json.dumps(config), "--strict-mcp-config", "--allowedTools", "mcp__memdtest__echo"],
    )
    assert run.returncode == 0, run.stderr
    assert "mcp done" in run.stdout
    first = fake_api.message_requests[0]
    # 2.1.197 lists the tool in `tools`; 2.1.332 defers it (named in a reminder, loaded via ToolSearch)
    offered = [t.get("name") for t in first.get("tools") or []]
    assert "mcp__memdtest__echo" in offered or "mcp__memdtest__echo" in json.dumps(first.get("messages")), offered
    results = request_tool_results(fake_api.message_requests[-1])
    assert json.dumps(results[0]["content"]).find("echo: hello mcp") >= 0, results
    calls = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    methods = [c.get("method") for c in calls if c.get("method") != "server/discover"]  # 2.1.332 probes first
    assert methods[:3] == ["initialize", "notifications/initialized", "tools/list"]
    assert any(c.get("method") == "tools/call" and c["params"]["arguments"] == {"text": "hello mcp"} for c in calls)
    init = next(c for c in calls if c.get("method") == "initialize")
    ground_truth.append(f"mcp: {run.elapsed:.2f}s, methods {[c.get('method') for c in calls]}, protocol "
                        f"{init['params'].get('protocolVersion')}, tool in `tools`: {'mcp__memdtest__echo' in offered}")
