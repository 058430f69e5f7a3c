"""Sync is a job: `memd jobs` lists it, `memd run-now sync` runs it, its runs reach `memd status`.

The daemon's side (dispatch, backoff, the network worker) is tested in test_daemon_sync.py with a
real daemon; here the job's own contract and its runs table, through the real CLI.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import jobs.sync as sync_job
from memd import settings as st
from memd.job.backoff import backoff_seconds
from memd.job.context import make_context
from memd.logs.events import get_logger
from memd.sync.run import BACKOFF_BASE_SECONDS, read_state, retry_after
from memd.tree import Place
from tests.procs import memd_env, run_memd
from tests.sync.helpers import GIT_ENV, bare_remote, git, hand_write, make_home, text


def _runs(home: Path) -> list[dict]:
    st_json = json.loads(run_memd(home, "status", "--json", env=memd_env(**GIT_ENV)).stdout)
    return st_json["jobs"]["sync"]["last_runs"]


def test_memd_jobs_lists_sync() -> None:
    got = json.loads(run_memd(Path("/nonexistent-but-unused"), "jobs", "--json").stdout)
    assert {"job": "sync", "trigger": sync_job.TRIGGER, "model": False} in got


def test_run_now_sync_without_git_is_skipped_and_recorded(tmp_path: Path) -> None:
    home = tmp_path / "h"
    (home / "projects").mkdir(parents=True)
    r = run_memd(home, "run-now", "sync", "--json")
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)
    assert row["job"] == "sync" and row["outcome"] == "skipped" and "memd.git is off" in row["reason"]
    [run] = _runs(home)
    assert run["outcome"] == "skipped" and run["target"] == "global"


def test_run_now_sync_pushes_and_its_run_is_in_status(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path)
    home = make_home(tmp_path, "a", remote)
    hand_write(home, None, "tabs.md", text("tabs", "Use tabs."))
    r = run_memd(home.root, "run-now", "sync", "--json", env=memd_env(**GIT_ENV))
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)
    assert row["outcome"] == "ok" and row["details"]["pushed"] is True, row
    assert "global/tabs.md" in git("--git-dir", str(remote), "ls-tree", "-r", "--name-only", "main")
    [run] = _runs(home.root)
    assert run["outcome"] == "ok"
    assert read_state(home)["last_ok"]


def test_an_unreachable_remote_fails_the_run_with_one_line_and_backs_off(tmp_path: Path) -> None:
    home = make_home(tmp_path, "a", tmp_path / "nowhere.git")
    r = run_memd(home.root, "run-now", "sync", "--json", env=memd_env(**GIT_ENV))
    assert r.returncode == 1
    [row] = json.loads(r.stdout)
    assert row["outcome"] == "failed" and "\n" not in row["reason"] and "nowhere.git" in row["reason"]
    status = json.loads(run_memd(home.root, "status", "--json", env=memd_env(**GIT_ENV)).stdout)
    assert status["jobs"]["sync"]["last_failure"]["run_id"] == status["jobs"]["sync"]["last_runs"][0]["run_id"]
    # inside the backoff the job is not due, whatever the interval says
    ctx = make_context(home, st.load(home.settings_file), log=get_logger("test"))
    try:
        assert sync_job.due(ctx) == []
    finally:
        ctx.conn.close()


def test_due_follows_the_interval_and_a_write_not_pushed(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path)
    home = make_home(tmp_path, "a", remote)
    s = st.load(home.settings_file)
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    ctx = make_context(home, s, log=get_logger("test"), now=lambda: now)
    try:
        assert sync_job.due(ctx) == [Place.global_()]  # never synced: at once
        assert sync_job.due(ctx, only=Place.project("k")) == []
        b = make_home(tmp_path, "b", None)
        off = make_context(b, st.load(b.settings_file), log=get_logger("test"), now=lambda: now)
        try:
            assert sync_job.due(off) == []  # memd.git on but no remote
        finally:
            off.conn.close()
    finally:
        ctx.conn.close()


def test_one_backoff_rule_for_runs_and_syncs() -> None:
    for n in range(1, 8):
        assert retry_after(n, 120) == backoff_seconds(n, BACKOFF_BASE_SECONDS, 120)
    assert [backoff_seconds(n, 30) for n in (1, 2, 3)] == [30, 60, 120]
