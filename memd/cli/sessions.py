"""The session ledger from the shell: scan, sessions, pause, resume."""

from __future__ import annotations

import sys

import click

from memd.cli import command, get_home, json_out
from memd.errors import UsageError


@command("scan")
@click.option("--project", "key", help="Only this project key.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def scan_cmd(ctx: click.Context, key: str | None, as_json: bool) -> None:
    """Ingest whatever is new in the transcripts, once."""
    from memd.ledger.scan import DeferredLog, scan_home

    home = get_home(ctx)

    def setup() -> object:  # on the first warning only: structlog's import is a tenth of a small scan
        from memd.logs.events import configure, get_logger

        configure(home, level="warning", stderr=True, file=True)
        return get_logger("memd.scan")

    totals = scan_home(home, key=key, progress=not as_json, log=DeferredLog(setup))
    if as_json:
        json_out(totals)
    else:
        mb = totals["bytes"] / 1e6
        click.echo(
            f"scanned {totals['sessions']} sessions: {totals['read']} with new bytes, "
            f"{mb:.1f} MB, {totals['records']} records, {totals['problems']} problems"
        )


@command("sessions")
@click.option("--project", "key", help="Only this project key.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--no-scan", is_flag=True, help="Show the ledger as it is, without reading new bytes first.")
@click.pass_context
def sessions_cmd(ctx: click.Context, key: str | None, as_json: bool, no_scan: bool) -> None:
    """One row per session: turns, tool calls, tokens, usage, compactions, pause."""
    from memd import state
    from memd.ledger.sessions import list_sessions, sessions_json_text

    home = get_home(ctx)
    if not no_scan:
        from memd.ledger.scan import scan_home

        scan_home(home, key=key)
    conn = state.connect(home.state_db)
    try:
        if as_json:
            sys.stdout.buffer.write(sessions_json_text(conn, key).encode("utf-8") + b"\n")
            return
        rows = list_sessions(conn, key)
    finally:
        conn.close()
    if not rows:
        click.echo(f"no sessions under {home.projects}")
        return
    click.echo(f"{'SESSION':<38} {'FMT':<7} {'HUMAN':>5} {'ASST':>5} {'TOOLS':>5} {'TOKENS':>8} {'IN+OUT':>9} {'CMP':>3}  PAUSED")
    last_key = None
    for r in rows:
        if r["key"] != last_key:
            click.echo(f"[{r['key']}]")
            last_key = r["key"]
        used = r["usage"]["input"] + r["usage"]["output"]
        pend = f"+{r['tool_calls_pending']}" if r["tool_calls_pending"] else ""
        click.echo(
            f"{r['session_id'][:38]:<38} {r['format'] or '-':<7} {r['human_turns']:>5} {r['assistant_turns']:>5} "
            f"{str(r['tool_calls']) + pend:>5} {r['tokens']:>8} {used:>9} {r['compactions']:>3}  {'yes' if r['paused'] else ''}"
        )


def _set_pause(ctx: click.Context, session_id: str, key: str | None, paused: bool) -> None:
    from memd import state
    from memd.clock import iso, system_clock
    from memd.ledger import pause
    from memd.ledger.scan import scan_home

    home = get_home(ctx)
    scan_home(home, key=key)
    conn = state.connect(home.state_db)
    try:
        n = pause.say(conn, key, session_id, paused, iso(system_clock()))
    finally:
        conn.close()
    if n == 0:
        raise UsageError(f"no session {session_id!r}" + (f" in project {key}" if key else "") + " (see `memd sessions`)")
    click.echo(f"{'paused' if paused else 'resumed'} memory extraction for session {session_id}")


@command("pause")
@click.argument("session_id")
@click.option("--project", "key", help="Project key, when one id exists in several projects.")
@click.pass_context
def pause_cmd(ctx: click.Context, session_id: str, key: str | None) -> None:
    """Pause memory extraction for a session (summaries go on)."""
    _set_pause(ctx, session_id, key, True)


@command("resume")
@click.argument("session_id")
@click.option("--project", "key")
@click.pass_context
def resume_cmd(ctx: click.Context, session_id: str, key: str | None) -> None:
    """Resume memory extraction for a session."""
    _set_pause(ctx, session_id, key, False)
