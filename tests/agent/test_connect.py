"""`memd connect claude` / `memd disconnect claude` over settings files that already hold things."""

from __future__ import annotations

import ast
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

import memd
from memd.agent import connect
from memd.tree import Home
from tests.procs import memd_env, run_memd

OTHERS: dict[str, Any] = {
    "model": "sonnet",
    "permissions": {"allow": ["Bash(git status)"]},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit-bash"}]}],
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "other-tool start"}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "~/bin/prompt-guard", "timeout": 5}]}],
    },
    "memd": {"provider": "offline"},
}
COMPACT = '{"model": "sonnet", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify"}]}]}}\n'


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / ".claude")
    h.root.mkdir()
    return h


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def memd_hooks(settings: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for event, groups in settings.get("hooks", {}).items():
        for g in groups:
            for h in g["hooks"]:
                if connect.is_memd_hook(h):
                    out.setdefault(event, []).append(shlex.split(h["command"])[-4])
    return out


def test_connect_keeps_everything_else_is_idempotent_and_disconnect_restores_the_bytes(home: Home) -> None:
    original = json.dumps(OTHERS, indent=4) + "\n"
    home.settings_file.write_text(original)
    r = run_memd(home.root, "connect", "claude")
    assert r.returncode == 0, r.stderr
    after = load(home.settings_file)
    assert memd_hooks(after) == {"SessionStart": ["context"], "UserPromptSubmit": ["recall"], "PreCompact": ["precompact"]}
    assert after["model"] == "sonnet" and after["permissions"] == OTHERS["permissions"] and after["memd"] == OTHERS["memd"]
    for event, groups in OTHERS["hooks"].items():
        assert after["hooks"][event][: len(groups)] == groups  # other tools' hooks first, untouched
    command = after["hooks"]["UserPromptSubmit"][1]["hooks"][0]
    assert command["timeout"] == 15 and f"--home {home.root}" in command["command"]
    assert command["command"].endswith("recall --hook || true")
    assert home.settings_file.read_text().startswith('{\n    "model"')  # the file's own indentation
    server = load(home.root / ".claude.json")["mcpServers"]["memd"]
    assert server["type"] == "stdio" and server["args"][-3:] == ["--home", str(home.root), "mcp"]
    assert (home.memd_dir / "backups").is_dir() and os.stat(home.settings_file).st_mode & 0o777 == 0o644  # kept
    once = home.settings_file.read_bytes()
    r = run_memd(home.root, "connect", "claude")
    assert r.returncode == 0 and "nothing to change" in r.stdout
    assert home.settings_file.read_bytes() == once
    r = run_memd(home.root, "disconnect", "claude")
    assert r.returncode == 0, r.stderr
    assert home.settings_file.read_text() == original
    assert not (home.root / ".claude.json").exists()  # connect created it: disconnect removes it
    r = run_memd(home.root, "disconnect", "claude")
    assert r.returncode == 0 and "nothing to change" in r.stdout


def test_dry_run_prints_the_exact_diff_and_writes_nothing(home: Home) -> None:
    home.settings_file.write_text(COMPACT)
    r = run_memd(home.root, "connect", "claude", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert home.settings_file.read_text() == COMPACT and not (home.root / ".claude.json").exists()
    assert f"--- {home.settings_file} (now)" in r.stdout and f"+++ {home.settings_file} (after)" in r.stdout
    assert "+++ " + str(home.root / ".claude.json") + " (after)" in r.stdout and "--- /dev/null" in r.stdout
    assert '"command": "' in r.stdout and "context --hook || true" in r.stdout
    assert '+{"model": "sonnet", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify"}]}], ' \
           '"SessionStart": [{"hooks": [{"type": "command", "command": ' in r.stdout  # spliced in the file's own style
    assert not (home.memd_dir / "backups").exists()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{\n  // my settings\n  "model": "sonnet"\n}\n', "not strict JSON (line 2, column 3"),
        ('{"model": "sonnet",}\n', "not strict JSON (line 1, column 20"),
        ('{"x": NaN}', "not strict JSON"),
        ("[1, 2]", "the top level is a JSON list"),
        ('{"hooks": []}', '"hooks" is a JSON list, not an object'),
        ('{"hooks": {"SessionStart": {"a": 1}}}', '"hooks.SessionStart" is not a list'),
    ],
)
def test_a_file_that_is_not_strict_json_is_refused_and_left_alone(home: Home, text: str, why: str) -> None:
    home.settings_file.write_text(text)
    r = run_memd(home.root, "connect", "claude")
    assert r.returncode == 5 and why in r.stderr and "nothing" in r.stderr
    assert home.settings_file.read_text() == text
    assert not (home.root / ".claude.json").exists() and not (home.memd_dir / "backups").exists()


def test_a_moved_memd_is_replaced_in_place_and_duplicates_go(home: Home) -> None:
    old = "/old/venv/bin/memd --home /somewhere context --hook"
    home.settings_file.write_text(json.dumps({"hooks": {
        "SessionStart": [{"matcher": "", "hooks": [{"type": "command", "command": "other"},
                                                   {"type": "command", "command": old, "timeout": 3}]},
                         {"hooks": [{"type": "command", "command": "python3 -m memd context --hook"}]}]}}))  # fmt: skip
    r = run_memd(home.root, "connect", "claude")
    assert r.returncode == 0, r.stderr
    groups = load(home.settings_file)["hooks"]["SessionStart"]
    assert len(groups) == 1 and groups[0]["matcher"] == ""
    assert groups[0]["hooks"][0] == {"type": "command", "command": "other"}
    assert groups[0]["hooks"][1]["command"] == connect.hook_command(Home(home.root), "context")
    r = run_memd(home.root, "disconnect", "claude")
    assert load(home.settings_file)["hooks"]["SessionStart"] == [{"matcher": "", "hooks": [{"type": "command", "command": "other"}]}]


def test_a_foreign_mcp_server_named_memd_is_kept_and_the_add_line_printed(home: Home) -> None:
    (home.root / ".claude.json").write_text(json.dumps({"mcpServers": {"memd": {"command": "node", "args": ["x.js"]}}}))
    r = run_memd(home.root, "connect", "claude")
    assert r.returncode == 0, r.stderr
    assert "claude mcp add --scope user memd -- " in r.stderr
    assert load(home.root / ".claude.json")["mcpServers"]["memd"] == {"command": "node", "args": ["x.js"]}
    assert memd_hooks(load(home.settings_file))


def test_claude_json_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    assert connect.claude_json_path(Home(tmp_path / ".claude")) == tmp_path / ".claude.json"
    assert connect.claude_json_path(Home(tmp_path / "cfg")) == tmp_path / "cfg" / ".claude.json"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / ".claude"))
    assert connect.claude_json_path(Home(tmp_path / ".claude")) == tmp_path / ".claude" / ".claude.json"


def test_hook_commands_name_this_memd_and_the_home_only_when_not_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    default = Home(Path("~/.deepcode").expanduser())
    assert "--home" not in connect.hook_command(default, "recall")
    other = connect.hook_command(Home(tmp_path / "my home"), "recall")
    argv = shlex.split(other)
    assert argv[5:7] == ["--home", str(tmp_path / "my home")] and argv[-4:] == ["recall", "--hook", "||", "true"]
    # this interpreter, not the console script (pip's wrapper costs a hook 6-8 ms before memd's first line), and
    # without `site` (-S): the program names the directory memd is imported from
    assert argv[:4] == [sys.executable, "-S", "-P", "-c"] and connect.is_memd_hook({"type": "command", "command": other})
    root = os.path.dirname(os.path.dirname(os.path.abspath(memd.__file__)))  # site-packages, or this checkout
    assert argv[4] == connect.HOOK_CODE.format(root=root)
    assert not connect.is_memd_hook({"type": "command", "command": "echo memd recall --hook"})
    assert not connect.is_memd_hook({"type": "command", "command": "python3 -c 'print(1)' recall --hook"})
    # what connect wrote before: still memd's, so a new connect replaces it and disconnect removes it
    assert connect.is_memd_hook({"type": "command", "command": "/usr/bin/python3 -P -m memd recall --hook"})


def test_a_hook_program_names_any_directory_as_a_python_literal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for odd in ("it's \"here\" \\ ünï", "a b\nc", "/x/\udcff/y"):
        monkeypatch.setattr(connect, "_import_root", lambda odd=odd: odd)
        command = connect.hook_command(Home(tmp_path / "h"), "context")
        code = shlex.split(command)[4]
        assert connect.is_memd_hook({"type": "command", "command": command})
        assert code.startswith("import os, sys; d = ") and ast.literal_eval(code[len("import os, sys; d = "):code.index("; os.path")]) == odd


def test_mcp_print_and_agents_without_a_configuration(home: Home) -> None:
    r = run_memd(home.root, "connect", "mcp", "--print")
    assert r.returncode == 0, r.stderr
    entry = json.loads(r.stdout)["mcpServers"]["memd"]
    assert entry["args"][-1] == "mcp" and os.path.basename(entry["command"]) in ("memd", "python", "python3")
    assert run_memd(home.root, "connect", "mcp").returncode == 2
    r = run_memd(home.root, "connect", "deepcode")
    assert r.returncode == 2 and "memd context --agent deepcode" in r.stderr
    assert not home.settings_file.exists()


def test_a_symlinked_settings_file_is_written_where_it_points(home: Home, tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "claude-settings.json"
    real.parent.mkdir()
    real.write_text(COMPACT)
    home.settings_file.symlink_to(real)
    r = run_memd(home.root, "connect", "claude", env=memd_env())
    assert r.returncode == 0, r.stderr
    assert home.settings_file.is_symlink() and memd_hooks(load(real))
