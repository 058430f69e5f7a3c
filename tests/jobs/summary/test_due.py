"""Due-ness: the thresholds as a table, and the due positions on the corpus against an independent count."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import summary
from jobs.summary.trigger import Cursor, Facts, Thresholds, summary_due
from memd.discovery import SessionFile
from memd.job.context import JobContext, get_cursor
from memd.job.runner import run_job
from memd.ledger import store as ledger
from memd.tree import Place
from tests.conftest import corpus_sessions, require_corpus
from tests.jobs.summary.kit import (
    NOW_ISO,
    SMALL,
    SMALL_SETTINGS,
    assert_whole,
    expected_due_lines,
    first_request,
    make_ctx,
    make_settings,
    offline_llm,
    squash,
)

DUE_TABLE = [
    # (facts, cursor, thresholds, due, reason fragment)
    (Facts(100, 1999, 9, True), None, SMALL, False, "first summary at 2000"),
    (Facts(100, 2000, 3, False), None, SMALL, True, "first summary"),
    (Facts(100, 2000, 0, True), None, SMALL, True, "natural break"),
    (Facts(100, 2000, 2, False), None, SMALL, False, "no natural break"),
    (Facts(100, 2500, 2, True, tool_pending=1), None, SMALL, False, "no natural break"),
    (Facts(200, 2999, 99, True), Cursor(100, 2000, 3), SMALL, False, "999 new tokens"),
    (Facts(200, 3000, 6, False), Cursor(100, 2000, 3), SMALL, True, "3 tool calls"),
    (Facts(200, 3000, 5, False), Cursor(100, 2000, 3), SMALL, False, "2 tool calls"),
    (Facts(200, 3000, 3, True), Cursor(100, 2000, 3), SMALL, True, "natural break"),
    (Facts(200, 9000, 90, True), Cursor(100, 2000, 3), Thresholds(enabled=False), False, "disabled"),
    (Facts(200, 6999, 0, False), Cursor(100, 2000, 0), Thresholds(tool_calls_between=0), False, "update at 5000"),
    (Facts(200, 9000, 0, False), Cursor(100, 2000, 0), Thresholds(min_update_tokens=7000, tool_calls_between=0),
     True, "0 tool calls"),
    # The transcript was rewritten (offset went back): the first-summary rule applies again.
    (Facts(50, 1500, 9, True), Cursor(100, 2000, 3), SMALL, False, "first summary at 2000"),
    (Facts(50, 2100, 9, True), Cursor(100, 2000, 3), SMALL, True, "first summary"),
    # Default thresholds: 10,000 then 5,000 more.
    (Facts(1, 9999, 50, True), None, Thresholds(), False, "first summary at 10000"),
    (Facts(1, 10000, 50, True), None, Thresholds(), True, "first summary"),
    (Facts(9, 14999, 90, True), Cursor(1, 10000, 50), Thresholds(), False, "update at 5000"),
    (Facts(9, 15000, 53, False), Cursor(1, 10000, 50), Thresholds(), True, "update"),
]


@pytest.mark.parametrize(("facts", "cursor", "th", "want", "why"), DUE_TABLE)
def test_due_table(facts: Facts, cursor: Cursor | None, th: Thresholds, want: bool, why: str) -> None:
    got, reason = summary_due(facts, cursor, th)
    assert got is want, reason
    assert why in reason


def test_thresholds_from_settings_and_pause_does_not_stop_summaries() -> None:
    assert Thresholds.of(make_settings(SMALL_SETTINGS)) == SMALL
    assert not Thresholds.of(make_settings({"enabled": False})).enabled
    assert not Thresholds.of(make_settings(enabled=False)).enabled
    # Nothing about pause is a threshold: a paused session's facts decide alone.
    assert summary_due(Facts(1, 2000, 3, False), None, Thresholds.of(make_settings(SMALL_SETTINGS)))[0]


def replay_due_lines(src: Path, home: Path) -> tuple[list[int], JobContext, Place]:
    """Append the transcript line by line as an agent would; ingest, ask `due`, run what is due."""
    key = "-replay"
    dst = home / "projects" / key / src.name
    dst.parent.mkdir(parents=True)
    ctx = make_ctx(home, make_settings(SMALL_SETTINGS), offline_llm)
    sf = SessionFile(key, src.stem, str(dst))
    target = Place("session", key, src.stem)
    got = []
    raw = src.read_bytes()
    with open(dst, "ab") as out:
        for n, line in enumerate(raw.splitlines(keepends=True), 1):
            out.write(line)
            out.flush()
            ledger.ingest(ctx.conn, sf, NOW_ISO)
            todo = summary.due(ctx)
            assert todo in ([], [target])
            if todo:
                result = run_job(ctx, summary, target)
                assert result.outcome == "ok", result
                got.append(n)
    return got, ctx, target


@pytest.mark.parametrize("src", corpus_sessions(), ids=lambda p: f"{p.parent.name}/{p.name[:20]}")
def test_due_positions_on_the_corpus_match_an_independent_count(src: Path, tmp_path: Path) -> None:
    require_corpus()
    got, ctx, target = replay_due_lines(src, tmp_path / "h")
    want = expected_due_lines(src, 2000, 1000, 3)
    assert got == want
    path = ctx.home.summary_file(target.key or "", target.session_id or "")
    if not want:
        assert not path.exists()  # under minInitTokens (or a sub-agent file): never a summary
        return
    doc = assert_whole(path.read_text())
    if b'"compact_boundary"' in src.read_bytes():
        # A compaction does not reset the summary: what was asked before it is still there.
        assert squash(first_request(src))[:60] in squash(doc.sections["task"])
    # Idempotent: once a forced run took in the not-yet-due tail, nothing new means nothing done.
    assert summary.due(ctx) == []
    assert run_job(ctx, summary, target, force=True).outcome in ("ok", "skipped")
    before = path.read_bytes()
    again = run_job(ctx, summary, target, force=True)
    assert again.outcome == "skipped" and "nothing new" in again.reason
    assert path.read_bytes() == before
    cur = get_cursor(ctx.conn, "summary", str(target))
    row = ctx.conn.execute("SELECT safe_offset FROM sessions WHERE session_id=?", (target.session_id,)).fetchone()
    assert cur is not None and cur["offset"] == row["safe_offset"]


def test_the_corpus_has_sessions_on_both_sides_of_the_threshold() -> None:
    require_corpus()
    counts = {p.name: len(expected_due_lines(p, 2000, 1000, 3)) for p in corpus_sessions()}
    assert counts["short.jsonl"] == 0 and counts["session-01.jsonl"] == 0
    assert counts["4d5611e5-241a-462a-8d15-5122611a9569.jsonl"] > 20  # due many times
    assert sum(1 for v in counts.values() if v >= 3) >= 5
