"""Dream (issue 7): due-ness, the model and offline plans, guardrails, the atomic swap, history and undo.

Real parts throughout: memory files on disk, the state database, the ledger
ingesting real transcript files, jobs run through `memd.runner.run_job` (locks,
run records), the model path through the real `anthropic` client to the local
fake Messages API, concurrency and crashes with real processes and `kill -9`.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

import jobs.dream as dream
from jobs.dream import (
    DreamOp,
    Rules,
    absolutize,
    dream_due,
    guard,
    near_duplicate_groups,
    similarity,
    tokens,
)
from memd import history, ledger, state
from memd.clock import iso
from memd.history import ScopeRef
from memd.indexer import refresh_dir
from memd.jobctx import JobContext, Target, get_cursor, set_cursor
from memd.memories import Memory, parse_memory, render_memory
from memd.opsvalidate import ModelOutputError
from memd.runner import run_job
from memd.settings import Settings, parse_text
from memd.tree import Home, classify_path, discover_sessions, list_memory_dirs
from tests.conftest import REPO, memd_cmd
from tests.fakeapi import (
    FakeAnthropic,
    op_absolute_path,
    op_path_traversal,
    ops_reply,
    request_user_text,
    text,
)

KEY = "-work-proj"
TARGET = Target("project", KEY)


# ----------------------------------------------------------------------------- helpers


def mk_settings(provider: str = "offline", memd: dict[str, Any] | None = None, **memory: Any) -> Settings:
    s = parse_text(json.dumps({"memory": memory, "memd": {"provider": provider, **(memd or {})}}))
    assert not s.warnings, s.warnings
    return s


def fake_llm(url: str) -> Any:
    from memd.llm import LLM, LLMConfig

    cfg = LLMConfig(provider="anthropic", base_url=url, api_key="test-key", timeout_s=20, max_retries=0,
                    daily_token_budget=0)  # fmt: skip
    return lambda ctx: LLM(cfg, usage_sink=lambda rec: None)


def make_ctx(home: Path, s: Settings, *, now: Any = None, url: str | None = None) -> JobContext:
    h = Home(home)
    clock = now if callable(now) else (lambda: now) if now is not None else (lambda: datetime.now(UTC))
    return JobContext(h, s, state.connect(h.state_db), clock, structlog.get_logger("test"),
                      llm_factory=fake_llm(url) if url else None)  # fmt: skip


def mdir(home: Path, key: str | None = KEY) -> Path:
    d = home / "memory" if key is None else home / "projects" / key / "memory"
    d.mkdir(parents=True, exist_ok=True)
    return d


def write_mem(d: Path, name: str, desc: str, typ: str, body: str, *, age_h: float = 48.0, memd: bool = True,
              extra: dict[str, Any] | None = None) -> Path:  # fmt: skip
    """A memory file dated `age_h` hours ago; memd's own files say so (source + matching `updated`)."""
    t = time.time() - age_h * 3600
    meta: dict[str, Any] = {"source": "memd", "updated": iso(datetime.fromtimestamp(t, UTC))} if memd else {}
    meta.update(extra or {})
    p = d / f"{name}.md"
    p.write_text(render_memory(name, desc, typ, body, meta), encoding="utf-8")
    os.utime(p, (t, t))
    return p


def files_of(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


def mtimes_of(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted(d.iterdir()) if p.is_file()}


def write_session(home: Path, key: str, sid: str, ts: datetime, *, sidechain: bool = False, text_: str = "hello there, please fix the build") -> None:  # fmt: skip
    d = home / "projects" / key
    d.mkdir(parents=True, exist_ok=True)
    base: dict[str, Any] = {"sessionId": sid, "timestamp": iso(ts)}
    if sidechain:
        base.update(isSidechain=True, agentId="a1")
    recs = [
        {**base, "type": "user", "uuid": f"{sid}-u", "message": {"role": "user", "content": text_}},
        {**base, "type": "assistant", "uuid": f"{sid}-a", "message": {"id": f"m-{sid}", "role": "assistant",
                                                                      "content": [{"type": "text", "text": "ok"}]}},
    ]  # fmt: skip
    (d / f"{sid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def ingest(home: Path) -> None:
    h = Home(home)
    conn = state.connect(h.state_db)
    try:
        for sf in discover_sessions(h):
            ledger.ingest(conn, sf, iso(datetime.now(UTC)))
    finally:
        conn.close()


def msgs(api: FakeAnthropic) -> list[Any]:
    """Messages API requests the fake received (each a dict of the body; `.path` says where it went)."""
    return [r for r in list(api.requests) if r.path == "/v1/messages"]


def mem(name: str, typ: str, desc: str, body: str, mtime: float = 1.7e9, metadata: dict[str, Any] | None = None) -> Memory:
    return Memory(Path(f"/m/{name}.md"), name, desc, typ, body, mtime, len(body), metadata=metadata or {})


# ----------------------------------------------------------------------------- eligibility: pure table

DUE_TABLE = [
    # hours_since, sessions, min_hours, min_sessions, enabled, hours_since_failure, due, reason fragment
    (None, 9, 24, 5, True, None, False, "no memories"),
    (23.9, 9, 24, 5, True, None, False, "23.9/24 hours"),
    (24.0, 4, 24, 5, True, None, False, "4/5 sessions"),
    (24.0, 5, 24, 5, True, None, True, "24.0 hours and 5 sessions"),
    (500, 50, 24, 5, False, None, False, "disabled"),
    (48, 5, 24, 5, True, 2.0, False, "failed 2.0 h ago"),
    (48, 5, 24, 5, True, 6.0, True, "sessions since"),
    (3, 1, 2, 1, True, 1.0, False, "retried after 2 h"),  # the retry wait never exceeds minHours
    (0.0, 0, 1, 1, True, None, False, "0.0/1 hours"),
]


@pytest.mark.parametrize("hours,sessions,min_h,min_s,enabled,failed,expect,why", DUE_TABLE)
def test_dream_due_table(hours: Any, sessions: int, min_h: int, min_s: int, enabled: bool, failed: Any,
                         expect: bool, why: str) -> None:  # fmt: skip
    ok, reason = dream_due(hours, sessions, min_h, min_s, enabled, failed)
    assert ok is expect and why in reason, reason


def test_due_over_a_clock_and_real_sessions(home: Path) -> None:
    """due() against the ledger: the injected clock moves, sessions arrive; global counts every project."""
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=10)
    other = "-work-other"
    write_mem(mdir(home), "a", "alpha", "project", "alpha body", age_h=24 * 20)
    write_mem(mdir(home, None), "g", "gamma", "user", "gamma body", age_h=24 * 20)
    write_mem(mdir(home, other), "o", "omega", "project", "omega body", age_h=24 * 20)
    s = mk_settings(dream={"minHours": 24, "minSessions": 3})
    ctx = make_ctx(home, s, now=t0)
    for t in (TARGET, Target("global"), Target("project", other)):
        set_cursor(ctx.conn, "dream", str(t), {"last": iso(t0), "run": None}, iso(t0))
    # sessions: two in KEY after t0, one in KEY before t0, one in `other` after t0,
    # a sub-agent transcript and a session without any human turn (neither counts)
    write_session(home, KEY, "s1", t0 + timedelta(hours=1))
    write_session(home, KEY, "s2", t0 + timedelta(hours=30))
    write_session(home, KEY, "s0", t0 - timedelta(hours=1))
    write_session(home, other, "s3", t0 + timedelta(hours=2))
    write_session(home, KEY, "sub", t0 + timedelta(hours=3), sidechain=True)
    (home / "projects" / KEY / "quiet.jsonl").write_text(json.dumps(
        {"type": "summary", "summary": "title only", "leafUuid": "x", "timestamp": iso(t0 + timedelta(hours=4))}) + "\n")
    ingest(home)
    table = [
        # clock, expected due targets (the ledger holds s1, s2, s3 after t0 whatever the clock says)
        (t0 + timedelta(hours=23), []),  # under minHours for every scope
        (t0 + timedelta(hours=25), ["global"]),  # global: s1, s2, s3; KEY: 2/3; other: 1/3
        (t0 + timedelta(hours=31), ["global"]),
    ]
    for clock, want in table:
        ctx.now = lambda c=clock: c
        got = sorted(str(t) for t in dream.due(ctx))
        assert got == want, (clock, got, dream.due_decisions(ctx, dream.targets(ctx)))
    write_session(home, KEY, "s4", t0 + timedelta(hours=31))
    ingest(home)
    ctx.now = lambda: t0 + timedelta(hours=32)
    assert sorted(str(t) for t in dream.due(ctx)) == ["global", f"project:{KEY}"]
    assert dream.due(ctx, only=Target("project", other)) == []
    why = dream.due_decisions(ctx, [Target("project", other)])[Target("project", other)][1]
    assert "1/3 sessions" in why
    ctx.settings = mk_settings(dream={"enabled": False})
    assert dream.due(ctx) == []


def test_never_consolidated_counts_from_the_oldest_memory(home: Path) -> None:
    now = datetime.now(UTC)
    d = mdir(home)
    s = mk_settings(dream={"minHours": 24, "minSessions": 1})
    ctx = make_ctx(home, s, now=now)
    assert dream.due(ctx, only=TARGET) == []  # an empty scope is never due
    assert "no memories" in dream.due_decisions(ctx, [TARGET])[TARGET][1]
    write_mem(d, "new", "recent", "project", "b", age_h=30)
    write_session(home, KEY, "before", now - timedelta(hours=40))  # before the oldest memory: does not count
    ingest(home)
    assert "0/1 sessions" in dream.due_decisions(ctx, [TARGET])[TARGET][1]
    write_session(home, KEY, "after", now - timedelta(hours=2))
    ingest(home)
    assert dream.due(ctx, only=TARGET) == [TARGET]


def test_session_scan_is_one_cheap_query_over_10k_sessions(home: Path) -> None:
    ctx = make_ctx(home, mk_settings())
    now = datetime.now(UTC)
    rows = [(f"-p{i % 100}", f"s{i}", "/x", i % 97 != 0, iso(now - timedelta(minutes=i))) for i in range(10_000)]
    ctx.conn.executemany("INSERT INTO sessions(key, session_id, path, human_turns, last_ts) VALUES (?,?,?,?,?)", rows)
    base = {Target("global"): now - timedelta(hours=24), Target("project", "-p1"): now - timedelta(days=30)}
    t = time.perf_counter()
    got = dream.sessions_since(ctx.conn, base)
    took = time.perf_counter() - t
    assert got[Target("global")] == sum(1 for r in rows if r[3] and r[4] > iso(now - timedelta(hours=24)))
    assert got[Target("project", "-p1")] == sum(1 for r in rows if r[0] == "-p1" and r[3])
    assert took < 0.5, took


# ----------------------------------------------------------------------------- relative dates, duplicates (pure)

D = date(2026, 11, 27)  # a Friday

DATES = [
    ("We ship tomorrow.", "We ship on 2026-11-28."),
    ("Today we froze main", "On 2026-11-27 we froze main"),
    ("frozen until tomorrow", "frozen until 2026-11-28"),
    ("fixed yesterday, see today's notes", "fixed on 2026-11-26, see 2026-11-27's notes"),
    ("the release is next Monday", "the release is on Monday 2026-11-30"),
    ("decided last Friday", "decided on Friday 2026-11-20"),
    ("agreed last week", "agreed in the week of 2026-11-16"),
    ("due next month", "due in 2026-12"),
    ("3 days ago it broke", "on 2026-11-24 it broke"),
    ("review in 2 days", "review on 2026-11-29"),
    ("the day after tomorrow", "on 2026-11-29"),
    ("我们明天发布，昨天冻结", "我们2026-11-28发布，2026-11-26冻结"),
    ("上周决定", "2026-11-16 那一周决定"),
    ("keep `today` and ```\ntomorrow\n``` as code", "keep `today` and ```\ntomorrow\n``` as code"),
    ("todays and yesterdays-ish words: nothing", "todays and yesterdays-ish words: nothing"),
]


@pytest.mark.parametrize("before,after", DATES)
def test_absolutize(before: str, after: str) -> None:
    got, n = absolutize(before, D)
    assert got == after
    assert (n > 0) == (before != after)
    assert absolutize(got, D) == (got, 0)  # idempotent


def test_near_duplicates_are_grouped_by_type_and_newest_first() -> None:
    a = mem("tabs", "feedback", "indent with tabs", "Always indent with tabs in this repo. Why: history.", 100)
    b = mem("tabs-2", "feedback", "Indent with TABS", "Always indent with tabs in this repo!  Why: history", 300)
    c = mem("tabs-user", "user", "indent with tabs", "Always indent with tabs in this repo. Why: history.", 200)
    x = mem("deploy", "feedback", "deploy on fridays", "Never deploy on Fridays; the on-call is thin.", 50)
    groups = near_duplicate_groups([a, b, c, x])
    assert [[m.name for m in g] for g in groups] == [["tabs-2", "tabs"]]
    assert similarity(tokens("a b c d e f g h i j"), tokens("a b c d e f g h i k")) == pytest.approx(0.9)
    assert near_duplicate_groups([a, mem("t3", "feedback", "tabs", "completely different words here", 400)]) == []


@hsettings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=14), min_size=2, max_size=9))
def test_prefix_filter_never_misses_a_similar_pair(docs: list[list[str]]) -> None:
    """The candidate filter is exact: every pair at or over the threshold is a candidate."""
    cands = dream._candidates(docs, 0.85)
    for i in range(len(docs)):
        for j in range(i):
            if similarity(docs[j], docs[i]) >= 0.85:
                assert j in cands.get(i, set()), (docs[j], docs[i])


# ----------------------------------------------------------------------------- validation and guardrails (pure)


def _rules(tmp_path: Path, memories: list[Memory], **kw: Any) -> Rules:
    return Rules("project", tmp_path, taken=frozenset(m.path.name for m in memories), **kw)


def test_validation_refuses_paths_unknown_sources_and_collisions(tmp_path: Path) -> None:
    ms = [mem("alpha", "project", "a", "A"), mem("beta", "project", "b", "B"), mem("gamma", "user", "g", "G")]
    ops = [
        op_path_traversal(),  # add named ../../.bashrc
        op_absolute_path(),  # add named /etc/passwd
        {"op": "delete", "name": "../alpha.md", "reason": "x"},
        {"op": "merge", "sources": ["alpha", "../../etc/passwd"], "name": "ab", "description": "d", "type": "project", "body": "b"},
        {"op": "merge", "sources": ["alpha"], "name": "ab", "description": "d", "type": "project", "body": "b"},
        {"op": "merge", "sources": ["alpha", "beta"], "name": "gamma", "description": "d", "type": "project", "body": "b"},
        {"op": "merge", "sources": ["alpha", "beta"], "name": "/abs/x", "description": "d", "type": "project", "body": "b"},
        {"op": "update", "name": "nope", "description": "d", "type": "project", "body": "b"},
        {"op": "delete", "name": "beta", "scope": "global", "reason": "wrong scope"},
        {"op": "merge", "sources": ["alpha", "BETA"], "name": "alpha", "description": "both", "type": "project", "body": "A+B", "reason": "same"},
        {"op": "delete", "name": "beta", "reason": "already merged"},
        {"op": "delete", "name": "gamma.md", "reason": "stale"},
        {"op": "add", "name": "MEMORY", "description": "d", "type": "project", "body": "b"},
    ]
    accepted, rejected = dream.validate_dream({"operations": ops}, ms, _rules(tmp_path, ms))
    assert [(o.op, o.files, o.result) for o in accepted] == [
        ("merge", ("alpha.md", "beta.md"), "alpha.md"), ("delete", ("gamma.md",), None),
        ("add", (), accepted[-1].result),
    ]  # fmt: skip
    assert accepted[-1].result != "MEMORY.md" and str(accepted[-1].result).endswith(".md")
    reasons = dict(rejected)
    assert "path" in reasons[0] and "path" in reasons[1] and "path" in reasons[2]
    assert "not a memory of this scope" in reasons[3] and "2 to" in reasons[4]
    assert "not among the sources" in reasons[5] and "merge result" in reasons[6]
    assert "not a memory" in reasons[7] and "scope" in reasons[8] and "already changed by operation 9" in reasons[10]
    with pytest.raises(ModelOutputError):
        dream.validate_dream({"ops": []}, ms, _rules(tmp_path, ms))


def test_validation_protects_hand_edits_and_unshown_memories(tmp_path: Path) -> None:
    ms = [mem("mine", "user", "u", "U"), mem("big", "project", "p", "P"), mem("free", "project", "f", "F")]
    rules = _rules(tmp_path, ms, protected=frozenset({"mine.md"}), unshown=frozenset({"big.md"}))
    ops = [{"op": "delete", "name": "mine"}, {"op": "delete", "name": "big", "reason": "r"},
           {"op": "update", "name": "mine", "description": "u2", "type": "user", "body": "U2", "reason": "user said so in s3"},
           {"op": "update", "name": "free", "description": "f", "type": "project", "body": "F"}]  # fmt: skip
    accepted, rejected = dream.validate_dream({"operations": ops}, ms, rules)
    assert [o.name for o in accepted] == ["mine"]
    reasons = dict(rejected)
    assert "edited by hand" in reasons[0] and "not shown" in reasons[1] and "changes nothing" in reasons[3]


GUARD = [
    # deletes (file names), merges (sources, result), force, refused fragment
    (["a"], [], False, None),
    (["a", "b"], [], False, None),  # 2/5 = 40%
    (["a", "b", "c"], [], False, "3 of 5"),
    ([], [(("a", "b", "c", "d"), "a")], False, "3 of 5"),  # merge sources not kept count as deletes
    ([], [(("a", "b", "c", "d"), "new")], True, None),
    (["u"], [], False, "every user memory"),
    (["u"], [], True, None),
    (["a", "b", "c", "d", "u"], [], True, "all 5 memories"),  # even forced
]


@pytest.mark.parametrize("deletes,merges,force,refused", GUARD)
def test_guard_table(deletes: list[str], merges: list[Any], force: bool, refused: str | None) -> None:
    ms = [mem(n, "user" if n == "u" else "project", n, n) for n in "abcdu"]
    ops = [DreamOp("delete", n, files=(f"{n}.md",)) for n in deletes]
    ops += [DreamOp("merge", r, "d", "project", "b", "", tuple(f"{s}.md" for s in src), f"{r}.md") for src, r in merges]
    why = guard(ms, ops, max_share=0.5, force=force)
    assert (why is None) if refused is None else (why is not None and refused in why), why


def test_hand_edit_detection() -> None:
    last = datetime(2026, 11, 1, tzinfo=UTC)
    t = last.timestamp()
    memd_meta = {"source": "memd", "updated": iso(datetime.fromtimestamp(t + 100, UTC))}
    ms = [
        mem("memd-written", "user", "d", "b", t + 100, memd_meta),
        mem("memd-then-hand", "user", "d", "b", t + 5000, memd_meta),
        mem("hand-new", "user", "d", "b", t + 10),
        mem("hand-old", "user", "d", "b", t - 10),
    ]
    assert dream.hand_edited(ms, last) == {"memd-then-hand.md", "hand-new.md"}
    assert dream.hand_edited(ms, None) == {"memd-then-hand.md", "hand-new.md", "hand-old.md"}


# ----------------------------------------------------------------------------- offline runs


def _offline_scope(home: Path) -> Path:
    d = mdir(home)
    write_mem(d, "tabs", "the user indents with tabs here", "feedback", "Use tabs, not spaces. Why: history uses tabs.", age_h=72)
    write_mem(d, "tabs-2", "The user indents with tabs here", "feedback", "Use tabs, not spaces! Why: history uses tabs", age_h=30)
    write_mem(d, "freeze", "deploy freeze", "project", "We freeze deploys tomorrow, until next Monday.", age_h=24 * 3)
    write_mem(d, "board", "the team board", "reference", "See https://example.com/board, updated yesterday.", age_h=50, memd=False)  # by hand
    write_mem(d, "board-copy", "the team board", "reference", "See https://example.com/board, updated yesterday!", age_h=40)
    return d


def test_offline_merges_near_duplicates_and_absolutises_dates_hand_edits_kept(home: Path) -> None:
    d = _offline_scope(home)
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
    runs = history.list_runs(Home(home), ScopeRef("project", KEY))
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
    target = Target("global") if key is None else Target("project", key)
    ref = ScopeRef("global") if key is None else ScopeRef("project", key)
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
    assert "failed" in dream.due_decisions(ctx, [TARGET])[TARGET][1]
    r = run_job(ctx, dream, TARGET, force=True)
    assert r.outcome == "ok" and r.details["merged"] == 1, r
    assert sorted(files_of(d)) == ["MEMORY.md", "dup-0.md", "other.md"]


# ----------------------------------------------------------------------------- the model path (real client, fake API)


def _model_scope(home: Path) -> Path:
    d = mdir(home)
    write_mem(d, "pnpm", "the project uses pnpm", "project", "Use pnpm, not npm. Why: lockfile.", age_h=80)
    write_mem(d, "pnpm-ci", "CI installs with pnpm", "project", "CI runs pnpm install --frozen-lockfile.", age_h=70)
    write_mem(d, "node", "node version", "project", "Node 18 until tomorrow, then Node 22.", age_h=60)
    write_mem(d, "staging-url", "staging dashboard", "reference", "https://staging.example.com", age_h=50)
    write_mem(d, "mine", "my own note", "project", "Written by the user by hand.", age_h=40, memd=False)
    refresh_dir(Home(home), "project", KEY, d)
    return d


def _model_ctx(home: Path, api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch, **memd: Any) -> JobContext:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    return make_ctx(home, mk_settings("anthropic", memd=memd), url=api.base_url)


def test_model_merge_update_delete_applied_with_history(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _model_scope(home)
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
    run = history.list_runs(Home(home), ScopeRef("project", KEY))[-1]
    assert run["changes"]["deleted"] == [{"name": "staging-url", "file": "staging-url.md", "reason": "staging was retired"}]
    assert files_of(Path(run["path"]) / "files") == before  # the snapshot is the scope before the run


def test_model_answer_deleting_everything_is_refused(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _model_scope(home)
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
    d = _model_scope(home)
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
    d = _model_scope(home)
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
    d = _model_scope(home)

    def responder(body: dict[str, Any]) -> Any:
        (d / "node.md").write_text((d / "node.md").read_text().replace("Node 18", "Node 20"))
        return ops_reply({"op": "delete", "name": "pnpm-ci", "reason": "folded"})

    with FakeAnthropic(responder=responder) as api:
        ctx = _model_ctx(home, api, monkeypatch)
        r = run_job(ctx, dream, TARGET, force=True)
    assert r.outcome == "deferred" and "changed during the run" in r.reason, r
    assert (d / "pnpm-ci.md").exists() and "Node 20" in (d / "node.md").read_text()
    assert history.list_runs(Home(home)) == [] and not list(d.parent.glob(".memory*"))
    assert "last" not in (get_cursor(ctx.conn, "dream", str(TARGET)) or {})


def test_special_file_in_the_scope_fails_clearly(home: Path) -> None:
    d = _offline_scope(home)
    os.mkfifo(d / "pipe")
    before = files_of(d)
    r = run_job(make_ctx(home, mk_settings()), dream, TARGET, force=True)
    assert r.outcome == "failed" and "not a regular file" in r.reason, r
    assert files_of(d) == before and (d / "pipe").exists()
    assert not list(d.parent.glob(".memory*")) and not any((home / "memd" / "history").glob("*/*"))


# ----------------------------------------------------------------------------- undo


def test_undo_restores_bytes_exactly_and_is_itself_undoable(home: Path) -> None:
    d = _offline_scope(home)
    (d / "notes.txt").write_bytes(b"\x00\x01 not a memory, kept as it is")
    refresh_dir(Home(home), "project", KEY, d)
    before, mt_before = files_of(d), mtimes_of(d)
    s = mk_settings(memd={"historyKeep": 3})
    (home / "settings.json").write_text(json.dumps({"memd": {"provider": "offline", "historyKeep": 3}}))
    ctx = make_ctx(home, s)
    assert run_job(ctx, dream, TARGET, force=True).outcome == "ok"
    dreamt = files_of(d)
    assert dreamt != before
    h, ref = Home(home), ScopeRef("project", KEY)
    info = history.undo(h, s, ref, None, now=datetime.now(UTC), lock_timeout=5)
    assert files_of(d) == before and mtimes_of(d) == mt_before
    assert info["kind"] == "undo" and set(info["changes"]["brought_back"]) == {"tabs.md"}
    # undo the undo: back to what the dream wrote
    history.undo(h, s, ref, info["run"], now=datetime.now(UTC), lock_timeout=5)
    assert files_of(d) == dreamt
    # the CLI: history lists all three, undo by run id restores the original again, retention keeps 3
    first = history.list_runs(h, ref)[0]["run"]
    out = subprocess.run([*memd_cmd(), "--home", str(home), "history", "--project", KEY, "--json"],
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    runs = json.loads(out.stdout)
    assert [r["kind"] for r in runs] == ["dream", "undo", "undo"] and runs[0]["counts"]["merged"] == 1
    out = subprocess.run([*memd_cmd(), "--home", str(home), "undo", first], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "restored as before" in out.stdout
    assert files_of(d) == before
    assert history.list_runs(h, ref)[0]["run"] != first  # pruned to historyKeep=3
    assert len(history.list_runs(h, ref)) == 3
    bad = subprocess.run([*memd_cmd(), "--home", str(home), "undo"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "--project" in bad.stderr


# ----------------------------------------------------------------------------- recovery, each crash point


def _crash_state(home: Path, point: str) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """Lay out what a crash at `point` leaves; returns (old, new) file sets."""
    h, ref = Home(home), ScopeRef("project", KEY)
    d = mdir(home)
    write_mem(d, "a", "a", "project", "old a")
    write_mem(d, "b", "b", "project", "old b")
    old = files_of(d)
    run_id = history.new_run_id(datetime.now(UTC))
    if point == "mid-snapshot":
        (h.history_dir / ref.name / run_id / "files").mkdir(parents=True)
        return old, {}
    entry = history.snapshot(h, ref, run_id)
    staging = history.stage(h, ref, run_id, source=d, link=True).path
    (staging / "a.md").unlink()
    (staging / "b.md").unlink()  # staged files are hard links of the live ones: never write through them
    (staging / "b.md").write_text("new b")
    new = files_of(staging)
    if point == "staged":
        return old, new
    history.write_run_info(entry, {"run": run_id, "scope": str(ref), "kind": "dream", "changes": {}})
    if point == "recorded":
        return old, new
    history._write_journal(h, ref, {"scope": str(ref), "run": run_id, "had_memory": True})
    if point == "journal":
        return old, new
    os.rename(d, history.old_dir(h, ref, run_id))
    if point == "moved-old":
        return old, new
    os.rename(staging, d)
    if point == "committed":
        return old, new
    shutil.rmtree(history.old_dir(h, ref, run_id))
    return old, new


@pytest.mark.parametrize("point,expect", [
    ("mid-snapshot", "old"), ("staged", "old"), ("recorded", "old"), ("journal", "old"), ("moved-old", "old"),
    ("committed", "new"), ("old-removed", "new"),
])  # fmt: skip
def test_recovery_at_every_crash_point(home: Path, point: str, expect: str) -> None:
    old, new = _crash_state(home, point)
    # what a crash leaves is never taken for a memory directory, nor its files for memories
    assert all(p.name == "memory" for _s, _k, p in list_memory_dirs(Home(home)))
    for leftover in (home / "projects" / KEY).glob(".memory.*"):
        assert classify_path(Home(home), leftover / "a.md").kind == "other"
    done = dream.recover(Home(home))
    assert done and done[0]["scope"] == f"project:{KEY}"
    d = home / "projects" / KEY / "memory"
    assert files_of(d) == (old if expect == "old" else new)
    assert not list(d.parent.glob(".memory*")) and not list((home / "memd" / "swaps").glob("*.json"))
    runs = history.list_runs(Home(home))
    assert len(runs) == (1 if expect == "new" else 0)
    assert dream.recover(Home(home)) == []  # idempotent
    assert [s for s, _k, _p in list_memory_dirs(Home(home))] == ["global", "project"]


# ----------------------------------------------------------------------------- real processes

CHILD = r"""
import json, sys
from datetime import UTC, datetime
from memd import settings as st
from memd.context import make_context
from memd.jobctx import Target
from memd.logs import configure, get_logger
from memd.runner import run_job
from memd.tree import Home
import jobs.dream as dream
from pathlib import Path
home = Home(Path(sys.argv[1])); timeout = float(sys.argv[2]); force = sys.argv[3] == "1"
fixed = sys.argv[4] if len(sys.argv) > 4 else ""
s = st.load(home.settings_file)
configure(home, level="info", stderr_level="error")
now = (lambda: datetime.fromisoformat(fixed)) if fixed else (lambda: datetime.now(UTC))
ctx = make_context(home, s, log=get_logger("child"), now=now)
print("go", flush=True)
r = run_job(ctx, dream, Target.parse(sys.argv[5] if len(sys.argv) > 5 else "project:-work-proj"), force=force, lock_timeout=timeout)
print(json.dumps({"outcome": r.outcome, "reason": r.reason}), flush=True)
"""


def _child(home: Path, timeout: float, force: bool, fixed: str = "", env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(home), str(timeout), "1" if force else "0", fixed],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env=env or dict(os.environ))  # fmt: skip


def _result(p: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = p.communicate(timeout=60)
    lines = [x for x in out.splitlines() if x.startswith("{")]
    assert lines, err[-2000:]
    return json.loads(lines[-1])


def test_two_processes_one_dream(home: Path) -> None:
    """Two daemons' worth of dreams race on one scope: exactly one runs; a third, not waiting, is deferred."""
    d = _model_scope(home)
    write_session(home, KEY, "s1", datetime.now(UTC) - timedelta(hours=1))
    ingest(home)
    gate = threading.Event()

    def responder(body: dict[str, Any]) -> Any:
        gate.wait(30)
        return ops_reply({"op": "delete", "name": "pnpm-ci", "reason": "folded into pnpm"})

    with FakeAnthropic(responder=responder) as api:
        (home / "settings.json").write_text(json.dumps({
            "memory": {"dream": {"minHours": 1, "minSessions": 1}},
            "memd": {"provider": "anthropic", "baseUrl": api.base_url, "maxRetries": 0},
        }))  # fmt: skip
        env = {**os.environ, "ANTHROPIC_API_KEY": "test-key"}
        a, b = _child(home, 30, False, env=env), _child(home, 30, False, env=env)
        try:
            deadline = time.monotonic() + 30
            while not msgs(api) and time.monotonic() < deadline and (a.poll() is None or b.poll() is None):
                time.sleep(0.02)
            assert msgs(api), "no dream reached the model"
            c = _result(_child(home, 0, True, env=env))  # while the lock is held, even forced: deferred
            gate.set()
            ra, rb = _result(a), _result(b)
        finally:
            gate.set()
            for p in (a, b):
                if p.poll() is None:
                    p.kill()
        assert len(msgs(api)) == 1
    assert c["outcome"] == "deferred" and c["reason"].startswith("lock busy"), c
    outcomes = sorted([ra["outcome"], rb["outcome"]])
    assert outcomes == ["ok", "skipped"], (ra, rb)
    assert "not due" in (ra if ra["outcome"] == "skipped" else rb)["reason"]
    assert not (d / "pnpm-ci.md").exists() and len(history.list_runs(Home(home))) == 1


def test_kill_9_during_apply_leaves_old_or_new(home: Path) -> None:
    """A dream over 300 files, killed at random moments (≥ 20 of them while it runs), then recovered."""
    d = mdir(home)
    for i in range(150):
        write_mem(d, f"note-{i:03d}", f"note {i} about topic {i}", "project",
                  f"Topic {i}: we decided this yesterday; review it next week. " + "detail " * (i % 7), age_h=40)
        write_mem(d, f"note-{i:03d}-copy", f"note {i} about topic {i}", "project",
                  f"Topic {i}: we decided this yesterday; review it next week! " + "detail " * (i % 7), age_h=30)  # fmt: skip
    (home / "settings.json").write_text(json.dumps({"memd": {"provider": "offline", "dreamMaxDeleteShare": 1.0}}))
    refresh_dir(Home(home), "project", KEY, d)
    pristine = home.parent / "pristine"
    shutil.copytree(d, pristine)
    old = files_of(d)
    fixed = datetime.now(UTC).replace(microsecond=0).isoformat()

    def reset() -> None:
        shutil.rmtree(d)
        shutil.copytree(pristine, d)
        shutil.rmtree(home / "memd" / "history", ignore_errors=True)

    p = _child(home, 10, True, fixed)
    assert p.stdout is not None and p.stdout.readline().strip() == "go"
    went = time.monotonic()
    assert _result(p)["outcome"] == "ok"
    run_s = time.monotonic() - went
    new = files_of(d)
    assert new != old and len(new) < len(old)
    rng = random.Random(7)
    live_kills, seen, phases = 0, {"old": 0, "new": 0}, Counter[str]()
    for i in range(48):
        reset()
        p = _child(home, 10, True, fixed)
        assert p.stdout is not None and p.stdout.readline().strip() == "go"
        # one kill in four at any moment of the run; the others a random moment after a step of
        # the apply begins (the snapshot, the staging copy, the journal), found by watching the disk
        trigger = TRIGGERS[i % len(TRIGGERS)]
        if trigger == "anytime":
            time.sleep(rng.uniform(0, run_s))
        else:
            _wait_for(trigger, home, d, p, run_s * 3)
            time.sleep(rng.uniform(0, {"snapshot": 0.004, "staging": 0.02, "journal": 0.002}[trigger]))
        alive = p.poll() is None
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=30)
        live_kills += alive
        phases[_left_behind(home, d)] += 1
        history.recover(Home(home), lock_timeout=5)
        now_files = files_of(d)
        assert now_files in (old, new), sorted(set(now_files) ^ set(old))[:5]
        state_ = "old" if now_files == old else "new"
        seen[state_] += 1
        assert not list(d.parent.glob(".memory*")) and not list((home / "memd" / "swaps").glob("*.json"))
        runs = history.list_runs(Home(home))
        if state_ == "new":
            assert len(runs) == 1 and files_of(Path(runs[0]["path"]) / "files") == old
        else:
            assert runs == []
        if live_kills >= 24 and seen["old"] and seen["new"]:
            break
    print(f"run {run_s:.2f} s; kills while running: {live_kills}; outcomes: {seen}; left behind: {dict(phases)}")
    assert live_kills >= 20 and seen["old"] and seen["new"], (live_kills, seen)


TRIGGERS = ("anytime", "snapshot", "staging", "journal")


def _wait_for(step: str, home: Path, d: Path, p: subprocess.Popen[str], limit: float) -> None:
    """Poll (0.2 ms) until a step of the apply shows on disk, or the child ends."""
    probe = {
        "snapshot": lambda: any((home / "memd" / "history").glob("*/*")),
        "staging": lambda: any(d.parent.glob(".memory.dream-*")),
        "journal": lambda: any((home / "memd" / "swaps").glob("*.json")),
    }[step]
    deadline = time.monotonic() + limit
    while p.poll() is None and time.monotonic() < deadline and not probe():
        time.sleep(0.0002)


def _left_behind(home: Path, d: Path) -> str:
    """What a kill left for recovery: the furthest step of the swap protocol it reached."""
    if list(d.parent.glob(".memory.old-*")):
        return "mid-swap"
    if list((home / "memd" / "swaps").glob("*.json")):
        return "journal"
    if list(d.parent.glob(".memory.dream-*")):
        return "staging"
    root = home / "memd" / "history"
    if root.exists() and any(not (e / "run.json").exists() for e in root.glob("*/*")):
        return "snapshot"
    return "nothing"
