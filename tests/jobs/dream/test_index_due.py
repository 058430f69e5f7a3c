"""Issue 26 pt 4: an oversized MEMORY.md asks for a dream whatever the session count (still at most
once per minHours), and dream's prompt names the size to reach."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobs import dream
from jobs.dream.eligibility import IndexSize, due_decisions, index_due
from jobs.dream.prompt import build_prompt
from memd.clock import iso
from memd.index.refresh import refresh_all
from memd.job.context import set_cursor
from memd.tree import Home
from tests.jobs.dream.helpers import KEY, TARGET, make_ctx, mdir, mk_settings, write_mem


def test_index_due_table() -> None:
    big, wide, small = IndexSize(201, 9_000), IndexSize(120, 25_001), IndexSize(200, 25_000)
    assert index_due(30.0, small, 24) is None  # within budget: the session rule decides
    assert index_due(10.0, big, 24) is None  # still at most once per minHours
    assert index_due(30.0, big, 24, hours_since_failure=1.0) is None  # the failure back-off holds
    ok, why = index_due(30.0, big, 24) or (False, "")
    assert ok and "201 lines" in why and "200 lines / 25 KB" in why
    assert index_due(30.0, wide, 24) is not None


def _scope_with(home: Path, n: int) -> None:
    for i in range(n):
        write_mem(mdir(home), f"m{i:03d}", f"decision number {i} about the billing service", "project", f"body {i}",
                  age_h=24 * 20)  # fmt: skip
    refresh_all(Home(home))


def test_an_oversized_index_is_due_without_any_session(home: Path) -> None:
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
    _scope_with(home, 205)
    lines = (mdir(home) / "MEMORY.md").read_text().count("\n")
    assert lines > 200, lines
    ctx = make_ctx(home, mk_settings(dream={"minHours": 24, "minSessions": 5}), now=t0)
    set_cursor(ctx.conn, "dream", str(TARGET), {"last": iso(t0), "run": None}, iso(t0))
    ctx.now = lambda: t0 + timedelta(hours=12)
    assert dream.due(ctx, only=TARGET) == []  # minHours still holds
    ctx.now = lambda: t0 + timedelta(hours=25)
    assert dream.due(ctx, only=TARGET) == [TARGET]  # 0 sessions since, but the index is over budget
    assert "MEMORY.md is over budget" in due_decisions(ctx, [TARGET])[TARGET][1]


def test_a_small_index_still_waits_for_sessions(home: Path) -> None:
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
    _scope_with(home, 5)
    ctx = make_ctx(home, mk_settings(dream={"minHours": 24, "minSessions": 5}), now=t0 + timedelta(hours=25))
    set_cursor(ctx.conn, "dream", str(TARGET), {"last": iso(t0), "run": None}, iso(t0))
    assert dream.due(ctx, only=TARGET) == []
    assert "0/5 sessions" in due_decisions(ctx, [TARGET])[TARGET][1]


def test_the_prompt_names_the_size_to_reach(home: Path) -> None:
    _scope_with(home, 205)
    index = (mdir(home) / "MEMORY.md").read_text()
    user, _ = build_prompt(f"the memory of project {KEY}", datetime(2026, 12, 1).date(), index, [], set(), [])
    assert "## Size to reach" in user and "over its budget" in user
    assert "at most 200 lines and 25 KB" in user
    small, _ = build_prompt("x", datetime(2026, 12, 1).date(), "# Memory\n\n- [a](a.md) — a\n", [], set(), [])
    assert "keep it within at most 200 lines and 25 KB" in small and "over its budget" not in small
