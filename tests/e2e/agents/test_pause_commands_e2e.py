"""The pause commands `memd connect claude` installs, typed into a real Claude Code (issue 22 point 2).

Without them Claude Code 2.1.332 answers "/pause-memory isn't available in this environment". With
them the command is Claude Code's own custom command: the model is told the pause and acknowledges
it, and the transcript records it in a form memd's ledger reads (engineer i22b honours it).

What 2.1.332 records for `claude -p "/pause-memory"` (observed here, kept as fixtures below):
a user record whose `message.content` is the string
`<command-message>pause-memory</command-message>\\n<command-name>/pause-memory</command-name>`
(followed by `\\n<command-args>TEXT</command-args>` when text follows the command in the prompt), then a
child user record (`parentUuid` = the first's `uuid`) with `isMeta: true` whose content is one text
block holding the command file's body (and `\\n\\n\\nARGUMENTS: TEXT`).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from memd.agent.connect import COMMANDS
from tests.conftest import memd_cmd
from tests.fakeapi import FakeAnthropic, text
from tests.procs import memd_env
from tests.realclaude import ClaudeInstall, run_claude
from tests.test_keys import make_repo

# One transcript line of each record, as 2.1.332 writes them (ids and times shortened), for the ledger's tests.
FIXTURE_PAUSE = (
    '{"parentUuid":null,"isSidechain":false,"type":"user","message":{"role":"user","content":'
    '"<command-message>pause-memory</command-message>\\n<command-name>/pause-memory</command-name>"},'
    '"uuid":"ffdfabc9-b664-4210-b5dd-d6b8d639cccc","timestamp":"2026-12-02T01:12:00.000Z"}'
)
FIXTURE_PAUSE_META = (
    '{"parentUuid":"ffdfabc9-b664-4210-b5dd-d6b8d639cccc","isSidechain":false,"type":"user","message":{"role":'
    '"user","content":[{"type":"text","text":"memd: the user paused long-term memory for this session with '
    '/pause-memory. …\\n"}]},"isMeta":true,"uuid":"739e0d8b-12dc-4564-947c-174a28c6b8d7",'
    '"timestamp":"2026-12-02T01:12:00.001Z"}'
)
FIXTURE_PAUSE_WITH_TEXT = (
    '{"parentUuid":null,"isSidechain":false,"type":"user","message":{"role":"user","content":'
    '"<command-message>pause-memory</command-message>\\n<command-name>/pause-memory</command-name>\\n'
    '<command-args>and remember I like tea</command-args>"},"uuid":"c1f111e6-c03a-4f79-a58e-0f2e820e7257",'
    '"timestamp":"2026-12-02T01:12:05.000Z"}'
)


def _records(transcript: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in transcript.read_text().splitlines() if line.strip()]


def _content(rec: dict[str, Any]) -> str:
    content = (rec.get("message") or {}).get("content")
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content or "")


def test_pause_commands_are_claude_code_commands_and_what_they_record(
    claude: ClaudeInstall, claude_home: Path, tmp_path: Path, ground_truth: list[str]
) -> None:
    config = claude_home / ".claude"
    (config / "settings.json").write_text(json.dumps({"memd": {"provider": "offline"}}))
    r = subprocess.run([*memd_cmd(), "--home", str(config), "connect", "claude"], capture_output=True, text=True,
                       env=memd_env(), timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    repo = make_repo(tmp_path / "repo").resolve()
    with FakeAnthropic(default=text("Memory paused for this session.")) as api:
        for prompt, name, args in (("/pause-memory", "pause-memory", None),
                                   ("/toggle-memory and remember I like tea", "toggle-memory", "and remember I like tea"),
                                   ("/memory-pause", "memory-pause", None), ("/resume-memory", "resume-memory", None)):  # fmt: skip
            before = len(api.message_requests)
            run = run_claude(prompt, repo, config, api.url, claude=claude)
            assert run.returncode == 0, run.stderr
            assert "isn't available" not in run.stdout and "Unknown command" not in run.stdout
            transcript = run.transcript()
            assert transcript is not None
            records = _records(transcript)
            users = [x for x in records if x.get("type") == "user"]
            head = next(x for x in users if f"<command-name>/{name}</command-name>" in _content(x))
            expected = f"<command-message>{name}</command-message>\n<command-name>/{name}</command-name>"
            if args:
                expected += f"\n<command-args>{args}</command-args>"
            assert head["message"]["content"] == expected and not head.get("isMeta")
            meta = next(x for x in users if x.get("parentUuid") == head["uuid"])
            assert meta.get("isMeta") is True and COMMANDS[name][1].format(name=name)[:60] in _content(meta)
            if args:
                assert _content(meta).endswith(f"ARGUMENTS: {args}")
            said = json.dumps(api.message_requests[before]["messages"])
            assert "memd: the user" in said  # the model is told, and acknowledges instead of "not available"
    assert json.loads(FIXTURE_PAUSE)["message"]["content"].endswith("<command-name>/pause-memory</command-name>")
    assert json.loads(FIXTURE_PAUSE_META)["isMeta"] is True and json.loads(FIXTURE_PAUSE_WITH_TEXT)
    ground_truth.append(f"custom command /pause-memory in {claude.version}: a user record "
                        "'<command-message>…</command-message>\\n<command-name>/pause-memory</command-name>"
                        "[\\n<command-args>…</command-args>]' and an isMeta child with the command's text")
