"""The offline provider: sections from the transcript alone, merged into the previous summary."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jobs import summary
from memd.job.runner import run_job
from memd.tree import Place
from tests.conftest import CORPUS, require_corpus
from tests.jobs.summary.kit import (
    SMALL_SETTINGS,
    assert_whole,
    first_request,
    ingest,
    make_ctx,
    make_settings,
    offline_llm,
    rec_assistant,
    rec_result,
    rec_user,
    shell_commands,
    squash,
    write_jsonl,
)


@pytest.mark.parametrize("name", ["spotter/tool_heavy.jsonl", "agentcmd-claude/full-session-four.jsonl"])
def test_offline_summary_holds_the_first_request_and_a_shell_command(name: str, tmp_path: Path) -> None:
    require_corpus()
    src = CORPUS / name
    home = tmp_path / "h"
    dst = home / "projects" / "k" / src.name
    dst.parent.mkdir(parents=True)
    shutil.copy(src, dst)
    ctx = make_ctx(home, make_settings(), offline_llm)
    ingest(ctx)
    result = run_job(ctx, summary, Place("session", "k", src.stem), force=True)
    assert result.outcome == "ok", result
    path = ctx.home.summary_file("k", src.stem)
    text = path.read_text()
    doc = assert_whole(text)
    assert squash(first_request(src))[:80] in squash(text)
    cmds = shell_commands(src)
    assert cmds and any(squash(c)[:60] in doc.sections["commands"] for c in cmds)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert oct(path.parent.parent.stat().st_mode & 0o777) == "0o700"


def test_offline_update_merges_and_never_rereads_the_start(tmp_path: Path) -> None:
    """An update keeps what the first summary found and adds only the new part's findings."""
    home = tmp_path / "h"
    path = home / "projects" / "k" / "s.jsonl"
    first = [rec_user("Please port the parser to Rust " + "x" * 8000),
             rec_assistant([{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "cargo build"}}], "m1"),
             rec_result("t1", "error: missing crate", is_error=True),
             rec_assistant([{"type": "text", "text": "Fixed the crate list."}], "m2")]  # fmt: skip
    write_jsonl(path, first)
    ctx = make_ctx(home, make_settings(SMALL_SETTINGS), offline_llm)
    ingest(ctx)
    t = Place("session", "k", "s")
    assert run_job(ctx, summary, t).outcome == "ok"
    one = assert_whole(ctx.home.summary_file("k", "s").read_text())
    assert "cargo build" in one.sections["commands"] and "missing crate" in one.sections["errors"]
    second = [rec_user("no, use the nom crate instead " + "y" * 4000, ts="2026-11-30T11:00:00.000Z"),
              rec_assistant([{"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "src/lib.rs"}}], "m3"),
              rec_result("t2", "fn main() {}"),
              rec_assistant([{"type": "text", "text": "Switched to nom."}], "m4")]  # fmt: skip
    write_jsonl(path, second)
    ingest(ctx)
    assert summary.due(ctx) == [t]
    assert run_job(ctx, summary, t).outcome == "ok"
    two = assert_whole(ctx.home.summary_file("k", "s").read_text())
    assert two.title == one.title and "port the parser" in two.title
    assert "cargo build" in two.sections["commands"] and "`src/lib.rs`" in two.sections["files"]
    assert "user correction: no, use the nom crate" in two.sections["errors"]
    assert "Switched to nom." in two.sections["state"] and "Fixed the crate list" not in two.sections["state"]
    log = two.sections["worklog"].splitlines()
    assert len(log) == 2 and "Please port" in log[0] and "no, use the nom" in log[1]
