"""The session ledger from the shell: scan, sessions, pause, resume."""

from __future__ import annotations

import sys
from typing import Any

import click

from memd.cli import command, get_home, json_out
from memd.cli.completion import complete_project, complete_session
from memd.errors import UsageError


@command("scan")
@click.option("--project", "key", help="Only this project key.", shell_complete=complete_project)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def scan_cmd(ctx: click.Context, key: str | None, as_json: bool) -> None:
    """Ingest whatever is new in the transcripts, once."""
    from memd.ledger.scan import DeferredLog, scan_home, summary_line

    home = get_home(ctx)

    def setup() -> object:  # on the first warning only: structlog's import is a tenth of a small scan
        from memd.cli import cli_logging
        from memd.logs.events import get_logger

        cli_logging(home, "warning")
        return get_logger("memd.scan")

    totals = scan_home(home, key=key, progress=not as_json, log=DeferredLog(setup))
    if as_json:
        json_out(totals)
    else:
        click.echo(summary_line(totals))


@command("sessions")
@click.option("--project", "key", help="Only this project key.", shell_complete=complete_project)
@click.option("--json", "as_json", is_flag=True)
@click.option("--no-scan", is_flag=True, help="Show the ledger as it is, without reading new bytes first.")
@click.pass_context
def sessions_cmd(ctx: click.Context, key: str | None, as_json: bool, no_scan: bool) -> None:
    """One row per session: turns, tool calls, tokens, usage, compactions, pause."""
    from memd import state
    from memd.ledger.lookup import check_project
    from memd.ledger.sessions import list_sessions, sessions_json_text

    home = get_home(ctx)
    if not no_scan:
        from memd.ledger.scan import scan_home

        scan_home(home, key=key)
    if not home.state_db.exists() and key is not None:
        raise UsageError(f"no project {key!r} in {home.root} (see `memd sessions`)")
    conn = state.connect(home.state_db)
    try:
        check_project(home, key, conn)
        if as_json:
            sys.stdout.buffer.write(sessions_json_text(conn, key).encode("utf-8") + b"\n")
            return
        rows = list_sessions(conn, key)
    finally:
        conn.close()
    if not rows:
        click.echo(f"no sessions under {home.projects}")
        return
    for line in session_table(rows):
        click.echo(line)


SESSION_HEADERS = ["SESSION", "DATE", "FMT", "HUMAN", "ASST", "TOOLS", "TOKENS", "IN+OUT", "CMP", "PAUSED", "TITLE"]


def session_table(rows: list[dict[str, Any]]) -> list[str]:
    """`memd sessions` as text: a `[project]` line, then its sessions, columns aligned over all of them.

    DATE is the session's first record in local time; TITLE the agent's own title (MewCode's `.meta`
    title included) or the first prompt (`memd.transcripts.titles`)."""
    from pathlib import Path

    from memd.clock import local_text
    from memd.output import render

    body: list[list[object]] = []
    keys: list[str | None] = []
    for r in rows:
        used = r["usage"]["input"] + r["usage"]["output"]
        pend = f"+{r['tool_calls_pending']}" if r["tool_calls_pending"] else ""
        body.append([r["session_id"], local_text(r["first_ts"]), r["format"] or "-", r["human_turns"],
                     r["assistant_turns"], f"{r['tool_calls']}{pend}", r["tokens"], used, r["compactions"],
                     "yes" if r["paused"] else "", _title(Path(r["path"]))])  # fmt: skip
        keys.append(r["key"])
    lines = render(SESSION_HEADERS, body, right=range(3, 9))
    out, last_key = [lines[0]], None
    for k, line in zip(keys, lines[1:]):
        if k != last_key:
            out.append(f"[{k}]")
            last_key = k
        out.append(line)
    return out


def _title(path: Any) -> str:
    """The session's title with any secret in it redacted (a prompt may quote a key); "" for none."""
    from memd.transcripts.titles import session_title

    title = session_title(path, warn=lambda line: click.echo(f"memd: warning: {line}", err=True)) or ""
    if title:
        from memd.redact.redactor import may_hold_secret, redact

        if may_hold_secret(title):
            title = redact(title)
    return title


def _set_pause(ctx: click.Context, session_id: str, key: str | None, paused: bool) -> None:
    from memd import state
    from memd.clock import iso, system_clock
    from memd.ledger import pause
    from memd.ledger.lookup import resolve_session
    from memd.ledger.scan import scan_home

    home = get_home(ctx)
    scan_home(home, key=key)
    conn = state.connect(home.state_db)
    try:
        key, session_id = resolve_session(conn, session_id, key)  # an id or a unique prefix of one
        n = pause.say(conn, key, session_id, paused, iso(system_clock()))
    finally:
        conn.close()
    if n == 0:
        raise UsageError(f"no session {session_id!r}" + (f" in project {key}" if key else "") + " (see `memd sessions`)")
    click.echo(f"{'paused' if paused else 'resumed'} memory extraction for session {session_id}")


@command("pause")
@click.argument("session_id", shell_complete=complete_session)
@click.option("--project", "key", help="Project key, when one id exists in several projects.", shell_complete=complete_project)
@click.pass_context
def pause_cmd(ctx: click.Context, session_id: str, key: str | None) -> None:
    """Pause memory extraction for a session (summaries go on)."""
    _set_pause(ctx, session_id, key, True)


@command("resume")
@click.argument("session_id", shell_complete=complete_session)
@click.option("--project", "key", shell_complete=complete_project)
@click.pass_context
def resume_cmd(ctx: click.Context, session_id: str, key: str | None) -> None:
    """Resume memory extraction for a session."""
    _set_pause(ctx, session_id, key, False)
