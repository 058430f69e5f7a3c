"""Due-ness: the pure table, then `due()` over a clock and real sessions in the ledger."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from jobs import dream
from jobs.dream.eligibility import dream_due, due_decisions, sessions_since
from memd.clock import iso
from memd.job.context import set_cursor
from memd.tree import Place
from tests.jobs.dream.helpers import (
    KEY,
    TARGET,
    ingest,
    make_ctx,
    mdir,
    mk_settings,
    write_mem,
    write_session,
)

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
    for t in (TARGET, Place("global"), Place("project", other)):
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
        assert got == want, (clock, got, due_decisions(ctx, dream.targets(ctx)))
    write_session(home, KEY, "s4", t0 + timedelta(hours=31))
    ingest(home)
    ctx.now = lambda: t0 + timedelta(hours=32)
    assert sorted(str(t) for t in dream.due(ctx)) == ["global", f"project:{KEY}"]
    assert dream.due(ctx, only=Place("project", other)) == []
    why = due_decisions(ctx, [Place("project", other)])[Place("project", other)][1]
    assert "1/3 sessions" in why
    ctx.settings = mk_settings(dream={"enabled": False})
    assert dream.due(ctx) == []


def test_never_consolidated_counts_from_the_oldest_memory(home: Path) -> None:
    now = datetime.now(UTC)
    d = mdir(home)
    s = mk_settings(dream={"minHours": 24, "minSessions": 1})
    ctx = make_ctx(home, s, now=now)
    assert dream.due(ctx, only=TARGET) == []  # an empty scope is never due
    assert "no memories" in due_decisions(ctx, [TARGET])[TARGET][1]
    write_mem(d, "new", "recent", "project", "b", age_h=30)
    write_session(home, KEY, "before", now - timedelta(hours=40))  # before the oldest memory: does not count
    ingest(home)
    assert "0/1 sessions" in due_decisions(ctx, [TARGET])[TARGET][1]
    write_session(home, KEY, "after", now - timedelta(hours=2))
    ingest(home)
    assert dream.due(ctx, only=TARGET) == [TARGET]


def test_session_scan_is_one_cheap_query_over_10k_sessions(home: Path) -> None:
    ctx = make_ctx(home, mk_settings())
    now = datetime.now(UTC)
    rows = [(f"-p{i % 100}", f"s{i}", "/x", i % 97 != 0, iso(now - timedelta(minutes=i))) for i in range(10_000)]
    ctx.conn.executemany("INSERT INTO sessions(key, session_id, path, human_turns, last_ts) VALUES (?,?,?,?,?)", rows)
    base = {Place("global"): now - timedelta(hours=24), Place("project", "-p1"): now - timedelta(days=30)}
    t = time.process_time()  # CPU time: a loaded machine stretches wall time, not the work done here
    got = sessions_since(ctx.conn, base)
    took = time.process_time() - t
    assert got[Place("global")] == sum(1 for r in rows if r[3] and r[4] > iso(now - timedelta(hours=24)))
    assert got[Place("project", "-p1")] == sum(1 for r in rows if r[0] == "-p1" and r[3])
    assert took < 0.5, took


def test_a_scope_whose_memories_are_dated_2099_becomes_due_minhours_after_it_was_first_seen(home: Path) -> None:
    """Issue 23: a future mtime is clamped to when it was first found, and kept; not to every look's now."""
    d = mdir(home)
    p = write_mem(d, "a", "alpha", "project", "alpha body")
    future = datetime(2099, 1, 1, tzinfo=UTC).timestamp()
    os.utime(p, (future, future))
    s = mk_settings(dream={"minHours": 24, "minSessions": 1})
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=48)
    write_session(home, KEY, "s1", t0 + timedelta(hours=47))
    ingest(home)
    ok, why = due_decisions(make_ctx(home, s, now=t0), [TARGET])[TARGET]
    assert not ok and "0.0/24 hours" in why, why
    ok, why = due_decisions(make_ctx(home, s, now=t0 + timedelta(hours=25)), [TARGET])[TARGET]
    assert ok, why


def test_a_transcript_dated_2099_counts_once_and_never_blocks_the_scope(home: Path) -> None:
    write_mem(mdir(home), "a", "alpha", "project", "alpha body", age_h=24 * 20)
    write_session(home, KEY, "s-future", datetime(2099, 1, 1, tzinfo=UTC))
    ingest(home)
    s = mk_settings(dream={"minHours": 24, "minSessions": 1})
    now = datetime.now(UTC) + timedelta(minutes=1)
    ok, why = due_decisions(make_ctx(home, s, now=now), [TARGET])[TARGET]
    assert ok, why
    ctx = make_ctx(home, s, now=now)
    set_cursor(ctx.conn, "dream", str(TARGET), {"last": iso(now), "run": None}, iso(now))
    ok, why = due_decisions(make_ctx(home, s, now=now + timedelta(hours=30)), [TARGET])[TARGET]
    assert not ok and "0/1 sessions" in why, why  # counted once, before the consolidation


def test_the_oldest_memory_from_the_scans_stats_is_the_one_a_listing_finds(home: Path) -> None:
    """A run takes a never-consolidated scope's baseline from the stats its scan took (`oldest_in`):
    the same mtime `oldest_memory_mtime` finds by listing, whatever else the directory holds (an
    older file that is not a memory, an older sub-directory, a link to an older file)."""
    from jobs.dream.eligibility import oldest_in, oldest_memory_mtime  # noqa: PLC0415 - the pair compared
    from memd.memory.scan import scan_dir  # noqa: PLC0415 - what a run reads with

    d = mdir(home)
    write_mem(d, "a", "alpha", "project", "alpha body", age_h=30)
    write_mem(d, "b", "beta", "project", "beta body", age_h=50)
    (d / "broken.md").write_text("---\nname: [\n---\n")
    os.utime(d / "broken.md", (time.time() - 40 * 3600,) * 2)
    for older in ("notes.txt", "sub"):
        (d / older).mkdir() if older == "sub" else (d / older).write_text("x")
        os.utime(d / older, (time.time() - 90 * 3600,) * 2)
    (d / "old-target.md").write_text("not in the scope")
    os.utime(d / "old-target.md", (time.time() - 99 * 3600,) * 2)
    (d / "link.md").symlink_to(d / "old-target.md")
    (d / "old-target.md").rename(home / "old-target.md")
    stats: dict[str, os.stat_result] = {}
    scan_dir(d, "project", KEY, stats=stats)
    assert oldest_in(stats) == oldest_memory_mtime(d) == (d / "b.md").stat().st_mtime
    assert oldest_in({}) is None
