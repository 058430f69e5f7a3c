"""`memd recall`: the recall selector from the shell (SPEC §7b.1), what an agent hook calls."""

from __future__ import annotations

from typing import Any

import click

from memd.cli import command, get_home, json_out
from memd.cli.completion import complete_project, complete_session

RECALL_HELP = """Pick at most 5 memories relevant to QUERY, or none, within 8 seconds.

Candidates are the front matter of at most 200 memories of the project and the
global drawer: search hits for QUERY first, then the newest. With --session,
files already surfaced in that session are skipped, and the ones returned are
remembered for it. A small model selects; with the offline provider search
ranks instead, with a relevance floor: only memories holding one of the
query's telling words come back (stopwords, and words found in most memories,
do not count), never padding. Any failure (no key, budget, timeout, API
error, malformed answer) returns nothing, exit 0, with a warning on stderr.

\b
--hook: run as Claude Code's UserPromptSubmit hook: the prompt, session and
directory come from the hook's JSON on stdin; the memories (each with its age,
and the staleness warning when older than a day) are answered as
{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": ...}},
nothing when none is relevant; never one already surfaced in the session.
On any error it prints nothing and exits 0.

\b
--json prints a list; each element has:
  file         path relative to the home ('/'-separated); absolute for a
               project's own .mewcode/memory/ (MewCode)
  name         the memory's name
  description  its one-line description
  type         user | feedback | project | reference
  scope        global (the drawer) | project
  project_key  the project's key, null for the drawer
  mtime        modification time, seconds since the epoch
  stale        the staleness warning when older than a day, else null
  body         the Markdown body (only with --body)
"""


def recall_json(c: Any, now: Any, bodies: bool) -> dict[str, Any]:
    from memd.index.staleness import staleness_note

    row = {
        "file": c.file, "name": c.name, "description": c.description, "type": c.type, "scope": c.scope,
        "project_key": c.project_key, "mtime": c.mtime, "stale": staleness_note(c.mtime, now),
    }  # fmt: skip
    if bodies:
        row["body"] = c.body
    return row


def _echo_text(rows: list[dict[str, Any]], query: str) -> None:
    if not rows:
        click.echo(f"no memory recalled for {query!r}")
        return
    for r in rows:
        click.echo(f"{r['file']}  [{r['type']}, {r['scope']}]  {r['name']} — {r['description']}")
        if r["stale"]:
            click.echo(f"    ⚠ {r['stale']}")
        if r.get("body"):
            click.echo("")
            click.echo(r["body"].rstrip())
            click.echo("")


@command("recall", help=RECALL_HELP)
@click.argument("query", required=False)
@click.option("--project", "key", help="Project key (default: the project of the current directory).",
              shell_complete=complete_project)
@click.option("--cwd", type=click.Path(), help="Recall for the project this directory belongs to.")
@click.option("--session", shell_complete=complete_session, help="Session id (or a unique prefix): skip what it was already shown, and remember what is shown now.")
@click.option("--limit", default=5, show_default=True, type=click.IntRange(1, 5), help="At most this many memories.")
@click.option("--body", "bodies", is_flag=True, help="Include each memory's body.")
@click.option("--json", "as_json", is_flag=True, help="JSON output (fields above).")
@click.option("--hook", is_flag=True, help="Run as a UserPromptSubmit hook (JSON on stdin and stdout).")
@click.pass_context
def recall_cmd(ctx: click.Context, query: str | None, key: str | None, cwd: str | None, session: str | None,
               limit: int, bodies: bool, as_json: bool, hook: bool) -> None:  # fmt: skip
    if hook:
        import sys

        from memd.agent import hooks

        try:
            home = get_home(ctx)
        except Exception:
            sys.exit(0)
        sys.exit(hooks.command("recall", home))
    if not query:
        from memd.errors import UsageError

        raise UsageError("recall needs a QUERY (or --hook, which reads the prompt from stdin)")
    from memd import settings as st
    from memd.agent.recall import recall
    from memd.cli.memories import ensure_search_db, resolve_key
    from memd.index.search import open_readonly
    from memd.job.context import make_context
    from memd.ledger.lookup import session_known
    from memd.logs.events import cli_defaults, get_logger

    cli_defaults()  # a fast command: logging is set up only off the hook path
    home = get_home(ctx)
    if session is not None:  # an id or a unique prefix; in any project (its transcript lives under its cwd's key)
        _, session = session_known(home, session)
    pkey = resolve_key(key, cwd)
    ensure_search_db(home)
    jctx = make_context(home, st.load(home.settings_file), log=get_logger("memd.recall"))
    from memd.agent.recall import ask_nearest
    from memd.index.nearest import CLI_WAIT_S

    nearest = ask_nearest(home.memd_dir, query, pkey, wait=CLI_WAIT_S)  # memd[semantic]: [] without the daemon's socket
    search = open_readonly(home.search_db)
    try:
        result = recall(jctx, search, query, project_key=pkey, session=session, limit=limit, bodies=bodies,
                        nearest=nearest)  # fmt: skip
    finally:
        search.close()
        jctx.conn.close()
    now = jctx.now()
    rows = [recall_json(c, now, bodies) for c in result.memories]
    if as_json:
        json_out(rows)
    else:
        _echo_text(rows, query)
