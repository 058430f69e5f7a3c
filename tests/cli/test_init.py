"""Issue 26 pt 1: `memd init` drafts the instruction file from the project's memories, session summaries
and successful build/test commands; prints a diff; `--write` fills only memd's block, as a history run
`memd undo` reverts; the model path goes through the real client against the fake API."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from memd.cli.init import END, START, build_commands, draft, gather, merge_block
from memd.keys import cwd_key, project_key
from memd.memory.file import render_memory, write_memory
from memd.tree import Home
from tests.conftest import memd_cmd
from tests.fakeapi import FAKE_SECRET, FakeAnthropic, request_user_text, text
from tests.jobkit import context, ingest, make_settings
from tests.procs import memd_env

SID = "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
HUMAN = "# Shop\n\nWritten by a person: keep this line.\n"


def _rec(i: int, cwd: Path, kind: str, content: Any) -> str:
    return json.dumps({"type": kind, "uuid": f"u{i}", "sessionId": SID, "cwd": str(cwd),
                       "timestamp": f"2026-11-29T10:00:{i:02d}Z",
                       "message": {"role": kind, "content": content}})  # fmt: skip


def _bash(i: int, cwd: Path, tid: str, cmd: str, ok: bool) -> list[str]:
    return [_rec(i, cwd, "assistant", [{"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": cmd}}]),
            _rec(i + 1, cwd, "user", [{"type": "tool_result", "tool_use_id": tid, "content": "out",
                                       "is_error": not ok}])]  # fmt: skip


def _world(tmp_path: Path) -> tuple[Home, Path]:
    home = Home(tmp_path / "deepcode")
    proj = tmp_path / "shop"
    (proj / ".git").mkdir(parents=True)
    key = project_key(proj)
    lines = [_rec(0, proj, "user", "please fix the cart and run the tests")]
    lines += _bash(1, proj, "t1", "make test", True) + _bash(3, proj, "t2", "pytest -q tests/cart", False)
    lines += _bash(5, proj, "t3", "make test", True) + _bash(7, proj, "t4", "ls -la", True)
    t = home.projects / cwd_key(proj) / f"{SID}.jsonl"
    t.parent.mkdir(parents=True)
    t.write_text("\n".join(lines) + "\n")
    summary = home.summary_file(cwd_key(proj), SID)
    summary.parent.mkdir(parents=True)
    summary.write_text("# Fixing the empty-cart response\n\n## Current state\nDone.\n")
    d = home.project_memory(key)
    write_memory(d, "empty-cart-422", render_memory("empty-cart-422", "an empty cart answers 422 with a JSON body",
                                                    "project", "Decided with the API team."))  # fmt: skip
    write_memory(d, "staging-board", render_memory("staging-board", "the staging board lists deploys", "reference",
                                                   f"https://example.com/board token {FAKE_SECRET}"))  # fmt: skip
    ingest(home.root)
    (proj / "DEEPCODE.md").write_text(HUMAN)
    return home, proj


def memd(home: Home, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*memd_cmd(), "--home", str(home.root), *args], capture_output=True, text=True,
                          env=memd_env(), timeout=120)  # fmt: skip


def test_pure_pieces() -> None:
    assert build_commands([("make test", True), ("ls", True), ("cargo build", False), ("make  test", True),
                           ("npm run build", True)]) == [("make test", 2), ("npm run build", 1)]  # fmt: skip
    merged = merge_block("mine\n", "draft one")
    assert merged == f"mine\n\n{START}\ndraft one\n{END}\n"
    again = merge_block(merged + "after\n", "draft two")
    assert again == f"mine\n\n{START}\ndraft two\n{END}\nafter\n"


def test_init_prints_a_diff_writes_only_its_block_and_undo_reverts_it(tmp_path: Path) -> None:
    home, proj = _world(tmp_path)
    r = memd(home, "init", str(proj))
    assert r.returncode == 0, r.stderr
    assert "+make test" in r.stdout and "pytest -q" not in r.stdout and "ls -la" not in r.stdout
    assert "+## Decisions and constraints" in r.stdout and "an empty cart answers 422" in r.stdout
    assert "+## References" in r.stdout and FAKE_SECRET not in r.stdout
    assert (proj / "DEEPCODE.md").read_text() == HUMAN  # no --write: nothing written
    j = json.loads(memd(home, "init", str(proj), "--json").stdout)
    assert j["provider"] == "offline" and j["inputs"]["commands"] == [{"command": "make test", "runs": 2}]
    assert j["inputs"]["summaries"] == ["Fixing the empty-cart response"] and j["written"] is False

    w = memd(home, "init", str(proj), "--write")
    assert w.returncode == 0, w.stderr
    after = (proj / "DEEPCODE.md").read_text()
    assert after.startswith(HUMAN) and START in after and END in after and FAKE_SECRET not in after
    assert "memd undo" in w.stdout
    assert "up to date" in memd(home, "init", str(proj), "--write").stdout  # idempotent
    u = memd(home, "undo", "--project", project_key(proj))
    assert u.returncode == 0, u.stderr
    assert (proj / "DEEPCODE.md").read_text() == HUMAN


def test_a_new_file_is_created_and_undo_removes_it(tmp_path: Path) -> None:
    home, proj = _world(tmp_path)
    (proj / "DEEPCODE.md").unlink()
    w = memd(home, "init", str(proj), "--write", "--json")
    assert w.returncode == 0, w.stderr
    run = json.loads(w.stdout)["run"]
    assert (proj / "DEEPCODE.md").read_text().startswith(START)
    assert memd(home, "undo", run).returncode == 0
    assert not (proj / "DEEPCODE.md").exists()


def test_claude_home_gets_claude_md_and_bad_path_is_a_usage_error(tmp_path: Path) -> None:
    home, proj = _world(tmp_path)
    r = memd(home, "init", str(proj), "--agent", "claude", "--json")
    assert json.loads(r.stdout)["file"].endswith("/CLAUDE.md")
    bad = memd(home, "init", str(tmp_path / "nowhere"))
    assert bad.returncode == 2 and "nowhere" in bad.stderr


def test_with_a_model_the_strong_model_writes_the_draft(tmp_path: Path) -> None:
    home, proj = _world(tmp_path)
    with FakeAnthropic([text(f"# Shop\n\nA web shop.\n\n## Build and test\n\n    make test\n\nkey {FAKE_SECRET}")]) as api:
        ctx = context(home.root, make_settings(), fake_url=api.base_url)
        inp = gather(ctx, project_key(proj), "shop")
        out, provider = draft(ctx, inp)
        [req] = [q for q in api.requests if q.path == "/v1/messages"]
        sent = request_user_text(req)
    assert provider == "anthropic" and out.startswith("# Shop") and FAKE_SECRET not in out
    assert req["model"] == "claude-sonnet-4-6" and "make test" in sent and "empty cart answers 422" in sent
    assert FAKE_SECRET not in sent
    calls = ctx.conn.execute("SELECT job, ok FROM model_calls").fetchall()
    assert [tuple(c) for c in calls] == [("init", 1)]
