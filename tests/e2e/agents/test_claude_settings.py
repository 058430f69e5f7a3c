"""Where Claude Code reads settings that switch or move its auto-memory.

Each case plants `projects/<claude_memory_key(cwd)>/memory/MEMORY.md` (marker
DEFAULT) and an alternative directory's MEMORY.md (marker ALT), writes the
settings files of the case, runs `claude -p` once, and checks which marker (if
any) reached the model. Observed with 2.1.197:

- user settings are `<CLAUDE_CONFIG_DIR>/settings.json`, project ones
  `<cwd>/.claude/settings.json`, local ones `<cwd>/.claude/settings.local.json`;
  local beats project beats user;
- settings files are strict JSON (a BOM is fine): a `//` comment or a trailing
  comma, or a value of the wrong type anywhere (even of another key), makes
  Claude Code ignore the whole file, silently in print mode;
- `autoMemoryEnabled: false` (or CLAUDE_CODE_DISABLE_AUTO_MEMORY=1) turns the
  memory off: no MEMORY.md is read and the system prompt has no memory section;
- `autoMemoryDirectory` (absolute, or `~/`-relative to HOME) moves it, from any
  of the three files; a relative path is ignored.

And slash commands such as /pause-memory are not available in print mode:
the transcript records them as `system`/`local_command` entries, no request.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fakeapi import FakeAnthropic, text
from tests.realclaude import ClaudeInstall, claude_memory_key, run_claude

DISABLED = '{"autoMemoryEnabled": false}'

# case: (user settings, project settings, local settings, extra env, which MEMORY.md reaches the model)
CASES: dict[str, tuple[str | None, str | None, str | None, dict[str, str], str]] = {
    "none": (None, None, None, {}, "default"),
    "user-off": (DISABLED, None, None, {}, "none"),
    "project-off": (None, DISABLED, None, {}, "none"),
    "local-off": (None, None, DISABLED, {}, "none"),
    "env-off": (None, None, None, {"CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1"}, "none"),
    "user-on-project-off": ('{"autoMemoryEnabled": true}', DISABLED, None, {}, "none"),
    "user-off-local-on": (DISABLED, None, '{"autoMemoryEnabled": true}', {}, "default"),
    "user-off-with-bom": ("\ufeff" + DISABLED, None, None, {}, "none"),
    "user-off-line-comment-ignored": ('{\n  // off\n  "autoMemoryEnabled": false\n}', None, None, {}, "default"),
    "user-off-block-comment-ignored": ('/* off */ {"autoMemoryEnabled": false}', None, None, {}, "default"),
    "user-off-trailing-comma-ignored": ('{"autoMemoryEnabled": false,}', None, None, {}, "default"),
    "user-off-bad-other-key-ignored": ('{"model": 5, "autoMemoryEnabled": false}', None, None, {}, "default"),
    "user-off-unknown-key": ('{"memdSomething": {"x": 1}, "autoMemoryEnabled": false}', None, None, {}, "none"),
    "user-dir": ('{"autoMemoryDirectory": "@ALT@"}', None, None, {}, "alt"),
    "project-dir": (None, '{"autoMemoryDirectory": "@ALT@"}', None, {}, "alt"),
    "local-dir": (None, None, '{"autoMemoryDirectory": "@ALT@"}', {}, "alt"),
    "user-dir-relative-ignored": ('{"autoMemoryDirectory": "rel/mem"}', None, None, {}, "default"),
    "user-dir-tilde": ('{"autoMemoryDirectory": "~/alt-mem"}', None, None, {}, "home"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_settings_switch_and_move_auto_memory(
    case: str, claude: ClaudeInstall, tmp_path: Path, ground_truth: list[str]
) -> None:
    user, project, local, env, expected = CASES[case]
    base = tmp_path.resolve()
    proj = base / "proj"
    proj.mkdir()
    home = base / "home"
    config = home / ".claude"
    mem = config / "projects" / claude_memory_key(proj) / "memory"
    mem.mkdir(parents=True)
    (mem / "MEMORY.md").write_text("- MARKER-DEFAULT\n", encoding="utf-8")
    alt = base / "alt-mem"
    alt.mkdir()
    (alt / "MEMORY.md").write_text("- MARKER-ALT\n", encoding="utf-8")
    (home / "alt-mem").mkdir()
    (home / "alt-mem" / "MEMORY.md").write_text("- MARKER-HOME\n", encoding="utf-8")
    for content, path in ((user, config / "settings.json"), (project, proj / ".claude" / "settings.json"),
                          (local, proj / ".claude" / "settings.local.json")):
        if content is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content.replace("@ALT@", str(alt)), encoding="utf-8")

    with FakeAnthropic(default=text("ok")) as api:
        run = run_claude("hello", proj, config, api.url, extra_env=env, home=home, claude=claude)
        asked = api.message_requests
    assert run.returncode == 0, run.stderr
    body = json.dumps(dict(asked[0]), ensure_ascii=False)
    reached = [name for name in ("default", "alt", "home") if f"MARKER-{name.upper()}" in body] or ["none"]
    dirs = re.findall(r"persistent file-based memory at `([^`]+)`", body)
    ground_truth.append(f"settings {case}: MEMORY.md reached: {reached}; memory dir named: "
                        f"{[d.replace(str(base), '<tmp>') for d in dirs]}; {run.elapsed:.2f}s")
    assert reached == [expected]
    if expected == "none":
        assert dirs == []
    else:
        want = {"default": mem, "alt": alt, "home": home / "alt-mem"}[expected]
        assert [Path(d) for d in dirs] == [want]


def test_slash_command_in_print_mode_is_a_local_command_record(
    claude: ClaudeInstall, fake_api: FakeAnthropic, claude_home: Path, tmp_path: Path, ground_truth: list[str]
) -> None:
    proj = tmp_path.resolve() / "proj"
    proj.mkdir()
    run = run_claude("/pause-memory", proj, claude_home / ".claude", fake_api.url, claude=claude)
    assert run.returncode == 0, run.stderr
    assert "isn't available in this environment" in run.stdout
    assert fake_api.message_requests == []
    transcript = run.transcript()
    assert transcript is not None
    entries = [json.loads(line) for line in transcript.read_text(encoding="utf-8").splitlines()]
    commands = [e for e in entries if e.get("type") == "system" and e.get("subtype") == "local_command"]
    assert [c.get("content") for c in commands][:1] == ["/pause-memory"]
    assert any("<local-command-stdout>" in str(c.get("content")) for c in commands)
    ground_truth.append(f"/pause-memory in -p: {run.stdout.strip()!r}; records "
                        f"{[(e.get('type'), e.get('subtype'), str(e.get('content'))[:60]) for e in entries]}")
