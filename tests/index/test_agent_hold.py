"""The daemon leaves a project's MEMORY.md alone while an agent is at work there (memd.index.hold, SPEC §14).

Claude Code's auto-memory writes a topic file, Reads MEMORY.md and Edits it within one turn; on main
the daemon's index run, set off by the topic file, rewrote MEMORY.md between that Read and that Edit
(Claude Code 2.1.332 then refuses the Edit or applies it with "the file had been modified on disk
since you last read it"; tests/e2e/agents/test_shared_memory_e2e.py shows it with the real binary).
Here: the pure rule, the transcript scan, and the index job through `run_job` with the daemon's hook.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import structlog

from jobs import index
from memd import state
from memd.index.hold import MAX_HOLD_SECONDS, TEST_ENV, hold_seconds, index_hold, newest_append
from memd.index.search import open_readonly, query_index
from memd.job.context import JobContext
from memd.job.runner import run_job
from memd.settings import parse_text
from memd.tree import Home, Place
from tests.write.kit import KEY, memory_dir, write_memory

QUIET = 30


@pytest.mark.parametrize(
    ("agent_at", "index_at", "quiet", "want"),
    [
        (None, 0.0, 30, 0.0),  # no transcript: nobody at work
        (990.0, 900.0, 30, 20.0),  # appended 10 s ago: 20 s more
        (960.0, 900.0, 30, 0.0),  # quiet for exactly the quiet time
        (990.0, 900.0, 0, 0.0),  # switched off
        (990.0, 1000.0 - MAX_HOLD_SECONDS, 30, 0.0),  # MEMORY.md unwritten for the longest hold: now
        (990.0, None, 30, 20.0),  # MEMORY.md not there yet: the agent may be creating it
        (5000.0, 900.0, 30, 30.0),  # an append dated in the future holds no longer than the quiet time
    ],
)
def test_hold_seconds(agent_at: float | None, index_at: float | None, quiet: int, want: float) -> None:
    assert hold_seconds(1000.0, agent_at, index_at, quiet) == pytest.approx(want)


def _touch(path: Path, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    os.utime(path, (mtime, mtime))


def test_newest_append_reads_transcripts_and_the_subagents_of_live_sessions(tmp_path: Path) -> None:
    now = 10_000_000.0
    assert newest_append(tmp_path / "nothing", now) is None
    _touch(tmp_path / "a.jsonl", now - 100)
    _touch(tmp_path / "memory" / "x.md", now - 1)  # not a transcript
    _touch(tmp_path / "notes.txt", now - 1)
    assert newest_append(tmp_path, now) == now - 100
    _touch(tmp_path / "a" / "subagents" / "agent-1.jsonl", now - 5)  # a subagent of a live session at work
    assert newest_append(tmp_path, now) == now - 5
    _touch(tmp_path / "old.jsonl", now - 2 * MAX_HOLD_SECONDS)
    _touch(tmp_path / "old" / "subagents" / "agent-2.jsonl", now - 1)  # a session long over: its dirs not read
    assert newest_append(tmp_path, now) == now - 5


def test_a_memory_md_not_there_yet_is_held_at_most_the_longest_hold_counted_from_its_oldest_memory(
    tmp_path: Path,
) -> None:
    """On main a missing MEMORY.md had no age, so an agent that never paused held its first index for good."""
    now = 10_000_000.0
    sessions, memories = tmp_path / "sessions", tmp_path / "memory"
    _touch(sessions / "s1.jsonl", now - 1)  # the agent is at work
    index_md = memories / "MEMORY.md"
    assert index_hold([sessions], index_md, now, QUIET) == pytest.approx(QUIET - 1)  # nothing at all yet: held
    _touch(memories / "fresh.md", now - 5)
    _touch(memories / ".fresh.md.tmp", now - 2 * MAX_HOLD_SECONDS)  # a temporary: not a memory
    assert index_hold([sessions], index_md, now, QUIET) == pytest.approx(QUIET - 1)
    _touch(memories / "old.md", now - MAX_HOLD_SECONDS - 1)  # a memory unindexed for the longest hold
    assert index_hold([sessions], index_md, now, QUIET) == 0.0
    _touch(index_md, now - 3)  # once MEMORY.md is there, its own age counts
    assert index_hold([sessions], index_md, now, QUIET) == pytest.approx(QUIET - 1)
    assert index_hold([tmp_path / "none"], index_md, now, QUIET) == 0.0  # no transcript: nobody at work


def _home(tmp_path: Path, quiet: int = QUIET) -> tuple[Home, JobContext, list[tuple[Place, float]]]:
    home = Home(tmp_path / "h")
    settings = parse_text(f'{{"memd": {{"provider": "offline", "agentQuietSeconds": {quiet}}}}}')
    held: list[tuple[Place, float]] = []
    ctx = JobContext(home, settings, state.connect(home.state_db), lambda: datetime.now(UTC),
                     structlog.get_logger("test"), hold_index=lambda p, s: held.append((p, s)))  # fmt: skip
    return home, ctx, held


def _found(home: Home, word: str) -> list[str]:
    conn = open_readonly(home.search_db)
    try:
        return [h.name for h in query_index(conn, word, project_key=KEY)]
    finally:
        conn.close()


def test_the_daemons_index_run_holds_memory_md_while_the_agent_works_and_writes_it_once_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TEST_ENV, raising=False)
    home, ctx, held = _home(tmp_path)
    root = home.root
    write_memory(root, "ci-is-slow", "CI takes 40 minutes.")
    assert run_job(ctx, index, Place.project(KEY)).outcome == "ok"  # nobody at work: written
    index_md = memory_dir(root) / "MEMORY.md"
    before = index_md.read_bytes()
    assert b"ci-is-slow" in before and held == []

    _touch(home.project_dir(KEY) / "s1.jsonl", time.time())  # the agent's turn: its transcript just moved
    write_memory(root, "flaky-test", "tests/test_hooks.py::test_timeout flakes; rerun once.")  # its topic file
    r = run_job(ctx, index, Place.project(KEY))
    assert r.outcome == "ok" and r.details["held_seconds"] > 0
    assert index_md.read_bytes() == before  # MEMORY.md untouched under the agent
    assert [p for p, _s in held] == [Place.project(KEY)] and 0 < held[0][1] <= QUIET  # run again, then
    assert "flaky-test" in _found(home, "flakes")  # search is current at once

    again = run_job(ctx, index, Place.project(KEY))  # still at work: held again, not recorded as current
    assert again.details["held_seconds"] > 0 and index_md.read_bytes() == before

    _touch(home.project_dir(KEY) / "s1.jsonl", time.time() - QUIET - 1)  # the agent has gone quiet
    held.clear()
    done = run_job(ctx, index, Place.project(KEY))
    assert done.details["held_seconds"] == 0 and held == []
    assert "flaky-test" in index_md.read_text()


def test_a_memory_md_unwritten_for_the_longest_hold_is_rewritten_under_a_busy_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TEST_ENV, raising=False)
    home, ctx, held = _home(tmp_path)
    write_memory(home.root, "ci-is-slow", "CI takes 40 minutes.")
    assert run_job(ctx, index, Place.project(KEY)).outcome == "ok"
    index_md = memory_dir(home.root) / "MEMORY.md"
    old = time.time() - MAX_HOLD_SECONDS - 1
    os.utime(index_md, (old, old))
    _touch(home.project_dir(KEY) / "s1.jsonl", time.time())
    write_memory(home.root, "flaky-test", "tests/test_hooks.py::test_timeout flakes; rerun once.")
    assert run_job(ctx, index, Place.project(KEY)).details["held_seconds"] == 0
    assert "flaky-test" in index_md.read_text() and held == []


def test_without_the_daemons_hook_or_with_the_setting_at_zero_memory_md_is_written_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TEST_ENV, raising=False)
    for quiet, hook in ((QUIET, False), (0, True)):
        home, ctx, held = _home(tmp_path / f"q{quiet}", quiet)
        if not hook:
            ctx.hold_index = None  # `memd run-now`, `undo`, `remember`: a person asked
        _touch(home.project_dir(KEY) / "s1.jsonl", time.time())
        write_memory(home.root, "flaky-test", "tests/test_hooks.py::test_timeout flakes; rerun once.")
        assert run_job(ctx, index, Place.project(KEY)).details["held_seconds"] == 0
        assert "flaky-test" in (memory_dir(home.root) / "MEMORY.md").read_text() and held == []


def test_the_drawer_is_never_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TEST_ENV, raising=False)
    home, ctx, held = _home(tmp_path)
    _touch(home.project_dir(KEY) / "s1.jsonl", time.time())
    write_memory(home.root, "short-commits", "The user prefers short commit messages.", key=None, typ="user")
    assert run_job(ctx, index, Place.global_()).details["held_seconds"] == 0
    assert "short-commits" in (memory_dir(home.root, None) / "MEMORY.md").read_text() and held == []


def test_the_daemons_dream_under_an_agent_at_work_leaves_memory_md_for_the_index_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's case: the dream wrote its MEMORY.md into the staging directory and swapped it in, so the
    hold in its refresh after the swap had nothing left to hold. Now the staging copy keeps the live bytes and
    the rewrite waits, handed to the daemon like the index job's."""
    from jobs import dream  # noqa: PLC0415
    from tests.jobs.dream.helpers import KEY as DKEY  # noqa: PLC0415
    from tests.jobs.dream.helpers import TARGET, make_ctx, mk_settings, offline_scope  # noqa: PLC0415

    monkeypatch.delenv(TEST_ENV, raising=False)
    root = tmp_path / "h"
    d = offline_scope(root)
    settings = mk_settings(memd={"agentQuietSeconds": QUIET})
    assert run_job(make_ctx(root, settings), index, TARGET).outcome == "ok"
    before = (d / "MEMORY.md").read_bytes()
    _touch(Home(root).project_dir(DKEY) / "s1.jsonl", time.time())  # the agent's turn
    held: list[tuple[Place, float]] = []
    ctx = make_ctx(root, settings)
    ctx.hold_index = lambda p, s: held.append((p, s))
    r = run_job(ctx, dream, TARGET, force=True)
    assert r.outcome == "ok" and "merged" in r.reason, r.reason  # the dream changed memory files
    assert (d / "MEMORY.md").read_bytes() == before  # but not MEMORY.md, under the agent
    assert held and held[0][0] == TARGET
    _touch(Home(root).project_dir(DKEY) / "s1.jsonl", time.time() - QUIET - 1)  # quiet: the index job writes it
    assert run_job(ctx, index, TARGET).details["held_seconds"] == 0
    assert (d / "MEMORY.md").read_bytes() != before


def test_a_session_in_a_subdirectory_or_a_worktree_holds_the_projects_memory_md(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's case: Claude Code files a session under its cwd's key and its memory under the git root's,
    so an agent in `repo/sub` (transcripts in `projects/<key>-sub/`) or in a linked worktree (another key; the
    extract cursor names the memory key it wrote to) was not seen at work."""
    monkeypatch.delenv(TEST_ENV, raising=False)
    from memd.index.hold import transcript_keys  # noqa: PLC0415

    home, ctx, held = _home(tmp_path / "my home ?#%")  # the state database opened by URI: these escaped
    write_memory(home.root, "ci-is-slow", "CI takes 40 minutes.")
    assert run_job(ctx, index, Place.project(KEY)).outcome == "ok"
    before = (memory_dir(home.root) / "MEMORY.md").read_bytes()
    _touch(home.projects / f"{KEY}-sub" / "s1.jsonl", time.time())  # the agent's turn, from repo/sub
    write_memory(home.root, "flaky-test", "tests/test_hooks.py::test_timeout flakes; rerun once.")
    assert run_job(ctx, index, Place.project(KEY)).details["held_seconds"] > 0
    assert (memory_dir(home.root) / "MEMORY.md").read_bytes() == before and held  # held, and handed back to rerun

    ctx.conn.execute("INSERT INTO sessions (key, session_id, path) VALUES ('-wt-tree', 'w1', '/x')")
    ctx.conn.execute("INSERT INTO cursors (job, target, value, updated_at) VALUES ('extract', 'session:-wt-tree:w1', ?, 'now')",
                     (f'{{"memory_key": "{KEY}"}}',))  # fmt: skip
    ctx.conn.commit()
    assert transcript_keys(home.projects, home.state_db, KEY) >= {KEY, f"{KEY}-sub", "-wt-tree"}
    assert "-wt-tree" not in transcript_keys(home.projects, home.state_db, "-other")
