"""A real Claude Code after `memd connect claude`: memory reaches the model (issue 12).

The home memd works on is the Claude Code config directory of the run
(`CLAUDE_CONFIG_DIR`, memd `--home`); `memd connect claude` writes the hooks into
its settings.json and registers `memd mcp` in its `.claude.json`. Then, against
the loopback Messages API fake:

- the first request carries the drawer's text and today's date (SessionStart hook);
- a prompt about a stored topic carries that memory with its age (UserPromptSubmit);
  the next prompt in the session does not repeat it;
- the request names memd's MCP tools (deferred in 2.1.332: listed for ToolSearch),
  and a `remember` call through them lands in the project's MEMORY.md;
- `memd disconnect claude` takes all of it away again.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from memd.index.refresh import refresh_all
from memd.keys import project_key
from memd.memory.file import render_memory, write_memory
from memd.tree import Home
from tests.conftest import memd_cmd
from tests.fakeapi import FakeAnthropic, json_text, request_system_text, request_tool_results, text, tool_use
from tests.procs import memd_env
from tests.realclaude import ClaudeInstall, run_claude

DAY = 86_400
TOOLS = ("search_memory", "read_memory", "list_memories", "recall", "remember", "forget")


def _memd(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*memd_cmd(), "--home", str(config), *args], capture_output=True, text=True, env=memd_env(),
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r


def _world(tmp_path: Path, claude_home: Path, settings: dict[str, Any]) -> tuple[Path, Path, Home, str]:
    proj = tmp_path.resolve() / "shop"
    proj.mkdir()
    subprocess.run(["git", "init", "-q", str(proj)], check=True, env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null"})
    config = (claude_home / ".claude").resolve()
    home = Home(config)
    key = project_key(proj)
    write_memory(home.global_memory, "prefers-tabs",
                 render_memory("prefers-tabs", "the user indents with tabs", "user", "Indent with tabs (DRAWER-7Q)."))  # fmt: skip
    p = write_memory(home.project_memory(key), "deploy-fridays",
                     render_memory("deploy-fridays", "deploys happen only on Fridays", "project",
                                   "Run make deploy on Fridays only (TOPIC-4K)."))  # fmt: skip
    os.utime(p, (time.time() - 3 * DAY, time.time() - 3 * DAY))
    (config / "settings.json").write_text(json.dumps(settings, indent=2) + "\n")
    refresh_all(home)
    return proj, config, home, key


def _said(req: dict[str, Any]) -> str:
    """Everything a request carries besides tool schemas: system and messages."""
    return json.dumps({"system": req.get("system"), "messages": req.get("messages")}, ensure_ascii=False)


def _session_start_context(req: dict[str, Any]) -> str:
    """The text Claude Code put in the request for memd's SessionStart hook."""
    said = _said(req)
    at = said.find("SessionStart hook additional context")
    assert at >= 0, said[:3000]
    return said[at : at + 6000]


def test_connect_claude_brings_memory_to_the_model(
    claude: ClaudeInstall, claude_home: Path, tmp_path: Path, ground_truth: list[str]
) -> None:
    proj, config, home, key = _world(tmp_path, claude_home, {"memd": {"provider": "offline"}})
    connected = _memd(config, "connect", "claude")
    assert (config / ".claude.json").exists(), connected.stdout

    with FakeAnthropic(default=text("OK from fake")) as api:
        api.enqueue(text("first answer"))
        first = run_claude("hello there", proj, config, api.url, claude=claude)
        assert first.returncode == 0, first.stderr
        req0 = api.message_requests[0]
        start = _session_start_context(req0)
        assert "DRAWER-7Q" in start and f"Today's date is {time.strftime('%Y-%m-%d')}" in start
        assert "point-in-time observations" in start
        offered = [t.get("name") for t in req0.get("tools") or []]
        for tool in TOOLS:
            assert f"mcp__memd__{tool}" in offered or f"mcp__memd__{tool}" in _said(req0), tool
        assert "TOPIC-4K" not in _said(req0)  # recall: nothing relevant in "hello there"

        n = len(api.message_requests)
        api.enqueue(text("second answer"))
        second = run_claude("How do we deploy the shop?", proj, config, api.url, claude=claude, resume=first.session_id)
        assert second.returncode == 0, second.stderr
        req = api.message_requests[n]
        said = _said(req)
        assert "TOPIC-4K" in said and "3 days old" in said and "This memory is 3 days old." in said
        assert said.count("TOPIC-4K") == 1

        n = len(api.message_requests)
        api.enqueue(text("third answer"))
        third = run_claude("and deploy again tomorrow?", proj, config, api.url, claude=claude, resume=first.session_id)
        assert third.returncode == 0, third.stderr
        said = _said(api.message_requests[n])
        assert said.count("TOPIC-4K") == 1  # in the history from the turn before, not recalled again

        n = len(api.message_requests)
        api.enqueue(tool_use("mcp__memd__remember", {"name": "release-train", "type": "project",
                                                     "description": "releases leave on the Tuesday train",
                                                     "body": "Releases ship on the Tuesday train (TRAIN-3M)."}),
                    text("remembered it"))  # fmt: skip
        fourth = run_claude("remember: releases go on the Tuesday train", proj, config, api.url, claude=claude,
                            args=["--allowedTools", "mcp__memd__remember"])  # fmt: skip
        assert fourth.returncode == 0, fourth.stderr
        results = request_tool_results(api.message_requests[-1])
        assert results and '"added":1' in json.dumps(results[0]["content"]).replace("\\", "").replace(" ", ""), results
    index = (home.project_memory(key) / "MEMORY.md").read_text()
    assert "[release-train](release-train.md) — releases leave on the Tuesday train" in index
    sessions = {r["session_id"]: r["hooks"] for r in json.loads(_memd(config, "sessions", "--json").stdout)}
    assert sessions[first.session_id]["recalls"] == 1 and sessions[first.session_id]["memories"] == 1
    ground_truth.append(f"connect e2e: 4 runs {first.elapsed:.1f}/{second.elapsed:.1f}/{third.elapsed:.1f}/"
                        f"{fourth.elapsed:.1f}s; hooks of session {sessions[first.session_id]}")  # fmt: skip

    _memd(config, "disconnect", "claude")
    with FakeAnthropic(default=text("OK from fake")) as api:
        after = run_claude("How do we deploy the shop?", proj, config, api.url, claude=claude)
        assert after.returncode == 0, after.stderr
        said = json.dumps(dict(api.message_requests[0]), ensure_ascii=False)
        assert "DRAWER-7Q" not in said and "TOPIC-4K" not in said and "mcp__memd__" not in said


def test_recall_hook_uses_the_model_claude_code_points_it_at(
    claude: ClaudeInstall, claude_home: Path, tmp_path: Path
) -> None:
    """With a key in Claude Code's environment (inherited by hooks), recall asks the small model:
    the fake answers memd's selector call, and its pick reaches Claude Code's request. The hook's
    budget is raised (a busy test machine can spend the default 1.5 s importing the SDK: then the
    keyword ranking answers, tests/agent/test_recall_budget.py)."""
    proj, config, _home, _key = _world(tmp_path, claude_home, {"memd": {"recallBudgetMs": 20000}})
    _memd(config, "connect", "claude")

    def responder(body: dict[str, Any]) -> Any:
        if "You select long-term memories" in request_system_text(body):
            return json_text({"selected": [1]})
        return text("answer")

    with FakeAnthropic(responder=responder) as api:
        run = run_claude("How do we deploy the shop?", proj, config, api.url, claude=claude)
        assert run.returncode == 0, run.stderr
        selector = [r for r in api.message_requests if "You select long-term memories" in request_system_text(r)]
        assert len(selector) == 1 and "deploy-fridays" in json.dumps(selector[0]["messages"])
        main = [r for r in api.message_requests if r not in selector]
        assert any("TOPIC-4K" in _said(r) for r in main)
