"""Commands over the tree, the settings and the ledger: key, config, scan, sessions, pause."""

from __future__ import annotations

import sys

from typing import Any

import click

from memd.cli import command, get_home, json_out


@command("key")
@click.argument("path", required=False, type=click.Path())
def key_cmd(path: str | None) -> None:
    """Print the project key of PATH (default: the current directory)."""
    from memd.tree import project_key

    click.echo(project_key(path or "."))


@command("config")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.option("--check", is_flag=True, help="Exit 5 listing problems if any field is invalid.")
@click.pass_context
def config_cmd(ctx: click.Context, as_json: bool, check: bool) -> None:
    """Print the effective settings (settings.json's `memory` and `memd` objects, with defaults)."""
    from memd import settings as st

    home = get_home(ctx)
    s = st.load(home.settings_file)
    if check:
        for w in s.warnings:
            click.echo(w, err=True)
        if s.warnings:
            sys.exit(5)
        click.echo(f"{home.settings_file}: ok")
        return
    if as_json:
        json_out({**s.as_dict(), "warnings": s.warnings, "file": str(home.settings_file)})
        return
    for w in s.warnings:
        click.echo(f"warning: {w}", err=True)
    _print_tree(s.as_dict())


def _print_tree(d: dict[str, Any], prefix: str = "") -> None:
    for k, v in d.items():
        if isinstance(v, dict):
            _print_tree(v, f"{prefix}{k}.")
        else:
            click.echo(f"{prefix}{k} = {v!r}" if isinstance(v, str) else f"{prefix}{k} = {str(v).lower() if isinstance(v, bool) else v}")


def scan_home(home: Any, *, key: str | None = None, progress: bool = False, log: Any = None) -> dict[str, Any]:
    """Ingest whatever is new in every session (or one project's); returns totals."""
    from memd import ledger, state
    from memd.clock import iso, system_clock

    conn = state.connect(home.state_db)
    try:
        todo = ledger.stale_sessions(conn, home, key)
        totals: dict[str, Any] = {"sessions": 0, "read": 0, "bytes": 0, "records": 0, "problems": 0}
        bar = _bar(todo) if progress else None
        workers = _workers(todo)
        results = _ingest_parallel(home, todo, workers, log) if workers > 1 else (
            ledger.ingest(conn, sf, iso(system_clock()), log) for sf in todo
        )
        for sf, r in zip(todo, results):
            totals["read"] += 1
            totals["bytes"] += r.bytes_read
            totals["records"] += r.records
            totals["problems"] += len(r.problems)
            if bar is not None:
                bar.update(_size(sf))
        if bar is not None:
            bar.render_finish()
        q = "SELECT COUNT(*) FROM sessions WHERE is_subagent=0" + (" AND key=?" if key else "")
        totals["sessions"] = conn.execute(q, (key,) if key else ()).fetchone()[0]
        return totals
    finally:
        conn.close()


PARALLEL_MIN_BYTES = 64 << 20


def _workers(todo: list[Any]) -> int:
    """A big first read (a new install over a full home) uses every core; small ones stay in-process."""
    import os

    forced = os.environ.get("MEMD_SCAN_WORKERS", "")
    if forced.isdigit():  # for tests and for users who want the first read on one core
        return max(1, min(int(forced), len(todo)))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2 or len(todo) < 4 or sum(_size(sf) for sf in todo) < PARALLEL_MIN_BYTES:
        return 1
    return min(cores, 4)


def _ingest_one(args: tuple[Any, Any]) -> Any:
    """A worker ingests one session with its own connection: the ledger's commits re-check the
    offsets they started from, so workers (and a running daemon) never count a span twice."""
    from memd import ledger, state
    from memd.clock import iso, system_clock

    home, sf = args
    conn = _WORKER_CONN.get(str(home.state_db))
    if conn is None:
        conn = _WORKER_CONN[str(home.state_db)] = state.connect(home.state_db)
    return ledger.ingest(conn, sf, iso(system_clock()))


_WORKER_CONN: dict[str, Any] = {}


def _ingest_parallel(home: Any, todo: list[Any], workers: int, log: Any) -> list[Any]:
    """Sessions spread over `workers` processes, biggest first so the pool stays busy."""
    import multiprocessing as mp

    order = sorted(range(len(todo)), key=lambda i: -_size(todo[i]))
    ctx = mp.get_context("fork")
    with ctx.Pool(workers) as pool:
        done = pool.map(_ingest_one, [(home, todo[i]) for i in order], chunksize=1)
    out: list[Any] = [None] * len(todo)
    for i, r in zip(order, done):
        out[i] = r
        if log is not None:
            for pr in r.problems[:5]:
                log.warning("transcript.line_skipped", file=pr.path, line=pr.line, reason=pr.reason)
    return out


def _size(sf: Any) -> int:
    import os

    total = 0
    for p in sf.paths():
        try:
            total += os.stat(p).st_size
        except OSError:
            pass
    return total


def _bar(todo: list[Any]) -> Any:
    """A progress bar only on a terminal and only when there is much to read."""
    if not sys.stderr.isatty():
        return None
    total = sum(_size(sf) for sf in todo)
    if total < 32 << 20:
        return None
    bar = click.progressbar(length=total, label="reading transcripts", file=sys.stderr)
    bar.__enter__()
    return bar


@command("scan")
@click.option("--project", "key", help="Only this project key.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def scan_cmd(ctx: click.Context, key: str | None, as_json: bool) -> None:
    """Ingest whatever is new in the transcripts, once."""
    from memd.logs import configure, get_logger

    home = get_home(ctx)
    configure(home, level="warning", stderr=True, file=True)
    totals = scan_home(home, key=key, progress=not as_json, log=get_logger("memd.scan"))
    if as_json:
        json_out(totals)
    else:
        mb = totals["bytes"] / 1e6
        click.echo(
            f"scanned {totals['sessions']} sessions: {totals['read']} with new bytes, "
            f"{mb:.1f} MB, {totals['records']} records, {totals['problems']} problems"
        )


_LIST_SQL = (
    "SELECT key, session_id, format, path, bytes_read, records, bad_lines, human_turns, assistant_turns, "
    "tool_calls, tool_pending, conv_chars, usage_input, usage_output, usage_cache_creation, usage_cache_read, "
    "compactions, paused_transcript, pause_toggled_ts, pause_cli, pause_cli_ts, first_ts, last_ts, safe_offset, "
    "natural_break FROM sessions WHERE is_subagent=0"
)


_JSON_SQL = """
SELECT json_group_array(json_object(
  'key', key, 'session_id', session_id, 'format', format, 'path', path, 'bytes_read', bytes_read,
  'records', records, 'bad_lines', bad_lines, 'human_turns', human_turns, 'assistant_turns', assistant_turns,
  'tool_calls', tool_calls, 'tool_calls_pending', tool_pending, 'tokens', (conv_chars + 3) / 4,
  'usage', json_object('input', usage_input, 'output', usage_output, 'cache_creation', usage_cache_creation,
                       'cache_read', usage_cache_read),
  'compactions', compactions,
  'paused', CASE WHEN (CASE WHEN pause_cli IS NULL OR (pause_toggled_ts IS NOT NULL AND pause_cli_ts IS NOT NULL
                                  AND pause_toggled_ts > pause_cli_ts) THEN paused_transcript ELSE pause_cli END)
            THEN json('true') ELSE json('false') END,
  'first_ts', first_ts, 'last_ts', last_ts, 'safe_offset', safe_offset,
  'natural_break', CASE WHEN natural_break THEN json('true') ELSE json('false') END))
FROM (SELECT * FROM sessions WHERE is_subagent = 0 {where} ORDER BY key, first_ts, session_id)
"""


def sessions_json_text(conn: Any, key: str | None = None) -> str:
    """`memd sessions --json` built by SQLite in one string: 10,000 sessions without a Python
    object each. Same fields and values as `list_sessions` (a test holds them equal)."""
    q = _JSON_SQL.format(where="AND key = ?" if key else "")
    return str(conn.execute(q, (key,) if key else ()).fetchone()[0])


def list_sessions(conn: Any, key: str | None = None) -> list[dict[str, Any]]:
    """Every session as `memd sessions --json` prints it: one query, one dict a row.

    The JSON fields are a stable interface (README, "memd sessions --json").
    """
    q = _LIST_SQL + (" AND key=?" if key else "") + " ORDER BY key, first_ts, session_id"
    cur = conn.cursor()
    cur.row_factory = None
    out = []
    for (k, sid, fmt, path, nread, recs, bad, human, asst, tools, pending, chars, u_in, u_out, u_cc, u_cr,
         comp, p_tr, p_tog, p_cli, p_cli_ts, first, last, safe, brk) in cur.execute(q, (key,) if key else ()):  # fmt: skip
        paused = bool(p_tr) if p_cli is None or (p_tog is not None and p_cli_ts is not None and p_tog > p_cli_ts) else bool(p_cli)
        out.append({
            "key": k, "session_id": sid, "format": fmt, "path": path, "bytes_read": nread, "records": recs,
            "bad_lines": bad, "human_turns": human, "assistant_turns": asst, "tool_calls": tools,
            "tool_calls_pending": pending, "tokens": (chars + 3) // 4,
            "usage": {"input": u_in, "output": u_out, "cache_creation": u_cc, "cache_read": u_cr},
            "compactions": comp, "paused": paused, "first_ts": first, "last_ts": last, "safe_offset": safe,
            "natural_break": bool(brk),
        })  # fmt: skip
    return out


def session_json(row: Any) -> dict[str, Any]:
    """One ledger row (from `ledger.session_rows`) in the `memd sessions --json` form."""
    from memd.ledger import effective_pause
    from memd.transcripts import tokens_of

    return {
        "key": row["key"],
        "session_id": row["session_id"],
        "format": row["format"],
        "path": row["path"],
        "bytes_read": row["bytes_read"],
        "records": row["records"],
        "bad_lines": row["bad_lines"],
        "human_turns": row["human_turns"],
        "assistant_turns": row["assistant_turns"],
        "tool_calls": row["tool_calls"],
        "tool_calls_pending": row["tool_pending"],
        "tokens": tokens_of(row["conv_chars"]),
        "usage": {
            "input": row["usage_input"],
            "output": row["usage_output"],
            "cache_creation": row["usage_cache_creation"],
            "cache_read": row["usage_cache_read"],
        },
        "compactions": row["compactions"],
        "paused": effective_pause(row),
        "first_ts": row["first_ts"],
        "last_ts": row["last_ts"],
        "safe_offset": row["safe_offset"],
        "natural_break": bool(row["natural_break"]),
    }


@command("sessions")
@click.option("--project", "key", help="Only this project key.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--no-scan", is_flag=True, help="Show the ledger as it is, without reading new bytes first.")
@click.pass_context
def sessions_cmd(ctx: click.Context, key: str | None, as_json: bool, no_scan: bool) -> None:
    """One row per session: turns, tool calls, tokens, usage, compactions, pause."""
    from memd import ledger, state

    home = get_home(ctx)
    if not no_scan:
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
    from memd import ledger, state
    from memd.clock import iso, system_clock
    from memd.errors import UsageError

    home = get_home(ctx)
    scan_home(home, key=key)
    conn = state.connect(home.state_db)
    try:
        n = ledger.set_cli_pause(conn, key, session_id, paused, iso(system_clock()))
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


