"""`memd context` (what an agent loads at session start) and `memd precompact` (PreCompact hook)."""

from __future__ import annotations

import sys

import click

from memd.cli import command, get_home, json_out

CONTEXT_HELP = """The block an agent loads at the start of a session in a directory (SPEC §11).

Today's date, the global drawer as memd renders it (within
memory.global.maxBytes), the staleness rule, and what the agent does not load
itself: the instruction files (DEEPCODE.md or MEWCODE.md: local, project,
user-level; `@include <path>` lines pulled in, relative or ~/ paths inside the
project root or the home, at most 5 deep, cycles refused) and the project's
MEMORY.md. Claude Code loads CLAUDE.md and MEMORY.md itself: `--agent claude`
leaves them out.

\b
--hook: run as Claude Code's SessionStart hook: read the hook's JSON on stdin
(session_id, transcript_path, cwd, source) and answer
{"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": ...}}
(at most 9,500 characters). On any error it prints nothing and exits 0.
"""


@command("context", help=CONTEXT_HELP)
@click.option("--cwd", type=click.Path(file_okay=False), help="The session's directory (default: the current one).")
@click.option("--agent", type=click.Choice(["claude", "deepcode", "mewcode"]), default=None,
              help="Leave out what this agent loads itself (default: deepcode; claude with --hook).")
@click.option("--hook", is_flag=True, help="Run as a SessionStart hook (JSON on stdin and stdout).")
@click.option("--json", "as_json", is_flag=True, help="The block and how it was made, as JSON.")
@click.pass_context
def context_cmd(ctx: click.Context, cwd: str | None, agent: str | None, hook: bool, as_json: bool) -> None:
    if hook:
        from memd.agent import hooks

        try:
            home = get_home(ctx)
        except Exception:
            sys.exit(0)
        sys.exit(hooks.command("context", home, agent=agent))
    import os

    from memd import settings as st
    from memd.agent import context as inject
    from memd.logs.events import cli_defaults

    cli_defaults()
    home = get_home(ctx)
    block = inject.build(home, st.load(home.settings_file), os.path.abspath(cwd or "."), inject.AGENTS[agent or "deepcode"])
    for inc in block.includes:
        if inc.reason:
            click.echo(f"memd: {inc.file}: @include {inc.target} not included: {inc.reason}", err=True)
    if as_json:
        json_out(block.as_json())
    else:
        click.echo(block.text(), nl=False)


@command("precompact")
@click.option("--hook", is_flag=True, required=True, help="Run as Claude Code's PreCompact hook (JSON on stdin).")
@click.pass_context
def precompact_cmd(ctx: click.Context, hook: bool) -> None:
    """PreCompact hook: ask the daemon to update the session's summary now, without waiting for it.

    Reads the hook's JSON on stdin (session_id, transcript_path, trigger) and
    leaves a request in memd's state; the running daemon's next due-check (within
    30 s) runs the summary job for that session. Prints nothing; exits 0 always.
    """
    from memd.agent import hooks

    try:
        home = get_home(ctx)
    except Exception:
        sys.exit(0)
    sys.exit(hooks.command("precompact", home))
