"""`memd backfill`: take up the old sessions a first start left alone (SPEC §8.3), when asked.

The daemon extracts and summarises sessions active within `memory.backfillDays` only; the rest
is the backlog `memd status` prices. This command shows it (`--dry-run`), then records how far
back the jobs may go (the `backfill` cursor: sessions active since `--since`, default all) and
runs the extractions and summaries of that backlog now, through the daemon's own path and locks
(`memd run-now`'s). With the daemon running it leaves the runs to the daemon, which takes them up
at its next sweep: two processes never extract one session at once.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click

from memd.cli import command, get_home, json_out
from memd.errors import UsageError


def _since(text: str | None) -> datetime | None:
    if not text:
        return None
    from memd.clock import parse_iso

    when = parse_iso(text)
    if when is None:
        raise UsageError(f"--since: {text!r} is not a date (YYYY-MM-DD or an ISO time)")
    return when.astimezone(UTC)


@command("backfill")
@click.option("--since", "since_text", metavar="DATE", help="Only sessions active since DATE (default: all).")
@click.option("--dry-run", is_flag=True, help="Show what would run and its estimated cost; spend nothing.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def backfill_cmd(ctx: click.Context, since_text: str | None, dry_run: bool, as_json: bool) -> None:
    """Extract and summarise the old sessions held back by memory.backfillDays."""
    from memd import settings as st
    from memd.clock import iso, system_clock
    from memd.daemon import registry
    from memd.daemon.lock import daemon_alive
    from memd.job.backfill import CURSOR_JOB, CURSOR_TARGET, asked_since, backlog
    from memd.job.context import make_context, set_cursor
    from memd.ledger.scan import scan_home
    from memd.llm.prices import load_prices
    from memd.logs.events import configure, get_logger

    since = _since(since_text)
    home = get_home(ctx)
    s = st.load(home.settings_file)
    configure(home, level=s.memd.log_level, stderr_level="warning")
    log = get_logger("memd.backfill")
    scan_home(home, log=log)
    now = system_clock()
    jctx = make_context(home, s, log=log)
    try:
        jobs: dict[str, Any] = {n: registry.get(n) for n in ("extract", "summary")}
        due_all = {n: list(j.due_all(jctx)) for n, j in jobs.items()}
        plan = backlog(jctx.conn, s, now, due_all, load_prices(home.memd_dir)[0], since=since)
        report: dict[str, Any] = {**plan.as_dict(), "since": None if since is None else iso(since),
                                  "dry_run": dry_run, "runs": []}  # fmt: skip
        if not as_json:
            usd = "price unknown" if plan.usd is None else f"about ${plan.usd:.2f}"
            click.echo(f"backlog{'' if since is None else ' since ' + iso(since)[:10]}: {plan.sessions} sessions "
                       f"({plan.extract} extractions, {plan.summary} summaries), ~{plan.tokens:,} tokens, {usd} "
                       f"at prices of {plan.as_of}")  # fmt: skip
        if dry_run or not plan.targets:
            _finish(report, as_json, 0)
            return
        asked = asked_since(jctx.conn)
        edge = since or datetime(1970, 1, 1, tzinfo=UTC)
        if asked is None or edge < asked:
            set_cursor(jctx.conn, CURSOR_JOB, CURSOR_TARGET, {"since": iso(edge)}, iso(now))
            jctx.conn.commit()
        if daemon_alive(home) is not None:
            report["daemon"] = True
            if not as_json:
                click.echo("the daemon is running: it takes these sessions up at its next sweep (`memd status`)")
            _finish(report, as_json, 0)
            return
        _run(jctx, jobs, plan.targets, report, as_json)
    finally:
        jctx.conn.close()
    from memd.daemon.runnow import exit_code_of

    _finish(report, as_json, exit_code_of(report["runs"]))


def _run(jctx: Any, jobs: dict[str, Any], targets: tuple[tuple[str, str, str], ...], report: dict[str, Any],
         as_json: bool) -> None:  # fmt: skip
    """Each held-back run, through `run_job` (the daemon's locks, records and log lines)."""
    from memd.job.runner import run_job
    from memd.tree import Place

    for name, key, sid in targets:
        t = Place("session", key, sid)
        jctx.usage = {"calls": 0, "input_tokens": 0, "output_tokens": 0}
        r = run_job(jctx, jobs[name], t)
        report["runs"].append({"job": name, "target": str(t), "outcome": r.outcome, "reason": r.reason,
                               "usage": dict(jctx.usage)})  # fmt: skip
        if not as_json:
            click.echo(f"{name} {t}: {r.outcome}" + (f" — {r.reason}" if r.reason else ""))


def _finish(report: dict[str, Any], as_json: bool, code: int) -> None:
    if as_json:
        json_out(report)
    sys.exit(code)
