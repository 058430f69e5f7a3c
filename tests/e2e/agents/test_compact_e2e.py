"""The summary after a compaction, with the real binary (issue 22 point 4): memd's SessionStart and
PreCompact hooks in a Claude Code home, no daemon running. `/compact` in a resumed session runs
PreCompact, which brings `summary.md` up to date itself (offline provider, within its bound); the
SessionStart Claude Code runs after the compaction (`source: "compact"`) carries the summary, and
the next request of the compacted session holds it, though the conversation it summarises is gone
(the fake API's compaction summary is "Noted.")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from memd.keys import cwd_key
from tests.fakeapi import FakeAnthropic, text
from tests.realclaude import ClaudeInstall, run_claude

ASKED = "Please plan the Friday deploy of the shop; the migrations go first."


def test_the_compacted_session_gets_its_summary_back(
    claude: ClaudeInstall, claude_home: Path, tmp_path: Path, ground_truth: list[str]
) -> None:
    config = claude_home / ".claude"
    cwd = (tmp_path / "shop").resolve()
    cwd.mkdir()
    memd = f"{sys.executable} -m memd --home {config}"
    hooks = {event: [{"hooks": [{"type": "command", "command": f"{memd} {sub} --hook", "timeout": 120}]}]  # loaded CI: no 10 s cut
             for event, sub in (("SessionStart", "context"), ("PreCompact", "precompact"))}  # fmt: skip
    (config / "settings.json").write_text(json.dumps({"hooks": hooks, "memd": {"provider": "offline"}}))
    with FakeAnthropic(default=text("Noted.")) as api:
        first = run_claude(ASKED, cwd, config, api.url, claude=claude)
        assert first.returncode == 0, first.stderr
        sid = first.session_id
        assert sid
        summary = config / "projects" / cwd_key(cwd) / sid / "session-memory" / "summary.md"
        assert not summary.exists()  # far below minInitTokens: no summary yet
        run = run_claude("/compact", cwd, config, api.url, claude=claude, resume=sid)
        assert run.returncode == 0, run.stderr
        assert "Friday deploy" in summary.read_text()  # PreCompact made it current
        before = len(api.message_requests)
        nxt = run_claude("What is next?", cwd, config, api.url, claude=claude, resume=sid)
        assert nxt.returncode == 0, nxt.stderr
        request = json.dumps(api.message_requests[before])
    assert "# sessionSummary" in request and "Friday deploy" in request
    transcript = first.transcript()
    assert transcript is not None
    records = [json.loads(x) for x in transcript.read_text().splitlines() if x.strip()]
    assert any(r.get("type") == "system" and r.get("subtype") == "compact_boundary" for r in records)
    hooks_run = [r["attachment"].get("hookName") for r in records if isinstance(r.get("attachment"), dict)]
    assert "SessionStart:compact" in hooks_run
    ground_truth.append(f"compaction with Claude Code {claude.version}: PreCompact made summary.md current; "
                        "SessionStart(compact) brought it into the compacted session's next request")
