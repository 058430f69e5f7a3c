"""`memd connect claude` / `disconnect claude` on real and hostile files (issue 23), Claude Code's own
auto-memory switch (SPEC §14), the pause commands and finding Claude Code's home (issue 22).

Every file case runs the real CLI: connect, check what it wrote, disconnect, and compare the user's
files byte for byte and mode for mode with what they were; what connect created must be gone."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from memd.agent import connect
from memd.tree import Home
from tests.procs import invoke, memd_env, run_memd

OTHERS = {"model": "sonnet", "permissions": {"allow": ["Bash(git status)"]}}


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / ".claude")
    h.root.mkdir()
    return h


def _files(home: Home) -> dict[str, tuple[bytes, int] | None]:
    """settings.json and .claude.json as (bytes, mode), None when absent; and the commands directory."""
    out: dict[str, tuple[bytes, int] | None] = {}
    for p in (home.settings_file, home.root / ".claude.json"):
        out[p.name] = (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) if p.exists() else None
    out["commands"] = (b"", 0) if (home.root / "commands").exists() else None
    return out


def _round_trip(home: Home, *args: str) -> dict[str, Any]:
    before = _files(home)
    r = run_memd(home.root, "connect", "claude", *args)
    assert r.returncode == 0, r.stderr
    after = json.loads(home.settings_file.read_text(encoding="utf-8-sig"))
    assert set(after["hooks"]) >= set(connect.HOOKS)
    r = run_memd(home.root, "disconnect", "claude")
    assert r.returncode == 0, r.stderr
    assert _files(home) == before  # byte for byte, mode for mode; what connect created is gone
    return after


CASES = {
    "indented 4, 0644": (json.dumps(OTHERS, indent=4) + "\n", 0o644),
    "read-only 0444": (json.dumps(OTHERS, indent=2) + "\n", 0o444),
    "CRLF": (json.dumps(OTHERS, indent=2).replace("\n", "\r\n") + "\r\n", 0o644),
    "duplicate keys": ('{\n  "model": "opus",\n  "model": "sonnet",\n  "env": {"A": "1", "A": "2"}\n}\n', 0o600),
    "number spellings": ('{"cleanupPeriodDays": 1E5, "x": 1.50, "y": -0, "z": 1e-7}', 0o644),
    "compact, no newline": (json.dumps(OTHERS, separators=(",", ":")), 0o644),
    "tabs": (json.dumps(OTHERS, indent="\t") + "\n", 0o640),
    "empty file": ("", 0o644),
    "empty object": ("{}", 0o644),
    "byte order mark": ("\ufeff" + json.dumps(OTHERS, indent=2) + "\n", 0o644),
    "hooks of others": (json.dumps({"hooks": {"SessionStart": [{"matcher": "startup", "hooks": [
        {"type": "command", "command": "other-tool start"}]}], "Stop": []}}, indent=2) + "\n", 0o644),
    "empty hooks kept": ('{\n  "hooks": {}\n}\n', 0o644),
}


@pytest.mark.parametrize("case", list(CASES))
def test_settings_come_back_byte_for_byte(home: Home, case: str) -> None:
    text, mode = CASES[case]
    home.settings_file.write_bytes(text.encode("utf-8"))
    home.settings_file.chmod(mode)
    _round_trip(home)


def test_connect_splices_and_keeps_the_rest_of_the_bytes(home: Home) -> None:
    text = '{"cleanupPeriodDays": 1E5,\r\n "model": "a", "model": "b"}'
    home.settings_file.write_bytes(text.encode())
    home.settings_file.chmod(0o444)
    assert run_memd(home.root, "connect", "claude").returncode == 0
    now = home.settings_file.read_bytes().decode()
    assert now.startswith('{"cleanupPeriodDays": 1E5,\r\n "model": "a", "model": "b", "hooks": {')  # inserted last
    assert stat.S_IMODE(home.settings_file.stat().st_mode) == 0o444


def test_absent_files_are_created_then_removed(home: Home) -> None:
    _round_trip(home)
    assert not (home.memd_dir / connect.STATE_NAME).exists()


def test_claude_json_mcp_servers_created_then_removed_and_a_large_compact_file_stays_compact(home: Home) -> None:
    big = {"numStartups": 3, "projects": {f"/p/{i}": {"history": ["x" * 200] * 5} for i in range(2000)}}
    text = json.dumps(big, separators=(",", ":"))
    cj = home.root / ".claude.json"
    cj.write_text(text)
    cj.chmod(0o644)
    home.settings_file.write_text("{}\n")
    before = _files(home)
    assert run_memd(home.root, "connect", "claude").returncode == 0
    grown = cj.stat().st_size - len(text)
    assert 0 < grown < 400, grown  # one member spliced in, nothing re-indented
    assert json.loads(cj.read_text())["mcpServers"]["memd"]["args"][-1] == "mcp"
    assert run_memd(home.root, "disconnect", "claude").returncode == 0
    assert _files(home) == before  # no "mcpServers": {} left where there was none


def test_disconnect_after_claude_code_rewrote_claude_json_removes_only_memds_entry(home: Home) -> None:
    cj = home.root / ".claude.json"
    cj.write_text(json.dumps({"mcpServers": {"other": {"command": "x"}}}, indent=2) + "\n")
    assert run_memd(home.root, "connect", "claude").returncode == 0
    data = json.loads(cj.read_text())
    data["numStartups"] = 7  # Claude Code rewrites the file on every start
    cj.write_text(json.dumps(data, indent=2) + "\n")
    assert run_memd(home.root, "disconnect", "claude").returncode == 0
    assert json.loads(cj.read_text()) == {"mcpServers": {"other": {"command": "x"}}, "numStartups": 7}


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_is_refused_in_one_line_before_anything_is_read(home: Home, tmp_path: Path, target: str) -> None:
    if target == "fifo":
        os.mkfifo(home.settings_file)
    else:
        home.settings_file.symlink_to(target)
    result: dict[str, Any] = {}
    t = threading.Thread(target=lambda: result.update(r=run_memd(home.root, "connect", "claude", process=True)))
    t.start()
    t.join(60)
    assert not t.is_alive(), "connect blocked on the file"
    r = result["r"]
    assert r.returncode == 5 and "not a regular file; nothing changed" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (home.root / ".claude.json").exists()


@pytest.mark.parametrize("text", ['{"a": 1e400}', '{"a": -1E999}', '{"a": Infinity}', '{"a": NaN}'])
def test_non_finite_numbers_are_refused_not_written_as_infinity(home: Home, text: str) -> None:
    home.settings_file.write_text(text)
    r = run_memd(home.root, "connect", "claude")
    assert r.returncode == 5 and "not strict JSON" in r.stderr and "memd changes nothing" in r.stderr, r.stderr
    assert home.settings_file.read_text() == text
    assert not (home.root / ".claude.json").exists() and not (home.root / "commands").exists()


def test_a_file_over_the_size_cap_is_refused_unread(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect, "MAX_CONFIG_BYTES", 1000)
    home.settings_file.write_text(json.dumps({"x": "y" * 2000}))
    with pytest.raises(connect.RefusedFile, match="over memd's"):
        connect.plan_claude(home, connect=True)


# --------------------------------------------------------------------------- auto-memory (SPEC §14)


@pytest.mark.parametrize("text", ['{\n  "model": "sonnet"\n}\n', '{"autoMemoryEnabled": true, "model": "x"}',
                                  '{"autoMemoryEnabled": 1}'])  # fmt: skip
def test_auto_memory_off_and_restored_exactly_by_disconnect(home: Home, text: str) -> None:
    home.settings_file.write_text(text)
    r = run_memd(home.root, "connect", "claude", "--auto-memory", "off")
    assert r.returncode == 0, r.stderr
    assert json.loads(home.settings_file.read_text())["autoMemoryEnabled"] is False
    assert "auto-memory is off" in r.stdout
    assert run_memd(home.root, "disconnect", "claude").returncode == 0
    assert home.settings_file.read_text() == text


def test_connect_explains_auto_memory_and_keep_undoes_an_earlier_off(home: Home) -> None:
    home.settings_file.write_text('{"model": "x"}')
    r = run_memd(home.root, "connect", "claude")
    assert r.returncode == 0 and "auto-memory is on" in r.stdout and "--auto-memory off" in r.stdout
    assert "autoMemoryEnabled" not in home.settings_file.read_text()
    assert run_memd(home.root, "connect", "claude", "--auto-memory", "off").returncode == 0
    assert '"autoMemoryEnabled": false' in home.settings_file.read_text()
    assert run_memd(home.root, "connect", "claude", "--auto-memory", "keep").returncode == 0
    assert "autoMemoryEnabled" not in home.settings_file.read_text()
    assert run_memd(home.root, "disconnect", "claude").returncode == 0
    assert home.settings_file.read_text() == '{"model": "x"}'


def test_doctor_says_when_both_write(home: Home) -> None:
    (home.root / "projects").mkdir()
    r = run_memd(home.root, "doctor", "--json")
    rows = {c["name"]: c for c in json.loads(r.stdout)}
    assert rows["auto-memory"]["ok"] and "both write" in rows["auto-memory"]["detail"]
    home.settings_file.write_text('{"autoMemoryEnabled": false}')
    rows = {c["name"]: c for c in json.loads(run_memd(home.root, "doctor", "--json").stdout)}
    assert "memd alone" in rows["auto-memory"]["detail"]


# --------------------------------------------------------------------------- the pause commands


def test_pause_commands_installed_and_only_memds_removed(home: Home) -> None:
    commands = home.root / "commands"
    commands.mkdir()
    mine = "---\ndescription: my own toggle\n---\n\nDo my thing.\n"
    (commands / "toggle-memory.md").write_text(mine)
    r = run_memd(home.root, "connect", "claude")
    assert r.returncode == 0, r.stderr
    assert "commands/toggle-memory.md left as it is" in r.stderr
    for name in ("pause-memory", "memory-pause", "resume-memory"):
        text = (commands / f"{name}.md").read_text()
        assert text.startswith("---\ndescription: ") and f"/{name}" in text
    assert (commands / "toggle-memory.md").read_text() == mine
    (commands / "resume-memory.md").write_text("edited by the user\n")
    r = run_memd(home.root, "disconnect", "claude")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in commands.iterdir()) == ["resume-memory.md", "toggle-memory.md"]
    assert "changed since connect created it" in r.stderr


def test_commands_directory_connect_made_goes_with_them(home: Home) -> None:
    assert run_memd(home.root, "connect", "claude").returncode == 0
    assert len(list((home.root / "commands").iterdir())) == 4
    assert run_memd(home.root, "disconnect", "claude").returncode == 0
    assert not (home.root / "commands").exists()


# --------------------------------------------------------------------------- finding Claude Code's home


def test_connect_without_home_uses_claude_config_dir_then_dot_claude(tmp_path: Path) -> None:
    user = tmp_path / "user"
    (user / ".claude").mkdir(parents=True)
    (user / ".deepcode").mkdir()
    env = memd_env(HOME=str(user))
    env.pop("CLAUDE_CONFIG_DIR", None)
    env.pop("DEEPCODE_HOME", None)
    r = invoke(["connect", "claude"], env=env)
    assert r.returncode == 0, r.stderr
    assert "hooks" in json.loads((user / ".claude" / "settings.json").read_text())
    assert "memd" in json.loads((user / ".claude.json").read_text())["mcpServers"]  # beside ~/.claude, as Claude Code
    assert not (user / ".deepcode" / "settings.json").exists() and not (user / ".deepcode" / ".claude.json").exists()
    assert f"The hooks bring the memory of {user / '.claude'}" in r.stdout and "none runs for it" in r.stdout
    assert invoke(["disconnect", "claude"], env=env).returncode == 0
    assert not (user / ".claude.json").exists()

    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / ".claude.json").write_text("{}\n")
    r = invoke(["connect", "claude"], env={**env, "CLAUDE_CONFIG_DIR": str(cfg)})
    assert r.returncode == 0, r.stderr
    assert "hooks" in json.loads((cfg / "settings.json").read_text())
    assert "memd" in json.loads((cfg / ".claude.json").read_text())["mcpServers"]


def test_a_target_that_is_not_a_claude_home_is_refused_in_one_line(tmp_path: Path) -> None:
    user = tmp_path / "user"
    (user / ".deepcode").mkdir(parents=True)
    env = memd_env(HOME=str(user))
    env.pop("CLAUDE_CONFIG_DIR", None)
    r = invoke(["connect", "claude"], env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(user / ".claude") in r.stderr
    r = invoke(["--home", str(user / ".deepcode"), "connect", "claude"], env=env)
    assert r.returncode == 2 and "not a Claude Code home" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (user / ".deepcode" / "settings.json").exists()
