"""Settings fallback per field (§8.1), project keys (§1.1), discovery and the CLI around them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from memd import settings as st
from memd.keys import find_repo_root, key_for_root, project_key
from tests.conftest import memd_cmd


def test_defaults_need_no_file(tmp_path: Path) -> None:
    s = st.load(tmp_path / "missing.json")
    assert s.warnings == []
    assert s.get("memory.sessionMemory.minInitTokens") == 10000
    assert s.get("memory.dream.minSessions") == 5
    assert s.get("memory.global.maxBytes") == 8192
    assert s.get("memd.provider") == "auto"


def test_comments_trailing_commas_and_per_field_fallback() -> None:
    text = """
    {
      // master switch
      "memory": {
        "enabled": true,
        "extractEveryTurns": -2,          // invalid: negative
        "sessionMemory": {"minInitTokens": "lots", "minUpdateTokens": 2000,},
        "dream": {"minHours": 0, "minSessions": 3},
        "global": {"maxBytes": 4096, "enabled": "yes"},
      },
    }
    """
    s = st.parse_text(text)
    assert s.get("memory.extractEveryTurns") == 1
    assert s.get("memory.sessionMemory.minInitTokens") == 10000
    assert s.get("memory.sessionMemory.minUpdateTokens") == 2000
    assert s.get("memory.dream.minHours") == 24
    assert s.get("memory.dream.minSessions") == 3
    assert s.get("memory.global.maxBytes") == 4096
    assert s.get("memory.global.enabled") is True
    assert len(s.warnings) == 4
    assert any("memory.extractEveryTurns: -2" in w and "default 1" in w for w in s.warnings)
    assert any("memory.sessionMemory.minInitTokens" in w and '"lots"' in w for w in s.warnings)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"memory": 7}', '{"memory": {"dream": []}}'])
def test_broken_files_fall_back_whole_with_a_warning(text: str) -> None:
    s = st.parse_text(text)
    assert s.get("memory.dream.minHours") == 24
    assert s.warnings or s.broken


def test_project_key_rules(tmp_path: Path) -> None:
    repo = tmp_path / "my repo.v2"
    (repo / ".git").mkdir(parents=True)
    (repo / "src" / "deep").mkdir(parents=True)
    assert find_repo_root(repo / "src" / "deep") == repo
    assert project_key(repo / "src" / "deep") == project_key(repo)
    assert project_key(repo) == str(repo).replace("/", "-").replace(" ", "-").replace(".", "-").replace("_", "-")
    wt = tmp_path / "worktree"
    (wt / "a").mkdir(parents=True)
    (wt / ".git").write_text("gitdir: /elsewhere\n")  # worktrees and submodules: .git is a file
    assert find_repo_root(wt / "a") == wt
    plain = tmp_path / "no-repo" / "x"
    plain.mkdir(parents=True)
    assert find_repo_root(plain) == plain


def test_long_keys_are_cut_and_hashed() -> None:
    long = "/" + "/".join(["segment"] * 40)
    key = key_for_root(long)
    assert len(key) > 201 and key[:200] == key_for_root(long[:200])[:200] and key[200] == "-"
    assert key != key_for_root(long + "x")
    assert key_for_root("/a/b") == "-a-b"


def _memd(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*memd_cmd(), "--home", str(home), *args], capture_output=True, text=True)


def test_cli_config_check_and_json(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    r = _memd(home, "config", "--check")
    assert r.returncode == 0, r.stderr
    (home / "settings.json").write_text('{"memory": {"extractEveryTurns": "x"}}')
    r = _memd(home, "config", "--check")
    assert r.returncode == 5 and "memory.extractEveryTurns" in r.stderr
    r = _memd(home, "config", "--json")
    data = json.loads(r.stdout)
    assert data["memory"]["extractEveryTurns"] == 1 and data["warnings"]


def test_cli_key_and_home_on_the_subcommand(tmp_path: Path) -> None:
    r = subprocess.run([*memd_cmd(), "key", str(tmp_path)], capture_output=True, text=True)
    assert r.stdout.strip() == key_for_root(tmp_path)
    home = tmp_path / "h2"
    home.mkdir()
    r = subprocess.run([*memd_cmd(), "sessions", "--home", str(home), "--json"], capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout) == []


def test_cli_sessions_pause_resume(tmp_path: Path) -> None:
    home = tmp_path / "h"
    d = home / "projects" / "k"
    d.mkdir(parents=True)
    (d / "s1.jsonl").write_text(json.dumps({"type": "user", "uuid": "u", "message": {"role": "user", "content": "hi"}}) + "\n")
    assert _memd(home, "pause", "s1").returncode == 0
    rows = json.loads(_memd(home, "sessions", "--json").stdout)
    assert rows[0]["paused"] is True and rows[0]["human_turns"] == 1
    assert _memd(home, "resume", "s1").returncode == 0
    assert json.loads(_memd(home, "sessions", "--json").stdout)[0]["paused"] is False
    r = _memd(home, "pause", "nope")
    assert r.returncode == 2 and "no session 'nope'" in r.stderr


def test_a_file_that_does_not_parse_keeps_the_last_good_settings(tmp_path: Path) -> None:
    """A user who chose offline and turned memory off must not get the API back from a typo."""
    (tmp_path / "memd").mkdir()
    f = tmp_path / "settings.json"
    f.write_text('{"memory": {"enabled": false}, "memd": {"provider": "offline"}}')
    good = st.load(f)
    assert good.broken is None and good.get("memd.provider") == "offline"
    f.write_text('{"memory": {"enabled": false},\n "memd": {"provider": "offline"\n')
    s = st.load(f)
    assert s.get("memory.enabled") is False and s.get("memd.provider") == "offline"
    assert s.broken and "line 3" in s.broken and s.refused is None
    assert any("keeping the last settings" in w for w in s.warnings)


def test_a_broken_file_with_no_last_good_refuses_model_jobs(tmp_path: Path) -> None:
    f = tmp_path / "settings.json"
    f.write_text("{oops")
    s = st.load(f)
    assert s.refused and "line 1, column 6" in s.refused
    f.write_bytes(b'{"memory": "\xff"}')
    assert "not UTF-8" in (st.load(f).refused or "")


def test_strict_json_is_noticed() -> None:
    assert st.parse_text('{"memory": {}}').strict_json
    assert not st.parse_text('{"memory": {}, // note\n}').strict_json


def test_config_check_refuses_a_non_http_base_url_and_a_model_name_with_a_path_field_by_field(tmp_path: Path) -> None:
    """Issue 23: `baseUrl: file:///etc/passwd` and a model `../../x\\n` are each one line, and fall back."""
    home = tmp_path / "h"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({"memd": {
        "baseUrl": "file:///etc/passwd", "smallModel": "../../x\n", "strongModel": "claude-sonnet-4-6\u202e"}}))
    r = _memd(home, "config", "--check")
    assert r.returncode == 5
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert any("memd.baseUrl" in line and "not an http(s) URL" in line for line in lines), r.stderr
    assert any("memd.smallModel" in line and "not a model name" in line for line in lines), r.stderr
    assert any("memd.strongModel" in line for line in lines), r.stderr
    data = json.loads(_memd(home, "config", "--json").stdout)
    assert (data["memd"]["baseUrl"], data["memd"]["smallModel"]) == ("", "claude-haiku-4-5")
    (home / "settings.json").write_text(json.dumps({"memd": {"baseUrl": "http://127.0.0.1:8080",
                                                              "strongModel": "claude-3-5-sonnet@20240620"}}))
    assert _memd(home, "config", "--check").returncode == 0
