"""The pause, the whole path, with the real binary (issue 22 point 2): `/pause-memory` typed in a
resumed Claude Code session, a durable statement after it → no memory, while `memd run` is live;
`/resume-memory`, another statement → a memory. Also `/pause-memory` with the statement in the same
prompt: that text is swallowed by the command and never becomes a memory.

memd runs with the offline provider (its rules make the memory from a durable statement), so each
request the fake sees is Claude Code's own. Nothing defines the command here: 2.1.332 records it as
`system/local_command` records (SPEC §3.4a); `memd connect claude` defines it (issue 22, i22a), and
a defined command's `<command-name>` record is read by the same parser (tests/transcripts).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from memd.keys import project_key
from tests.fakeapi import FakeAnthropic, text
from tests.procs import DaemonProc, memd_cmd, memd_env, wait_for
from tests.realclaude import ClaudeInstall, run_claude
from tests.test_keys import make_repo

PAUSED = "We decided to use Postgres 16 for the billing service."
SWALLOWED = "We decided to deploy with Kubernetes on Fridays."
PAUSED_TOO = "We decided to write the changelog by hand."
RESUMED = "We decided to use ruff for linting in this repository."


def _memories(folder: Path) -> str:
    if not folder.is_dir():
        return ""
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.glob("*.md")))


def _line_end(transcript: Path, said: str) -> int:
    """The byte offset just past the user record that says `said`."""
    end = 0
    with open(transcript, "rb") as fh:
        for line in fh:
            end += len(line)
            rec = json.loads(line) if line.strip() else {}
            if rec.get("type") == "user" and said in json.dumps(rec.get("message")):
                return end
    raise AssertionError(f"{said!r} is not in {transcript}")


def _extracted_past(config: Path, transcript: Path, said: str) -> bool:
    """The extraction cursor of the session passed the record that says `said`: it judged it."""
    db = config / "memd" / "state.sqlite"
    if not db.exists():
        return False
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT value FROM cursors WHERE job='extract' AND target LIKE ?",
                            (f"%:{transcript.stem}",)).fetchall()  # fmt: skip
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    return any(json.loads(r[0]).get("offset", 0) >= _line_end(transcript, said) for r in rows)


def _session(config: Path, sid: str) -> dict[str, object]:
    out = subprocess.run([*memd_cmd(), "--home", str(config), "sessions", "--json"], capture_output=True,
                         text=True, env=memd_env(), check=True)  # fmt: skip
    return next(s for s in json.loads(out.stdout) if s["session_id"] == sid)


@pytest.mark.parametrize("defined", [False, True], ids=["undefined", "defined-by-connect"])
def test_a_pause_typed_in_a_resumed_session_holds_until_resume(
    claude: ClaudeInstall, claude_home: Path, tmp_path: Path, ground_truth: list[str], defined: bool
) -> None:
    """`defined`: after `memd connect claude`, which installs /pause-memory and /resume-memory as
    custom commands: Claude Code then records a `<command-name>` user record and an `isMeta` child
    holding the command file's text, instead of the `system/local_command` records."""
    config = claude_home / ".claude"
    (config / "settings.json").write_text(json.dumps({"memd": {"provider": "offline"}}))
    if defined:
        subprocess.run([*memd_cmd(), "--home", str(config), "connect", "claude"], check=True, capture_output=True,
                       env=memd_env())  # fmt: skip
        assert (config / "commands" / "pause-memory.md").is_file()
    repo = make_repo(tmp_path / "repo").resolve()
    folder = config / "projects" / project_key(repo) / "memory"
    with FakeAnthropic(default=text("Noted.")) as api, DaemonProc(config, env=memd_env()) as daemon:
        first = run_claude("hello there", repo, config, api.url, claude=claude)
        assert first.returncode == 0, first.stderr
        sid = first.session_id
        assert sid
        for prompt in ("/pause-memory", PAUSED):
            run = run_claude(prompt, repo, config, api.url, claude=claude, resume=sid)
            assert run.returncode == 0, run.stderr
        transcript = first.transcript()
        assert transcript is not None
        records = [json.loads(x) for x in transcript.read_text().splitlines() if x.strip()]
        if defined:
            assert any(r.get("type") == "user" and "<command-name>/pause-memory</command-name>"
                       in json.dumps(r.get("message")) for r in records)  # fmt: skip
        else:
            assert any(r.get("type") == "system" and r.get("subtype") == "local_command"
                       and r.get("content") == "/pause-memory" for r in records)  # fmt: skip
        wait_for(lambda: _extracted_past(config, transcript, PAUSED))
        assert "Postgres" not in _memories(folder)
        assert _session(config, sid)["paused"] is True  # the ledger says so, from the same parser
        for prompt in ("/resume-memory", RESUMED):
            run = run_claude(prompt, repo, config, api.url, claude=claude, resume=sid)
            assert run.returncode == 0, run.stderr
        wait_for(lambda: "ruff" in _memories(folder))
        assert _session(config, sid)["paused"] is False
        for prompt in (f"/pause-memory {SWALLOWED}", PAUSED_TOO):  # the command swallows the text after it
            run = run_claude(prompt, repo, config, api.url, claude=claude, resume=sid)
            assert run.returncode == 0, run.stderr
        wait_for(lambda: _extracted_past(config, transcript, PAUSED_TOO))
        assert _session(config, sid)["paused"] is True
        got = _memories(folder)
        assert "Postgres" not in got and "Kubernetes" not in got and "changelog" not in got
        assert daemon.stop() == 0
    ground_truth.append(f"pause with Claude Code {claude.version} ({'a custom command of memd connect' if defined else 'undefined'}): "
                        "nothing extracted after /pause-memory typed in a resumed session (nor the text after it in "
                        "one prompt); extracted again after /resume-memory")
