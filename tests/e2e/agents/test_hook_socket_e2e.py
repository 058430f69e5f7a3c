"""A real Claude Code whose hooks `memd run` answers over the hook socket (issue 27 point 3).

Claude Code runs the hooks `memd connect claude` wrote, in its own environment; the daemon runs with the
same `HOME` (the environment a SessionStart or an offline recall depends on), so it answers them, and the model
gets what it gets when each hook answers itself (tests/e2e/agents/test_connect_e2e.py): the drawer at start,
the relevant memory at the prompt. The daemon's log says it answered each (`hooks.answered`, at debug).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.agents.test_connect_e2e import _memd, _said, _session_start_context, _world
from tests.fakeapi import FakeAnthropic, text
from tests.procs import DaemonProc, log_records, memd_env, wait_for, wait_log
from tests.realclaude import ClaudeInstall, run_claude


def _answered(config: Path, sub: str) -> int:
    return sum(r.get("event") == "hooks.answered" and r.get("sub") == sub for r in log_records(config))


def test_the_daemon_answers_a_real_claudes_hooks(
    claude: ClaudeInstall, claude_home: Path, tmp_path: Path, ground_truth: list[str]
) -> None:
    proj, config, _home, _key = _world(tmp_path, claude_home, {"memd": {"provider": "offline", "logLevel": "debug"}})
    _memd(config, "connect", "claude")
    # the daemon in the hooks' environment as far as their answers go: Claude Code's HOME, and no TZ (run_claude's has none)
    env = {k: v for k, v in memd_env(HOME=str(claude_home)).items() if k != "TZ"}
    with DaemonProc(config, env=env) as daemon, FakeAnthropic(default=text("OK")) as api:
        wait_log(config, event="hooks.serving")
        first = run_claude("hello there", proj, config, api.url, claude=claude)
        assert first.returncode == 0, first.stderr
        assert "DRAWER-7Q" in _session_start_context(api.message_requests[0])
        wait_for(lambda: _answered(config, "context") == 1)  # logged just after the answer is sent
        n = len(api.message_requests)
        second = run_claude("How do we deploy the shop?", proj, config, api.url, claude=claude, resume=first.session_id)
        assert second.returncode == 0, second.stderr
        said = _said(api.message_requests[n])
        assert "TOPIC-4K" in said and "3 days old" in said and said.count("TOPIC-4K") == 1
        wait_for(lambda: _answered(config, "recall") == 2)  # "hello there" recalled nothing; this prompt its memory
        days = json.loads(_memd(config, "status", "--json").stdout)["hooks"]["days"]
        totals = {c: sum(d[c] for d in days) for c in ("context", "prompts", "recalls", "memories")}
        assert totals == {"context": 2, "prompts": 2, "recalls": 1, "memories": 1}  # each hook recorded once
        assert daemon.stop() == 0
    ground_truth.append(f"hook socket with Claude Code {claude.version}: `memd run` answered SessionStart and both "
                        "prompts' recall; the drawer and the memory reached the model as from the hook processes")
