"""`memd remember`, `edit`, `forget` as real processes: each through the write path, each undone by `memd undo`;
secrets redacted before any name, index or search row is derived; the small model's answer is untrusted."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from tests.fakeapi import FakeAnthropic, json_text, text
from tests.procs import memd_env
from tests.write.kit import (
    AKIA,
    AWS_SECRET,
    GHP,
    KEY,
    SECRETS,
    SK_ANT,
    cli,
    cli_json,
    editor,
    memory_dir,
    memory_files,
    settings,
    tree_bytes,
    write_memory,
)


def test_remember_then_undo(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home)
    write_memory(home, "existing", "Already here.")
    before = memory_files(home)
    r = cli_json(home, "remember", "We decided that migrations ship a day before the code.", "--project", KEY)
    assert r["status"] == "added" and r["scope"] == "project" and r["provider"] == "offline"
    path = home / r["file"]
    assert path.exists() and r["name"] in (memory_dir(home) / "MEMORY.md").read_text()
    assert "migrations ship a day before the code" in path.read_text()
    assert cli_json(home, "remember", "We decided that migrations ship a day before the code.",
                    "--project", KEY)["status"] == "unchanged"  # fmt: skip
    clash = cli(home, "remember", "Something else entirely.", "--project", KEY, "--name", r["name"])
    assert clash.returncode == 2 and "already exists" in clash.stderr

    u = cli(home, "undo", r["run"])
    assert u.returncode == 0, u.stderr
    assert not path.exists()
    after = memory_files(home)
    assert {k: v for k, v in after.items() if not k.endswith("MEMORY.md")} == {
        k: v for k, v in before.items() if not k.endswith("MEMORY.md")}  # fmt: skip
    assert r["name"] not in (memory_dir(home) / "MEMORY.md").read_text()


def test_remember_scope_type_and_name_options(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    g = cli_json(home, "remember", "I like terse commit messages.", "--global", "--type", "user", "--name", "terse-commits")
    assert (g["scope"], g["type"], g["name"], g["file"]) == ("global", "user", "terse-commits", "memory/terse-commits.md")
    p = cli_json(home, "remember", "The staging board is https://example.com/board", "--cwd", str(repo))
    assert p["scope"] == "project" and p["type"] == "reference" and p["project_key"].endswith("repo")
    assert cli(home, "remember", "   ").returncode == 2
    assert cli(home, "remember", "x", "--global", "--project", KEY).returncode == 2


def test_edit_then_undo_and_invalid_edit_refused(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home)
    path = write_memory(home, "uses-uv", "The project uses uv.")
    original = path.read_bytes()
    good = editor(tmp_path, "good", "t = t.replace('uses uv.', 'uses poetry; uv is gone.')")
    r = cli(home, "edit", "uses-uv", "--project", KEY, "--json", editor=good)
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout)
    assert row["status"] == "updated" and "poetry" in path.read_text()
    assert cli(home, "search", "poetry", "--project", KEY).stdout.count("uses-uv") >= 1
    edited = path.read_bytes()

    for script, why in (("t = t.replace('  type: project\\n', '')", "missing type"),
                        ("t = t.replace('name: uses-uv', 'name: ../../etc/passwd')", "looks like a path"),
                        ("t = t + 'token ' + 'ghp_' + 'Ab1x' * 9 + '\\n'", "secret"),
                        ("t = t.replace('---\\n', '', 1)", "no front matter")):  # fmt: skip
        bad = editor(tmp_path, "bad", script)
        b = cli(home, "edit", "uses-uv", "--project", KEY, editor=bad)
        assert b.returncode == 2 and why in b.stderr and "unchanged" in b.stderr, (why, b.stderr)
        kept = Path(b.stderr.rsplit("kept in ", 1)[1].rstrip(")\n"))
        assert kept.exists(), "the refused edit is not lost"
        kept.unlink()
        assert path.read_bytes() == edited
    noop = editor(tmp_path, "noop", "pass")
    assert "no change" in cli(home, "edit", "uses-uv", "--project", KEY, editor=noop).stdout
    failing = tmp_path / "fail.sh"
    failing.write_text("#!/bin/sh\nexit 3\n")
    failing.chmod(0o700)
    assert cli(home, "edit", "uses-uv", "--project", KEY, editor=failing).returncode == 1
    assert path.read_bytes() == edited

    u = cli(home, "undo", row["run"])
    assert u.returncode == 0, u.stderr
    assert path.read_bytes() == original, "undone byte for byte"


def test_forget_then_undo(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home)
    path = write_memory(home, "board", "See https://example.com/board", typ="reference")
    drawer = write_memory(home, "board", "The global one.", key=None, typ="reference")
    original = path.read_bytes()
    os.utime(path, (1_700_000_000, 1_700_000_000))
    r = cli_json(home, "forget", "board", "--project", KEY)
    assert not path.exists() and drawer.exists(), "the project's memory first; the drawer's untouched"
    assert "board" not in (memory_dir(home) / "MEMORY.md").read_text()
    assert cli(home, "forget", "board", "--project", KEY, "--cwd", ".").returncode == 2
    assert cli(home, "forget", "nope", "--project", KEY).returncode == 2
    u = cli(home, "undo", r["run"])
    assert u.returncode == 0, u.stderr
    assert path.read_bytes() == original and int(path.stat().st_mtime) == 1_700_000_000
    assert "board" in (memory_dir(home) / "MEMORY.md").read_text()
    g = cli_json(home, "forget", "board", "--global")
    assert not drawer.exists() and g["scope"] == "global"


def _search_text(home: Path) -> str:
    conn = sqlite3.connect(f"file:{home / 'memd' / 'search.sqlite'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT scope, project_key, file, name, description, type, body FROM memories").fetchall()
    finally:
        conn.close()
    return json.dumps(rows)


def test_no_planted_secret_reaches_a_file_name_an_index_or_a_search_row(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home)
    said = [
        (f"{GHP} remember that the deploy bot uses this token", "--project"),
        (f"Always authenticate the CLI with {SK_ANT} before running evals", "--global"),
        (f"We use {AKIA} with {AWS_SECRET} in staging", "--project"),
        (f"Remember: {GHP}", "--global"),
    ]
    names = []
    for text_, flag in said:
        args = ["remember", text_, flag] + ([KEY] if flag == "--project" else [])
        r = cli_json(home, *args)
        names.append(r["name"])
        assert "[REDACTED:" in (home / r["file"]).read_text()
    assert len(set(names)) == len(names)
    cli(home, "run-now", "index", "--all")
    for path, data in tree_bytes(home).items():
        for s in SECRETS:
            assert s not in path and s[:12] not in path, path
            assert s.encode() not in data, f"{path} holds a planted secret"
    for s in SECRETS:
        assert s not in _search_text(home)
        assert s[:12].lower() not in " ".join(names).lower()
    assert "deploy-bot" in " ".join(names) or "deploy" in " ".join(names)
    named = cli(home, "remember", "anything", "--global", "--name", f"x-{GHP}")
    assert named.returncode == 2 and "secret" in named.stderr


@pytest.mark.slow
def test_remember_with_a_model_types_names_and_scopes_and_falls_back_on_a_bad_answer(tmp_path: Path) -> None:
    home = tmp_path / "h"
    settings(home, memd={"provider": "anthropic"})
    good = json_text({"type": "feedback", "scope": "global", "name": "short-answers",
                      "description": "The user wants short answers in every project"})  # fmt: skip
    bad_name = json_text({"type": "user", "scope": "global", "name": "../../escape", "description": "x"})
    with FakeAnthropic([good, text("I think this is a preference."), bad_name]) as api:
        env = memd_env(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=api.base_url)
        r = cli(home, "remember", f"Keep answers short, everywhere. My token is {GHP}", "--json", env=env)
        assert r.returncode == 0, r.stderr
        row = json.loads(r.stdout)
        assert (row["name"], row["type"], row["scope"], row["provider"]) == ("short-answers", "feedback", "global",
                                                                               "anthropic")  # fmt: skip
        body = (home / row["file"]).read_text()
        assert "Keep answers short, everywhere." in body and GHP not in body and "[REDACTED:github]" in body
        sent = [q for q in api.requests if q.path == "/v1/messages"]
        assert sent and GHP not in json.dumps(sent[0]) and sent[0]["model"] == "claude-haiku-4-5"

        fb = cli(home, "remember", "We decided that the API returns 422 for an empty cart.", "--project", KEY,
                 env=env)  # fmt: skip
        assert fb.returncode == 0 and "not usable" in fb.stderr and "offline rules" in fb.stderr, fb.stderr
        fb2 = cli(home, "remember", "I prefer tabs to spaces.", "--global", "--type", "user", "--json", env=env)
        assert fb2.returncode == 0, fb2.stderr
        row2 = json.loads(fb2.stdout)
        assert row2["provider"] == "offline" and row2["type"] == "user" and "escape" not in row2["name"]
        assert "looks like a path" in " ".join(row2["notes"])
    files = sorted(p.name for p in (home / "memory").glob("*.md"))
    assert "short-answers.md" in files and not any("escape" in f for f in files)
