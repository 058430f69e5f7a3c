"""Commands over the memories: search, list, show (the agent's `/memory` and SearchMemory)."""

from __future__ import annotations

import sqlite3
from typing import Any

import click

from memd.cli import command, get_home, json_out
from memd.cli.completion import complete_memory, complete_project
from memd.errors import MemdError, UsageError


def resolve_key(key: str | None, cwd: str | None) -> str:
    """`--project KEY`, else the key of `--cwd PATH`, else of the current directory."""
    from memd.keys import project_key

    if key and cwd:
        raise UsageError("give --project or --cwd, not both")
    return key or project_key(cwd or ".")


def ensure_search_db(home: Any, damaged: str | None = None) -> None:
    """A home never indexed gets its index built first, through the index job's own path; so does
    one whose index is damaged (`damaged`: what failed; else `searchschema.problem` looks: a FIFO
    or a directory in its place, garbage, a bad page, a wrong schema): it is a cache, set aside
    first (`search.sqlite.corrupt-<time>`) and rebuilt from the memory files."""
    import os

    from memd.index.schema import LAYOUT, problem, set_aside

    why = damaged or problem(home.search_db)
    if why is None and os.path.lexists(home.search_db):
        return
    from memd.logs.events import cli_defaults, get_logger

    cli_defaults()  # search and list start without logging (memd.cli.FAST_COMMANDS): setting aside and the index run log
    if why is not None and not why.startswith(LAYOUT):  # an old layout is rebuilt in place by the writer
        set_aside(home.search_db, why)
    from memd import settings as st
    from memd.daemon import registry
    from memd.job.context import make_context
    from memd.job.runner import run_job

    job = registry.get("index")
    ctx = make_context(home, st.load(home.settings_file), log=get_logger("memd.search"))
    try:
        for t in job.targets(ctx):
            run_job(ctx, job, t)
    finally:
        ctx.conn.close()


def echo(text: str, err: bool = False) -> None:
    """Print what memories hold without terminal control sequences (a model's answer, a file written
    by hand: `ESC ] 0 ; … BEL` would retitle the terminal); `--json` output is escaped by JSON itself."""
    from memd.memory.controls import strip_controls

    click.echo(strip_controls(text), err=err)


def hit_json(h: Any, now: Any) -> dict[str, Any]:
    from memd.index.staleness import staleness_note

    return {
        "scope": h.scope, "project_key": h.project_key, "file": h.file, "name": h.name,
        "description": h.description, "type": h.type, "snippet": h.snippet, "score": round(h.score, 4),
        "mtime": h.mtime, "stale": staleness_note(h.mtime, now),
    }  # fmt: skip


SEARCH_HELP = """Full-text search over the project's memories and the global drawer.

\b
QUERY syntax (quote it for the shell; nothing you type is an error):
  deploy friday      any of the words; memories with more of them rank first
  "never deploy"     the words in this order
  deplo*             words starting with deplo
  -staging           leave out memories holding the word (also: NOT staging)
  tabs AND spaces    both words required
  tabs OR spaces     either word (what plain words mean anyway)
  name:tabs          the word in one field: name:, description: (desc:), body:
Words match by their stem (deploys finds deploy); Chinese and Japanese match
as runs of characters; C++ is one word. Other characters are not operators:
a note says so and the words around them are searched. Exit 2: a query with
nothing to look for.
"""


@command("search", help=SEARCH_HELP, context_settings={"ignore_unknown_options": True})
@click.argument("words", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--project", "key", help="Project key (default: the project of the current directory).",
              shell_complete=complete_project)
@click.option("--cwd", type=click.Path(), help="Search the project this directory belongs to.")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 200))
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def search_cmd(
    ctx: click.Context, words: tuple[str, ...], key: str | None, cwd: str | None, limit: int, as_json: bool
) -> None:
    from memd.clock import system_clock
    from memd.errors import UsageError
    from memd.index.search import open_readonly, parse, query_index

    query = " ".join(words)
    parsed = parse(query)
    for note in parsed.notes:
        click.echo(f"memd search: {note}", err=True)
    if parsed.error:
        raise UsageError(f"{query!r}: {parsed.error} (see `memd search --help`)")
    home = get_home(ctx)
    pkey = resolve_key(key, cwd)
    ensure_search_db(home)
    import time

    from memd.index.nearest import CLI_WAIT_S, ask, fused_hits, socket_path

    # memd[semantic]: the daemon's dense ranking, for a plain query only (an operator such as -word must hold
    # for every hit); [] without the daemon's socket, and then the answer is the keyword one.
    nearest = ask(socket_path(home.memd_dir), query, pkey, deadline=time.monotonic() + CLI_WAIT_S) if parsed.plain else []

    def search() -> list[Any]:
        conn = open_readonly(home.search_db)
        try:
            return fused_hits(conn, query_index(conn, query, project_key=pkey, limit=limit), nearest, pkey, limit)
        finally:
            conn.close()

    try:
        hits = search()
    except sqlite3.DatabaseError as exc:  # truncated, garbage, a bad page, a wrong schema: rebuild, try once more
        from memd.index.schema import damaged

        if not damaged(exc):
            raise
        ensure_search_db(home, damaged=str(exc))
        try:
            hits = search()
        except sqlite3.DatabaseError as again:
            raise MemdError(f"{home.search_db}: unusable even rebuilt ({again}); `memd doctor` checks it") from None
    now = system_clock()
    rows = [hit_json(h, now) for h in hits]
    if as_json:
        json_out(rows)
        return
    if not rows:
        click.echo(f"no memory matches {query!r} (project {pkey} and the global drawer)")
        return
    for r in rows:
        echo(f"{r['file']}  [{r['type']}, {r['scope']}]  {r['name']} — {r['description']}")
        echo(f"    {r['snippet']}")
        if r["stale"]:
            click.echo(f"    ⚠ {r['stale']}")


def _memories(home: Any, pkey: str | None, everything: bool) -> tuple[list[Any], list[Any]]:
    """The memories in effect and the files that are not."""
    from memd.index.listing import memory_scopes
    from memd.memory.scan import scan_dir

    mems, problems = [], []
    for scope, k, path in memory_scopes(home, pkey, everything):
        r = scan_dir(path, scope, k)
        mems.extend(r.memories)
        problems.extend(r.problems)
    return mems, problems


def memory_json(m: Any, home: Any, now: Any) -> dict[str, Any]:
    from memd.index.staleness import staleness_note

    return {
        "scope": m.scope, "project_key": m.project_key, "file": str(m.path.relative_to(home.root)),
        "name": m.name, "description": m.description, "type": m.type, "mtime": m.mtime, "size": m.size,
        "stale": staleness_note(m.mtime, now),
    }  # fmt: skip


@command("list")
@click.option("--project", "key", help="Project key (default: the project of the current directory).",
              shell_complete=complete_project)
@click.option("--cwd", type=click.Path())
@click.option("--all", "everything", is_flag=True, help="Every project's memories too.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_cmd(ctx: click.Context, key: str | None, cwd: str | None, everything: bool, as_json: bool) -> None:
    """The memories in effect: the global drawer and the project's memory."""
    from memd.collector import paused

    home = get_home(ctx)
    pkey = None if everything else resolve_key(key, cwd)
    # A listing makes a stat, a row and a JSON object a memory (150,000 containers at 50,000 memories) and
    # no cycle: paused, the collector neither walks them (~7 % of the command) nor finds them all alive
    # after, as they are gone when `_list_out` returns.
    with paused():
        _list_out(home, key, pkey, everything, as_json)


def _list_out(home: Any, key: str | None, pkey: str | None, everything: bool, as_json: bool) -> None:
    """`list`'s output: the memories in effect (JSON, or a table and the problems on stderr)."""
    from memd.clock import system_clock
    from memd.index.listing import listing_document
    from memd.ledger.lookup import check_project

    doc = listing_document(home, pkey, everything, system_clock().timestamp())
    rows = doc["memories"]
    if key and not everything and not any(r["scope"] == "project" for r in rows):
        check_project(home, key)  # nothing of its own: a typo is exit 2, a known project just has none yet
    if as_json:
        json_out(doc)
        return
    from memd.output import render

    table = [[r["type"], r["name"], "global" if r["scope"] == "global" else r["project_key"], r["description"]] for r in rows]
    for line in render(["TYPE", "NAME", "SCOPE", "DESCRIPTION"], table) if rows else []:
        echo(line)
    for p in doc["problems"]:
        echo(f"problem: {p['file']}: {p['reason']}", err=True)
    if not rows:
        click.echo("no memories yet")


@command("show")
@click.argument("name", shell_complete=complete_memory)
@click.option("--project", "key", help="Project key (default: the project of the current directory).",
              shell_complete=complete_project)
@click.option("--cwd", type=click.Path())
@click.option("--global", "glob", is_flag=True, help="Only the global drawer (not the project's memory).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def show_cmd(ctx: click.Context, name: str, key: str | None, cwd: str | None, glob: bool, as_json: bool) -> None:
    """Show one memory by name (or file name), with a staleness warning when it is old, its age and
    its sources (`memd why NAME` shows the lines it came from). A project's memory wins over the
    drawer's of the same name; --global shows the drawer's."""
    from memd.clock import system_clock

    home = get_home(ctx)
    if glob and (key or cwd):
        raise UsageError("give --global or --project/--cwd, not both")
    pkey = resolve_key(key, cwd)
    mems, _ = _memories(home, pkey, False)
    found = [m for m in mems if name in (m.name, m.path.name, m.path.stem) and (m.scope == "global" or not glob)]
    if not found:
        where = "the global drawer" if glob else f"project {pkey} or the global drawer"
        raise UsageError(f"no memory named {name!r} in {where} (see `memd list`)")
    m = min(found, key=lambda m: m.scope != "project")
    now = system_clock()
    age = max(0, int(now.timestamp() - m.mtime))
    data = {**memory_json(m, home, now), "body": m.body, "age_seconds": age, "sources": sources_of(m),
            "merged_from": merged_from(m), "future_dated": m.mtime > now.timestamp() + 60}  # fmt: skip
    if as_json:
        json_out(data)
        return
    if data["stale"]:
        click.echo(f"⚠ {data['stale']}\n")
    if m.mtime > now.timestamp() + 60:  # clamped to now above: say so rather than show a bare "0 min"
        click.echo(f"⚠ dated in the future ({_when(m.mtime)}): a wrong clock or a hand-set time; its age is taken as 0\n")
    echo(f"# {m.name}  ({m.type}, {data['file']})\n{m.description}\n")
    echo(m.body.rstrip())
    click.echo("")
    for line in provenance_lines(m, age):
        echo(line)


def provenance_lines(m: Any, age: int) -> list[str]:
    """Age and where it came from, short (`memd why NAME` prints the lines themselves)."""
    from memd.clock import local_text
    from memd.history.provenance import age_text, expected

    lines = [f"age: {age_text(age)} (last written {_when(m.mtime)})"]  # local time
    for s in sources_of(m):
        if s.get("via"):
            lines.append(f"source: {s['via']}" + (f" at {local_text(s['ts'])}" if s.get("ts") else ""))
            continue
        n = expected(set(s.get("uuids") or []), set(s.get("offsets") or []))
        lines.append(f"source: session {s.get('session') or '?'}, {n} message(s)" + (f", {local_text(s['ts'])}" if s.get("ts") else ""))
    names = merged_from(m)
    if names:
        lines.append(f"merged from: {', '.join(names)}")
    if not sources_of(m) and not names:
        sid = m.metadata.get("session")
        lines.append(f"source: session {sid} (no message ids kept)" if sid else "source: not recorded (written by hand?)")
    else:
        lines.append(f"(`memd why {m.name}` shows the lines it came from)")
    return lines


def _when(mtime: float) -> str:
    from datetime import UTC, datetime

    from memd.clock import local_text

    return local_text(datetime.fromtimestamp(mtime, UTC))


def sources_of(m: Any) -> list[dict[str, Any]]:
    from memd.history.provenance import sources_of as of

    return of(m)


def merged_from(m: Any) -> list[str]:
    from memd.history.provenance import merged_from as mf

    return mf(m)
