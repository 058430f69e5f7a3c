"""Issue 16: a dream never holds its scope's lock while the model answers.

The dream runs as a real process (`run_job` in a child, like `memd run-now dream`); the model is the
in-process fake, whose answer waits until the test lets it go. Meanwhile other writers of the same
scope go through *without waiting* — they are run with no lock patience at all (`--no-wait`, a lock
timeout of 0), so "did not wait" is asserted without a clock.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobs import dream
from jobs.dream.eligibility import DreamLock, scopes
from memd.fsutil import atomic_write
from memd.history import kept, store
from memd.history import runs as history
from memd.history import snapshots as swap
from memd.job.context import get_cursor
from memd.job.runner import run_job
from memd.locks import acquire, lock_path
from memd.memory.file import render_memory
from memd.tree import Home, Place
from tests.fakeapi import FakeAnthropic, ops_reply
from tests.jobs.dream.helpers import (
    KEY,
    TARGET,
    files_of,
    ingest,
    make_ctx,
    mk_settings,
    model_scope,
    msgs,
    snapshot_files,
    write_session,
)
from tests.jobs.dream.test_apply import _child, _result
from tests.procs import run_memd, wait_for

PLAN = ops_reply({"op": "delete", "name": "pnpm-ci", "reason": "folded into pnpm"})


def _settings(home: Path, url: str) -> dict[str, str]:
    (home / "settings.json").write_text(json.dumps({
        "memory": {"dream": {"minHours": 1, "minSessions": 1}},
        "memd": {"provider": "anthropic", "baseUrl": url, "maxRetries": 0, "timeoutSeconds": 600},  # the gated call outlasts no deadline
    }))  # fmt: skip
    return {**os.environ, "ANTHROPIC_API_KEY": "test-key"}


def _gated(gate: threading.Event) -> Any:
    def responder(body: dict[str, Any]) -> Any:
        gate.wait(240)  # released by the test; the cap only ends a failed test
        return PLAN

    return responder


def test_the_dream_lock_is_its_own() -> None:
    project, glob = DreamLock("project", KEY), DreamLock("global")
    assert scopes(TARGET) == [project] and scopes(dream.eligibility.Place("global")) == [glob]
    assert project != Place.project(KEY) and glob != Place.global_()
    assert project.lock_name == f"dream.{Place.project(KEY).lock_name}" and glob.lock_name == "dream.global.lock"
    assert str(project) == f"dream:project:{KEY}" and str(glob) == "dream:global"


@pytest.mark.slow
def test_writers_do_not_wait_for_a_dream_and_the_dream_defers(home: Path) -> None:
    """While the dream's model call is in flight: a memory write and `memd run-now index` on the same
    scope take its lock at once; then the dream sees the change, defers and writes nothing."""
    d = model_scope(home)
    write_session(home, KEY, "s1", datetime.now(UTC) - timedelta(hours=1))
    ingest(home)
    gate = threading.Event()
    with FakeAnthropic(responder=_gated(gate)) as api:
        env = _settings(home, api.base_url)
        child = _child(home, 30, True, env=env)
        try:
            wait_for(lambda: msgs(api) or child.poll() is not None)
            assert msgs(api), "the dream did not reach the model"
            # a memory write, as every memd writer does it: under the scope's lock, here with no patience
            with acquire(Home(home), [Place.project(KEY)], timeout=0):
                atomic_write(d / "yarn.md", render_memory("yarn", "not yarn", "project", "Never yarn here.",
                                                          {"source": "memd"}))  # fmt: skip
            r = run_memd(home, "run-now", "index", "--project", KEY, "--no-wait", env=env, timeout=60)
            assert r.returncode == 0 and f"index project:{KEY}: ok" in r.stdout, (r.stdout, r.stderr)
            assert "[yarn](yarn.md)" in (d / "MEMORY.md").read_text()
            # another dream of the scope does wait: the dream lock is held
            other = run_memd(home, "run-now", "dream", "--project", KEY, "--force", "--no-wait", env=env, timeout=60)
            assert other.returncode == 75 and f"lock busy: dream:project:{KEY}" in other.stdout, other.stdout
            after_writes = files_of(d)
            gate.set()
            result = _result(child)
        finally:
            gate.set()
            if child.poll() is None:
                child.kill()
        assert len(msgs(api)) == 1
    assert result == {"outcome": "deferred", "reason": "memory changed while the model answered; will retry"}, result
    assert files_of(d) == after_writes and (d / "pnpm-ci.md").exists()  # nothing of the plan applied
    assert [r for r in history.list_runs(Home(home)) if r.get("kind") == "dream"] == []
    assert not list(d.parent.glob(".memory*")) and not list((home / "memd" / "swaps").glob("*.json"))
    assert not any(p.is_dir() for p in (home / "memd" / "history").glob("*/*"))  # the snapshot was discarded
    conn = make_ctx(home, mk_settings()).conn
    assert "last" not in (get_cursor(conn, "dream", str(TARGET)) or {})  # still due: the next run plans again


@pytest.mark.slow
def test_an_index_run_that_changes_nothing_lets_the_dream_apply(home: Path) -> None:
    d = model_scope(home)
    write_session(home, KEY, "s1", datetime.now(UTC) - timedelta(hours=1))
    ingest(home)
    gate = threading.Event()
    with FakeAnthropic(responder=_gated(gate)) as api:
        env = _settings(home, api.base_url)
        child = _child(home, 30, False, env=env)
        try:
            wait_for(lambda: msgs(api) or child.poll() is not None)
            assert msgs(api), "the dream did not reach the model"
            r = run_memd(home, "run-now", "index", "--project", KEY, "--no-wait", env=env, timeout=60)
            assert r.returncode == 0, (r.stdout, r.stderr)
            assert lock_path(Home(home), DreamLock("project", KEY)).exists()
            gate.set()
            result = _result(child)
        finally:
            gate.set()
            if child.poll() is None:
                child.kill()
    assert result["outcome"] == "ok", result
    assert not (d / "pnpm-ci.md").exists() and len(history.list_runs(Home(home))) == 1


def test_a_snapshot_swept_during_the_model_call_is_taken_again(home: Path, monkeypatch: Any) -> None:
    """The snapshot is copied under no memory lock, so another process's recovery may sweep it as an
    interrupted snapshot (a daemon starting beside `memd run-now dream`). The apply, under the lock,
    notices and copies it again: the history still holds the scope exactly as it was."""
    d = model_scope(home)
    before = files_of(d)
    h, ref = Home(home), Place("project", KEY)
    swept: list[Any] = []

    def responder(body: dict[str, Any]) -> Any:
        root = store.history_root(h, ref)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
            kept.listing(e) == kept.walk_listing(d) for e in (root.iterdir() if root.exists() else [])
        ):
            time.sleep(0.01)  # the copy is done (it runs in the dream's thread)
        with acquire(h, [ref], timeout=10):
            swept.append(swap.recover_scope(h, ref))
        return PLAN

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    with FakeAnthropic(responder=responder) as api:
        ctx = make_ctx(home, mk_settings("anthropic"), url=api.base_url)
        r = run_job(ctx, dream, TARGET, force=True)
    assert swept and swept[0] and swept[0]["removed"], swept  # the recovery did remove the snapshot
    assert r.outcome == "ok" and r.details["deleted"] == 1, r
    [run] = history.list_runs(h, ref)
    assert snapshot_files(Path(run["path"])) == before
