"""No silent spending (SPEC §8.3): a home with old and new sessions extracts and summarises only the
recent ones, `memd status` shows the rest priced, `memd backfill` runs them when asked."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobs import extract, summary
from memd.daemon.status import gather, render
from memd.job.backfill import estimate, horizon, is_recent
from memd.llm.prices import PriceTable, load_prices
from memd.tree import Place
from tests.jobkit import context, ingest, make_settings
from tests.jobs.extract.kit import state_rows
from tests.procs import DaemonProc, FakeApiProc, memd_env, run_memd, wait_for

KEY = "-work-repo"
LONG = "Please always run the linter before committing; broken CI costs us hours of waiting. " * 6


def _session(home: Path, sid: str, last: datetime | None, turns: int = 4, mtime: datetime | None = None) -> Path:
    """A transcript whose records are stamped up to `last` (None: no timestamps), its file last
    modified at `mtime` (default `last`, else now)."""
    path = home / "projects" / KEY / f"{sid}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        for i in range(turns):
            rec: dict[str, Any] = {"type": "user" if i % 2 == 0 else "assistant", "uuid": f"{sid}-{i}", "sessionId": sid}
            if last is not None:
                rec["timestamp"] = (last - timedelta(minutes=turns - i)).isoformat().replace("+00:00", "Z")
            if i % 2 == 0:
                rec["message"] = {"role": "user", "content": f"{LONG} ({sid} {i})"}
            else:
                rec["message"] = {"id": f"m-{sid}-{i}", "role": "assistant", "content": [{"type": "text", "text": "Understood."}],
                                  "usage": {"input_tokens": 10, "output_tokens": 5}}  # fmt: skip
            fh.write(json.dumps(rec) + "\n")
    if mtime or last:
        t = (mtime or last).timestamp()  # type: ignore[union-attr]
        os.utime(path, (t, t))
    return path


def _home(tmp_path: Path, now: datetime) -> Path:
    home = tmp_path / "h"
    _session(home, "new", now - timedelta(days=1))
    _session(home, "old", now - timedelta(days=40))
    _session(home, "undated", None, mtime=now - timedelta(days=30))  # no record times: its file's mtime says when
    _session(home, "copied", now - timedelta(days=50), mtime=now - timedelta(hours=1))  # written anew: recent
    ingest(home, now)
    return home


SETTINGS = {"sessionMemory": {"minInitTokens": 50, "minUpdateTokens": 10}}


def test_a_first_start_takes_up_only_sessions_active_within_backfill_days(tmp_path: Path) -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    home = _home(tmp_path, now)
    ctx = context(home, make_settings(memory=SETTINGS), now=now)
    every = {p.session_id for p in extract.due_all(ctx)}
    assert every == {"new", "old", "undated", "copied"}  # all would be extracted without the horizon
    assert {p.session_id for p in extract.due(ctx)} == {"new", "copied"}
    assert {p.session_id for p in summary.due_all(ctx)} == {"new", "old", "undated", "copied"}
    assert {p.session_id for p in summary.due(ctx)} == {"new", "copied"}
    wide = context(home, make_settings(memory={**SETTINGS, "backfillDays": 60}), now=now)
    assert {p.session_id for p in extract.due(wide)} == {"new", "old", "undated", "copied"}
    off = context(home, make_settings(memory={**SETTINGS, "backfillDays": 0}), now=now)
    assert {p.session_id for p in summary.due(off)} == {"new", "old", "undated", "copied"}


def test_status_shows_the_backlog_priced_before_anything_is_spent(tmp_path: Path) -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    home = _home(tmp_path, now)
    (home / "settings.json").write_text(json.dumps({"memory": SETTINGS}))
    data = gather(__import__("memd.tree", fromlist=["Home"]).Home(home), now)
    b = data["backlog"]
    assert (b["sessions"], b["extract"], b["summary"]) == (2, 2, 2), b
    assert b["estimated_tokens"] > 0 and b["estimated_usd"] is not None and b["estimated_usd"] > 0
    assert b["horizon"].startswith("2026-11-23") and b["prices_as_of"]
    assert data["jobs"]["extract"]["due"] == 2 and data["jobs"]["summary"]["due"] == 2
    text = render(data)
    assert "backlog: 2 sessions idle before 2026-11-23" in text and "memd backfill" in text
    assert not (home / "memory").exists()  # nothing was spent or written


def test_status_over_many_sessions_reads_activity_once_and_agrees_with_the_jobs(tmp_path: Path) -> None:
    """Past `backfill.FEW` sessions `status` reads every session's activity once for the due counts and the
    backlog (it made four whole passes: 1.7 s at 100,000 sessions, bench/RESULTS.md); what it shows is
    what each job's own `due` and the backlog's own read give."""
    from memd.job import backfill  # noqa: PLC0415

    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    home = tmp_path / "h"
    for i in range(backfill.FEW + 6):
        _session(home, f"s{i:03d}", now - timedelta(days=1 if i % 3 else 40), turns=2)
    ingest(home, now)
    (home / "settings.json").write_text(json.dumps({"memory": SETTINGS}))
    from memd.tree import Home  # noqa: PLC0415

    data = gather(Home(home), now)
    ctx = context(home, make_settings(memory=SETTINGS), now=now)
    assert data["jobs"]["extract"]["due"] == len(extract.due(ctx)) == 46
    assert data["jobs"]["summary"]["due"] == len(summary.due(ctx))
    found = {"extract": extract.due_all(ctx), "summary": summary.due_all(ctx)}
    alone = backfill.backlog(ctx.conn, ctx.settings, now, found, load_prices(Home(home).memd_dir)[0])
    assert data["backlog"]["sessions"] == alone.sessions == 24 and data["backlog"]["extract"] == alone.extract


def test_memd_backfill_dry_run_then_since_then_all(tmp_path: Path) -> None:
    now = datetime.now(UTC)  # the command reads the clock: the sessions are dated from it
    home = _home(tmp_path, now)
    (home / "settings.json").write_text(json.dumps({"memory": SETTINGS}))
    dry = run_memd(home, "backfill", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["sessions"] == 2 and plan["dry_run"] and plan["runs"] == [] and plan["estimated_tokens"] > 0
    assert json.loads(run_memd(home, "status", "--json").stdout)["backlog"]["sessions"] == 2  # dry run changed nothing

    since = (now - timedelta(days=35)).date().isoformat()  # "undated" (30 days) but not "old" (40 days)
    r = run_memd(home, "backfill", "--since", since, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    runs = json.loads(r.stdout)["runs"]
    assert sorted((x["job"], x["target"].split(":")[-1]) for x in runs) == [("extract", "undated"), ("summary", "undated")]
    assert all(x["outcome"] in ("ok", "skipped") for x in runs), runs
    left = json.loads(run_memd(home, "status", "--json").stdout)["backlog"]
    assert left["sessions"] == 1  # "old" still waits

    r = run_memd(home, "backfill", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert {x["target"].split(":")[-1] for x in json.loads(r.stdout)["runs"]} == {"old"}
    assert json.loads(run_memd(home, "status", "--json").stdout)["backlog"]["sessions"] == 0
    text = run_memd(home, "backfill").stdout
    assert "backlog: 0 sessions" in text


def test_a_bad_since_is_a_usage_error(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    r = run_memd(home, "backfill", "--since", "last tuesday")
    assert r.returncode == 2 and "--since" in (r.stderr + r.stdout)


def test_the_pure_rules() -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    edge = horizon(7, now, None)
    assert edge == now - timedelta(days=7)
    assert horizon(7, now, datetime(2020, 1, 1, tzinfo=UTC)) == datetime(2020, 1, 1, tzinfo=UTC)
    assert horizon(7, now, now) == edge  # a backfill never narrows the window
    assert horizon(0, now, None) is None
    assert is_recent("2026-11-29T00:00:00Z", None, edge) and not is_recent("2026-11-01T00:00:00Z", None, edge)
    assert not is_recent(None, int((now - timedelta(days=9)).timestamp() * 1e9), edge)
    assert is_recent("2026-11-01T00:00:00Z", int((now - timedelta(days=1)).timestamp() * 1e9), edge)  # the later wins
    assert is_recent(None, None, edge)  # no time at all: not held back
    tokens, usd = estimate([("extract", 4000), ("summary", 4000)], "claude-haiku-4-5", "claude-sonnet-4-6", PriceTable())
    assert tokens == (1500 + 1) + (1000 + 600) * 2 and usd is not None and usd > 0
    assert estimate([("summary", 40)], "x", "unknown-model", PriceTable())[1] is None  # never a wrong zero
    assert Place("session", KEY, "new").session_id == "new"


def test_the_daemon_on_a_home_with_history_sends_only_recent_sessions(tmp_path: Path) -> None:
    """memd started as a process on a home with an old and a new session, with a model: only the
    new session reaches the API; the old one waits as the backlog until `memd backfill`, after
    which the running daemon takes it up."""
    now = datetime.now(UTC)
    home = tmp_path / "h"
    _session(home, "new", now - timedelta(days=1))
    _session(home, "old", now - timedelta(days=40))
    (home / "settings.json").write_text(json.dumps({"memory": {"sessionMemory": {"enabled": False}},
                                                    "memd": {"reconcileSeconds": 2}}))  # fmt: skip
    with FakeApiProc(tmp_path, {"default": {"kind": "text", "text": "no"}}) as api, \
            DaemonProc(home, env=api_env(api)):  # fmt: skip
        wait_for(lambda: _cursor(home, "new"), every=0.2)
        st = json.loads(run_memd(home, "status", "--json", env=api_env(api)).stdout)
        assert st["backlog"]["sessions"] == 1 and st["jobs"]["extract"]["due"] == 0, st["backlog"]
        sent = json.dumps([r["body"] for r in api.requests()])
        assert "(new 0)" in sent and "(old 0)" not in sent
        assert _cursor(home, "old") is None
        r = run_memd(home, "backfill", "--json", env=api_env(api))
        assert r.returncode == 0 and json.loads(r.stdout)["daemon"] is True, r.stdout + r.stderr
        wait_for(lambda: _cursor(home, "old"), every=0.2)
        assert "(old 0)" in json.dumps([r["body"] for r in api.requests()])


def api_env(api: FakeApiProc) -> dict[str, str]:
    return memd_env(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="test-key")


def _cursor(home: Path, sid: str) -> Any:
    rows = state_rows(home, "SELECT value FROM cursors WHERE job='extract' AND target=?", (f"session:{KEY}:{sid}",))
    return rows[0]["value"] if rows else None
