"""Commands around the daemon: run, run-now, jobs, logs."""

from __future__ import annotations

import sys
from typing import Any

import click

from memd.cli import command, get_home, json_out
from memd.cli.completion import complete_job, complete_project, complete_session
from memd.errors import UsageError


@command("run")
@click.pass_context
def run_cmd(ctx: click.Context) -> None:
    """Run the daemon in the foreground (what the service units start)."""
    from memd import settings as st
    from memd.daemon.loop import Daemon
    from memd.logs.events import configure, get_logger

    home = get_home(ctx)
    s = st.load(home.settings_file)
    configure(home, level=s.memd.log_level)  # the service's stderr: JSON for journald when not a terminal
    sys.exit(Daemon(home, log=get_logger("memd.daemon")).run())


@command("run-now")
@click.argument("job_name", metavar="JOB", shell_complete=complete_job)
@click.option("--project", "key", help="Only this project (its memory, or its sessions).", shell_complete=complete_project)
@click.option("--session", help="Only this session (an id or a unique prefix; session jobs).",
              shell_complete=complete_session)
@click.option("--global", "glob", is_flag=True, help="The global drawer (dream, index).")
@click.option("--all", "all_", is_flag=True, help="Every target that is due (with --force: every target).")
@click.option("--force", is_flag=True, help="Skip the job's thresholds (never its lock).")
@click.option("--no-wait", is_flag=True, help="Exit 75 at once if a lock is held instead of waiting.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def run_now_cmd(ctx: click.Context, job_name: str, key: str | None, session: str | None, glob: bool,
                all_: bool, force: bool, no_wait: bool, as_json: bool) -> None:  # fmt: skip
    """Run JOB once, now, through the daemon's own path and locks.

    JOB is extract, summary, dream, index or sync; `all` runs them in that order.
    Without a target option it runs every target that is due.
    """
    from memd.daemon.runnow import Request, exit_code_of, run_now

    req = Request(job_name, key, session, glob, all_, force, no_wait, as_json)
    results = run_now(get_home(ctx), req, say=click.echo, warn=lambda line: click.echo(line, err=True))
    if as_json:
        json_out(results)
    sys.exit(exit_code_of(results))


@command("jobs")
@click.option("--json", "as_json", is_flag=True)
def jobs_cmd(as_json: bool) -> None:
    """List the jobs and what triggers each."""
    from memd.daemon import registry

    rows = [{"job": j.NAME, "trigger": j.TRIGGER, "model": j.NEEDS_MODEL} for j in registry.all_jobs()]
    if as_json:
        json_out(rows)
        return
    from memd.output import render

    for line in render(["JOB", "MODEL", "TRIGGER"], [[r["job"], "yes" if r["model"] else "", r["trigger"]] for r in rows]):
        click.echo(line)


@command("logs")
@click.option("--job", help="Only lines of this job.", shell_complete=complete_job)
@click.option("--level", type=click.Choice(["debug", "info", "warning", "error"]), help="Minimum level.")
@click.option("--since", help="Only lines since: an ISO time, or an age like 30m, 2h, 1d.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing lines as they come.")
@click.option("-n", "--lines", "last", type=click.IntRange(min=0), help="Only the last N lines (then, with -f, new ones).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON lines as they are.")
@click.pass_context
def logs_cmd(ctx: click.Context, job: str | None, level: str | None, since: str | None, follow: bool,
             last: int | None, as_json: bool) -> None:  # fmt: skip
    """Show memd's log (memd/logs/memd.jsonl and its rotations); times are local in text, UTC in --json."""
    from memd.logs.read import follow_log, read_log

    home = get_home(ctx)
    if job is not None:
        from memd.daemon.runnow import check_job

        check_job(job)
    when = parse_since(since)
    try:
        if last is not None:
            for rec in last_records(read_log(home, job=job, level=level, since=when), last):
                click.echo(_log_line(rec, as_json))
        if follow:
            for rec in follow_log(home, job=job, level=level, since=when, from_start=last is None):
                click.echo(_log_line(rec, as_json))
        elif last is None:
            for rec in read_log(home, job=job, level=level, since=when):
                click.echo(_log_line(rec, as_json))
    except KeyboardInterrupt:
        pass


def last_records(records: Any, n: int) -> list[dict[str, Any]]:
    """The last `n` of `records`, holding no more than `n` at a time (a log may be 60 MB)."""
    from collections import deque

    return list(deque(records, maxlen=n)) if n else []


def parse_since(text: str | None) -> Any:
    from datetime import timedelta

    from memd.clock import parse_iso, system_clock

    if not text:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].isdigit():
        return system_clock() - timedelta(seconds=int(text[:-1]) * units[text[-1]])
    dt = parse_iso(text)
    if dt is None:
        raise UsageError(f"--since: {text!r} is neither an ISO time nor an age like 30m, 2h, 1d")
    return dt


def _log_line(rec: dict[str, Any], as_json: bool) -> str:
    import orjson

    if as_json:
        return orjson.dumps(rec).decode()
    rest = {k: v for k, v in rec.items() if k not in ("ts", "level", "event", "logger")}
    tail = " ".join(f"{k}={v}" for k, v in rest.items() if k != "traceback")
    from memd.clock import local_text

    ts = rec.get("ts")
    line = f"{local_text(ts, seconds=True) if isinstance(ts, str) else '?'} {rec.get('level', '?')!s:<7} {rec.get('event', '?')} {tail}".rstrip()
    if "traceback" in rec:
        line += "\n" + str(rec["traceback"]).rstrip()
    return line
