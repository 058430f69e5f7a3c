"""Whole runs through `memd.job.runner.run_job`: the offline provider, and the model path (the real `anthropic`
client against the local fake Messages API)."""

from __future__ import annotations

import os
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobs import dream
from jobs.dream.eligibility import due_decisions
from memd.history import runs as history
from memd.index.refresh import refresh_dir
from memd.job.context import JobContext, get_cursor
from memd.job.runner import run_job
from memd.memory.file import parse_memory
from memd.tree import Home, Place
from tests.fakeapi import (
    FakeAnthropic,
    op_absolute_path,
    op_path_traversal,
    ops_reply,
    request_user_text,
    text,
)
from tests.jobs.dream.helpers import (
    KEY,
    TARGET,
    files_of,
    ingest,
    make_ctx,
    mdir,
    mk_settings,
    model_scope,
    msgs,
    mtimes_of,
    offline_scope,
    snapshot_files,
    write_mem,
    write_session,
)

# ----------------------------------------------------------------------------- offline runs


def test_offline_merges_near_duplicates_and_absolutises_dates_hand_edits_kept(home: Path) -> None:
    d = offline_scope(home)
    hand_before = (d / "board.md").read_bytes()
    ctx = make_ctx(home, mk_settings())
    r = run_job(ctx, dream, TARGET, force=True)
    assert r.outcome == "ok", r
    after = files_of(d)
    assert set(after) == {"MEMORY.md", "tabs-2.md", "freeze.md", "board.md", "board-copy.md"}
    merged = parse_memory(d / "tabs-2.md", after["tabs-2.md"])
    assert merged.metadata["provider"] == "offline" and merged.metadata["source"] == "memd"
    assert merged.metadata["merged_from"] == ["tabs-2", "tabs"]
    freeze_day = datetime.fromtimestamp(time.time() - 72 * 3600, UTC).date()
    body = parse_memory(d / "freeze.md", after["freeze.md"]).body
    assert f"on {(freeze_day + timedelta(days=1)).isoformat()}" in body and "tomorrow" not in body and "Monday 20" in body
    assert after["board.md"] == hand_before  # hand-made: not merged, not rewritten
    assert "yesterday" not in parse_memory(d / "board-copy.md", after["board-copy.md"]).body
    assert "[tabs-2](tabs-2.md)" in after["MEMORY.md"].decode() and "(tabs.md)" not in after["MEMORY.md"].decode()
    cur = get_cursor(ctx.conn, "dream", str(TARGET))
    assert cur and cur["run"] == r.details["run"] and cur["last"]
    runs = history.list_runs(Home(home), Place("project", KEY))
    assert len(runs) == 1 and runs[0]["provider"] == "offline" and runs[0]["changes"]["merged"][0]["reason"]
    # the user edits board.md by hand after the dream: still kept; nothing else is left to do,
    # and a run that changes nothing still counts as a consolidation
    edited = time.time() + 1  # coarse file-system clocks can stamp an mtime a few ms in the past
    os.utime(d / "board.md", (edited, edited))
    r2 = run_job(ctx, dream, TARGET, force=True)
    assert r2.outcome == "ok" and r2.reason == "nothing to change", r2
    assert files_of(d) == after


@pytest.mark.parametrize("key", [KEY, None])
def test_views_after_a_dream_equal_a_fresh_rebuild(home: Path, key: str | None) -> None:
    """The run refreshes MEMORY.md, the drawer render and search rows from what it knows, without a
    rescan; a rebuild from the files must find exactly the same."""
    d = mdir(home, key)
    write_mem(d, "a", "alpha said today", "user", "Alpha: decided yesterday, see `today`.\n\nSecond line.", age_h=30)
    write_mem(d, "a2", "alpha said today", "user", "Alpha: decided yesterday, see `today`.\n\nSecond line!", age_h=20)
    write_mem(d, "b", "beta", "feedback", "Beta is fine as it is.", age_h=25)
    target = Place("global") if key is None else Place("project", key)
    ref = Place("global") if key is None else Place("project", key)
    r = run_job(make_ctx(home, mk_settings()), dream, target, force=True)
    assert r.outcome == "ok" and r.details["merged"] == 1, r
    h = Home(home)

    def views() -> tuple[Any, ...]:
        conn = sqlite3.connect(h.search_db)
        rows = sorted(conn.execute("SELECT scope, project_key, file, name, description, type, body, mtime, size FROM memories"))
        conn.close()
        drawer = h.drawer_render.read_bytes() if h.drawer_render.exists() else None
        return rows, (d / "MEMORY.md").read_bytes(), drawer

    after = views()
    for extra in h.search_db.parent.glob("search.sqlite*"):
        extra.unlink()
    refresh_dir(h, ref.kind, ref.key, d, today=datetime.now(UTC).date())
    assert views() == after


def test_refused_plan_changes_nothing_and_backs_off(home: Path) -> None:
    d = mdir(home)
    for i in range(4):
        write_mem(d, f"dup-{i}", "the same statement", "project", "Exactly the same body text, copied around.", age_h=30 + i)
    write_mem(d, "other", "something else", "user", "An unrelated memory about the user.", age_h=30)
    before, mt = files_of(d), mtimes_of(d)
    s = mk_settings(dream={"minHours": 24, "minSessions": 1})
    ctx = make_ctx(home, s)
    write_session(home, KEY, "s1", datetime.now(UTC) - timedelta(hours=1))
    ingest(home)
    assert dream.due(ctx, only=TARGET) == [TARGET]
    r = run_job(ctx, dream, TARGET)
    assert r.outcome == "failed" and "refused: would delete 3 of 5" in r.reason and "--force" in r.reason
    assert files_of(d) == before and mtimes_of(d) == mt
    assert history.list_runs(Home(home)) == []
    cur = get_cursor(ctx.conn, "dream", str(TARGET))
    assert cur is not None and "last" not in cur and cur["failed_at"]
    assert dream.due(ctx, only=TARGET) == []  # backs off instead of paying again at every check
    assert "failed" in due_decisions(ctx, [TARGET])[TARGET][1]
    r = run_job(ctx, dream, TARGET, force=True)
    assert r.outcome == "ok" and r.details["merged"] == 1, r
    assert sorted(files_of(d)) == ["MEMORY.md", "dup-0.md", "other.md"]


# ----------------------------------------------------------------------------- the model path (real client, fake API)


def _model_ctx(home: Path, api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch, **memd: Any) -> JobContext:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    return make_ctx(home, mk_settings("anthropic", memd=memd), url=api.base_url)


def test_model_merge_update_delete_applied_with_history(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = model_scope(home)
    node_day = datetime.fromtimestamp(time.time() - 60 * 3600, UTC).date()
    (home / "projects" / KEY / "s9" / "session-memory").mkdir(parents=True)
    (home / "projects" / KEY / "s9" / "session-memory" / "summary.md").write_text(
        "# Move CI to Node 22\n\n## Current state and next steps\nCI now runs Node 22.\n")
    write_session(home, KEY, "s9", datetime.now(UTC) - timedelta(hours=2))
    write_session(home, KEY, "s8", datetime.now(UTC) - timedelta(hours=3), text_="please bump the staging dashboard link")
    ingest(home)
    before = files_of(d)
    reply = ops_reply(
        {"op": "merge", "sources": ["pnpm", "pnpm-ci"], "name": "pnpm", "description": "pnpm everywhere, CI included",
         "type": "project", "body": "Use pnpm (CI: pnpm install --frozen-lockfile). Why: one lockfile.", "reason": "same topic"},
        {"op": "update", "name": "node", "description": "node version", "type": "project",
         "body": f"Node 18 until {node_day + timedelta(days=1)}, then Node 22.", "reason": "absolute date"},
        {"op": "delete", "name": "staging-url", "reason": "staging was retired"},
        fenced=True, prose="Here is the plan:",
    )  # fmt: skip
    with FakeAnthropic([reply]) as api:
        ctx = _model_ctx(home, api, monkeypatch)
        r = run_job(ctx, dream, TARGET, force=True)
        sent = request_user_text(msgs(api)[0])
        body = msgs(api)[0]
    assert r.outcome == "ok", r
    assert r.details["merged"] == 1 and r.details["rewritten"] == 1 and r.details["deleted"] == 1
    assert "# Move CI to Node 22" not in sent and "Move CI to Node 22" in sent  # the session's title
    assert "first request: please bump the staging dashboard link" in sent  # no summary: the first request
    assert "### pnpm-ci" in sent and "edited by hand" in sent and "## MEMORY.md" in sent and "[pnpm]" in sent
    assert "sonnet" in body["model"]
    after = files_of(d)
    assert set(after) == {"MEMORY.md", "pnpm.md", "node.md", "mine.md"}
    assert after["mine.md"] == before["mine.md"]
    merged = parse_memory(d / "pnpm.md", after["pnpm.md"])
    assert merged.metadata["provider"] == "anthropic" and merged.metadata["merged_from"] == ["pnpm", "pnpm-ci"]
    run = history.list_runs(Home(home), Place("project", KEY))[-1]
    assert run["changes"]["deleted"] == [{"name": "staging-url", "file": "staging-url.md", "reason": "staging was retired"}]
    assert snapshot_files(Path(run["path"])) == before  # the snapshot is the scope before the run


def test_model_answer_deleting_everything_is_refused(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = model_scope(home)
    before, mt = files_of(d), mtimes_of(d)
    everything = [{"op": "delete", "name": m.stem, "reason": "tidy"} for m in sorted(d.glob("*.md")) if m.name != "MEMORY.md"]
    with FakeAnthropic([ops_reply(*everything), ops_reply(*everything)]) as api:
        ctx = _model_ctx(home, api, monkeypatch)
        r = run_job(ctx, dream, TARGET)  # not due: no session yet
        assert r.outcome == "skipped" and "not due" in r.reason and not msgs(api)
        r = run_job(ctx, dream, TARGET, force=True)
        assert r.outcome == "failed" and "all 5 memories" in r.reason and "even with --force" in r.reason, r
    assert files_of(d) == before and mtimes_of(d) == mt
    assert history.list_runs(Home(home)) == [] and not list(d.parent.glob(".memory*"))


def test_model_traversal_and_absolute_names_refused(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = model_scope(home)
    reply = ops_reply(
        op_path_traversal(), op_absolute_path(),
        {"op": "merge", "sources": ["../../../etc/passwd", "pnpm"], "name": "x", "description": "d", "type": "project", "body": "b"},
        {"op": "delete", "name": "/etc/hosts", "reason": "x"},
        {"op": "update", "name": "node", "description": "node version", "type": "project", "body": "Node 22.", "reason": "newer"},
    )  # fmt: skip
    outside = sorted(str(p) for p in home.parent.rglob("*") if "memory" not in p.parts)
    with FakeAnthropic([reply]) as api:
        ctx = _model_ctx(home, api, monkeypatch)
        r = run_job(ctx, dream, TARGET, force=True)
    assert r.outcome == "ok" and r.details["rejected"] == 4 and r.details["rewritten"] == 1, r
    assert sorted(files_of(d)) == ["MEMORY.md", "mine.md", "node.md", "pnpm-ci.md", "pnpm.md", "staging-url.md"]
    now_outside = sorted(str(p) for p in home.parent.rglob("*") if "memory" not in p.parts)
    assert [p for p in now_outside if p not in outside and "/memd/" not in p] == []


def test_unusable_model_answer_fails_without_change(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = model_scope(home)
    before = files_of(d)
    with FakeAnthropic([text("I think everything is fine.")]) as api:
        ctx = _model_ctx(home, api, monkeypatch)
        r = run_job(ctx, dream, TARGET, force=True)
    assert r.outcome == "failed" and "model answer refused" in r.reason
    assert files_of(d) == before
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    r = run_job(make_ctx(home, mk_settings("anthropic")), dream, TARGET, force=True)
    assert r.outcome == "deferred" and "ANTHROPIC_API_KEY" in r.reason


def test_hand_edit_during_the_model_call_defers_the_run(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user saves a memory while the model thinks: the plan was made on the old text, so nothing applies."""
    d = model_scope(home)

    def responder(body: dict[str, Any]) -> Any:
        (d / "node.md").write_text((d / "node.md").read_text().replace("Node 18", "Node 20"))
        return ops_reply({"op": "delete", "name": "pnpm-ci", "reason": "folded"})

    with FakeAnthropic(responder=responder) as api:
        ctx = _model_ctx(home, api, monkeypatch)
        r = run_job(ctx, dream, TARGET, force=True)
    assert r.outcome == "deferred" and r.reason == "memory changed while the model answered; will retry", r
    assert (d / "pnpm-ci.md").exists() and "Node 20" in (d / "node.md").read_text()
    assert history.list_runs(Home(home)) == [] and not list(d.parent.glob(".memory*"))
    assert "last" not in (get_cursor(ctx.conn, "dream", str(TARGET)) or {})


def test_special_file_in_the_scope_fails_clearly(home: Path) -> None:
    d = offline_scope(home)
    os.mkfifo(d / "pipe")
    before = files_of(d)
    r = run_job(make_ctx(home, mk_settings()), dream, TARGET, force=True)
    assert r.outcome == "failed" and "not a regular file" in r.reason, r
    assert files_of(d) == before and (d / "pipe").exists()
    assert not list(d.parent.glob(".memory*")) and not any((home / "memd" / "history").glob("*/*"))


def test_memory_md_is_rendered_once_and_an_agent_write_after_the_swap_is_merged(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The live MEMORY.md is not rendered again after the swap while it holds what the staging got
    (rendering the same memories over a render gives it again: checked here on a file with a line
    memd did not write); a line an agent writes between the swap and the refresh is merged in."""
    from memd.history import snapshots as swap  # noqa: PLC0415 - patched below
    from memd.index.refresh import write_index  # noqa: PLC0415 - the reference
    from memd.memory.scan import scan_dir  # noqa: PLC0415 - the reference

    d = offline_scope(home)
    refresh_dir(Home(home), "project", KEY, d)
    with (d / "MEMORY.md").open("a") as fh:
        fh.write("- [my own line](notes/mine.md) — kept by memd\n")
    real = swap.swap_in

    def agent_writes_after(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        with (d / "MEMORY.md").open("a") as fh:
            fh.write("- [agent line](agent.md) — written by the agent just now\n")

    monkeypatch.setattr(swap, "swap_in", agent_writes_after)
    r = run_job(make_ctx(home, mk_settings()), dream, TARGET, force=True)
    assert r.outcome == "ok" and r.details["merged"] == 1, r
    text = (d / "MEMORY.md").read_text()
    assert "agent line" in text and "my own line" in text and "(tabs-2.md)" in text and "(tabs.md)" not in text
    again = write_index(d / "MEMORY.md", scan_dir(d, "project", KEY).memories)
    assert not again.written and again.render.text == text  # the file is a fixpoint of its own render

    monkeypatch.setattr(swap, "swap_in", real)
    write_mem(d, "fresh", "a fresh memory", "user", "Something new today.", age_h=1)
    calls: list[Path] = []
    import memd.index.refresh as refresh  # noqa: PLC0415 - counted below

    def counting(path: Path, *args: Any, **kwargs: Any) -> Any:
        calls.append(path)
        return write_index(path, *args, **kwargs)

    monkeypatch.setattr(refresh, "write_index", counting)
    r = run_job(make_ctx(home, mk_settings()), dream, TARGET, force=True)
    assert r.outcome == "ok" and r.details["rewritten"] >= 1, r
    assert [p.parent.name[:14] for p in calls] == [".memory.dream-"]  # the staging's render only, not the live one again
    assert write_index(d / "MEMORY.md", scan_dir(d, "project", KEY).memories).written is False


def test_the_collector_is_paused_for_an_offline_run_and_a_model_runs_scan_only(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An offline run scans, plans and applies with the cyclic collector paused; a run with a model
    pauses only its scan (never the model call); it is back on after, and a collector someone else
    had turned off stays off (even on an error)."""
    import gc  # noqa: PLC0415 - what is checked

    import jobs.dream.runner as runner  # noqa: PLC0415 - patched below
    import memd.memory.scan as scan  # noqa: PLC0415 - patched below
    from jobs.dream import apply as applying  # noqa: PLC0415 - patched below
    from jobs.dream.plan import Plan  # noqa: PLC0415 - the spy's answer

    seen: dict[str, bool] = {}

    def spy(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            seen.setdefault(name, gc.isenabled())  # the first call: the run's own (a fresh search index scans too)
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(scan, "scan_dir", spy("scan", scan.scan_dir))
    monkeypatch.setattr(runner, "offline_plan", spy("plan", runner.offline_plan))
    monkeypatch.setattr(applying, "render_ops", spy("apply", applying.render_ops))
    monkeypatch.setattr(runner, "_model_plan", spy("model", lambda *a: Plan(error="no model here")))
    offline_scope(home)
    assert gc.isenabled()
    assert run_job(make_ctx(home, mk_settings()), dream, TARGET, force=True).outcome == "ok"
    assert seen == {"scan": False, "plan": False, "apply": False} and gc.isenabled()
    seen.clear()
    with FakeAnthropic([]) as api:
        assert run_job(_model_ctx(home, api, monkeypatch), dream, TARGET, force=True).outcome == "failed"
    assert seen == {"scan": False, "model": True} and gc.isenabled()

    gc.disable()
    try:
        with pytest.raises(KeyError), runner.collector_paused():
            raise KeyError("x")
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(KeyError), runner.collector_paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_an_offline_run_never_builds_the_model_layer(home: Path) -> None:
    """With `memd.provider` "offline" and memd's own model layer (no test double), the run's provider
    is known from the settings: the layer (and `memd.llm.client`'s imports) is never built. "auto" and a
    layer a caller supplies still decide for themselves."""
    from memd.job.context import make_llm  # noqa: PLC0415 - the daemon's factory

    offline_scope(home)
    for factory in (None, make_llm):
        ctx = make_ctx(home, mk_settings())
        ctx.llm_factory = factory
        assert run_job(ctx, dream, TARGET, force=True).outcome == "ok"
        assert ctx.provider == "offline" and ctx._llm is None
    auto = make_ctx(home, mk_settings("auto"))
    auto.llm_factory = make_llm
    assert auto.provider in ("offline", "anthropic") and auto._llm is not None
