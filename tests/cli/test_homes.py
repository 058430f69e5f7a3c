"""A home that does not exist, or is a file, is a usage error (issue 11 §4): one line, exit 2,
nothing created; `memd demo DIR` refuses a non-empty directory it did not make."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import memd_cmd

READ_COMMANDS = [["status"], ["status", "--json"], ["sessions"], ["search", "x"], ["list"], ["show", "x"],
                 ["recall", "x"], ["history"], ["doctor"], ["config", "--check"], ["scan"],
                 ["run-now", "index", "--global"], ["logs"], ["undo"]]  # fmt: skip


def memd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*memd_cmd(), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})  # fmt: skip


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: " ".join(a))
def test_a_typo_home_is_an_error_and_nothing_is_created(tmp_path: Path, args: list[str]) -> None:
    home = tmp_path / "typo"
    r = memd("--home", str(home), *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "no such home" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not home.exists()


def test_deepcode_home_pointing_at_a_file(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    r = memd("status", env={"DEEPCODE_HOME": str(f)})
    assert r.returncode == 2 and "not a directory" in r.stderr and "Traceback" not in r.stderr


def test_demo_refuses_a_non_empty_directory_it_did_not_make(tmp_path: Path) -> None:
    d = tmp_path / "mine"
    d.mkdir()
    (d / "precious.txt").write_text("keep me")
    r = memd("demo", str(d))
    assert r.returncode == 2 and "not empty" in r.stderr
    assert (d / "precious.txt").read_text() == "keep me"
    fresh = tmp_path / "demo"
    assert memd("demo", str(fresh)).returncode == 0
    assert memd("demo", str(fresh)).returncode == 0  # its own earlier copy is replaced


@pytest.mark.parametrize(("args", "words"), [(["run-now", "dream", "--session", "s1"], "not on a session"),
                                             (["run-now", "extract", "--global"], "not on the global drawer"),
                                             (["run-now", "summary", "--global"], "not on the global drawer")])
def test_run_now_with_a_target_the_job_does_not_take(tmp_path: Path, args: list[str], words: str) -> None:
    (tmp_path / "h").mkdir()
    r = memd("--home", str(tmp_path / "h"), *args)
    assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr
    status = memd("--home", str(tmp_path / "h"), "status", "--json")
    assert '"failed"' not in status.stdout  # no fake failed run recorded


def test_config_check_warns_when_a_claude_home_has_json5(tmp_path: Path) -> None:
    home = tmp_path / ".claude"
    home.mkdir()
    (home / "settings.json").write_text('{"memory": {"enabled": true}, // mine\n}')
    r = memd("--home", str(home), "config", "--check")
    assert r.returncode == 0 and "strict JSON" in r.stderr
    other = tmp_path / "deep"
    other.mkdir()
    (other / "settings.json").write_text('{"memory": {"enabled": true}, // mine\n}')
    r = memd("--home", str(other), "config", "--check")
    assert r.returncode == 0 and "strict JSON" not in r.stderr  # a deepcode home takes JSON with comments
    (other / "settings.json").write_text('{"memory": {"enabled": tru')
    r = memd("--home", str(other), "config", "--check")
    assert r.returncode == 5 and "line 1" in r.stderr


def test_doctor_passes_a_stock_claude_home(tmp_path: Path) -> None:
    """Claude Code makes its home and memory directories 0755: not memd's to judge."""
    home = tmp_path / ".claude"
    mem = home / "projects" / "-repo" / "memory"
    mem.mkdir(parents=True)
    for d in (home, home / "projects", home / "projects" / "-repo", mem):
        os.chmod(d, 0o755)
    (mem / "MEMORY.md").write_text("- [x](x.md) — y\n")
    os.chmod(mem / "MEMORY.md", 0o644)
    r = memd("--home", str(home), "doctor", "--json")

    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert checks["home"]["ok"] and checks["permissions"]["ok"], checks


def test_a_key_file_readable_by_others_is_named(tmp_path: Path) -> None:
    home = tmp_path / "h"
    (home / "memd").mkdir(parents=True)
    key = home / "memd" / "anthropic.key"
    key.write_text("sk-ant-test\n")
    os.chmod(key, 0o644)
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    r = subprocess.run([*memd_cmd(), "--home", str(home), "doctor"], capture_output=True, text=True, env=env)
    assert "readable by others" in r.stdout and "chmod 600" in r.stdout


def test_a_home_whose_path_holds_uri_characters_is_read(tmp_path: Path) -> None:
    """SQLite's read-only opens go through a file URI: a home at `…/a ?#%` was read as `…/a ` (the rest taken
    for the query and fragment), so `status` called the ledger empty and `doctor` missed the database."""
    home = tmp_path / "a ?#% home"
    home.mkdir()
    assert memd("--home", str(home), "scan").returncode == 0
    st = memd("--home", str(home), "status", "--json")
    assert st.returncode == 0 and "no state yet" not in st.stdout and "empty" not in st.stderr, (st.stdout, st.stderr)
    doc = json.loads(memd("--home", str(home), "doctor", "--json").stdout)
    checks = doc if isinstance(doc, list) else doc.get("checks", [])
    state = [c for c in checks if c.get("name") == "state"]
    assert state and state[0]["detail"].endswith("state.sqlite: ok"), state
