"""`memd connect` / `memd disconnect`: memd's hooks and MCP server in an agent's configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from memd.cli import command, get_home

if TYPE_CHECKING:
    from memd.tree import Home

AGENTS = ("claude", "mcp", "deepcode", "mewcode")

CONNECT_HELP = """Connect an agent to memd: its memory reaches the model without the agent doing more.

\b
claude  writes into the home's settings.json (strict JSON, every other key and
        every other tool's hooks kept; atomic; the old file backed up under
        memd/backups/):
          SessionStart      memd context --hook     date, global drawer, staleness rule
          UserPromptSubmit  memd recall --hook      up to 5 relevant memories, each once
          PreCompact        memd precompact --hook  asks the daemon for the session summary
        and registers the MCP server `memd` (memd mcp) in Claude Code's user-scope
        .claude.json ($CLAUDE_CONFIG_DIR/.claude.json, or ~/.claude.json for ~/.claude).
        Run it with the Claude home: `memd --home ~/.claude connect claude`.
mcp     with --print: the mcpServers entry for any MCP client (nothing is written).

--dry-run prints the exact change as a diff. Connecting twice is connecting once.
`memd disconnect claude` removes exactly what connect added.
"""


def _check_agent(agent: str) -> None:
    from memd.agent.connect import refuse_agent

    if agent in ("deepcode", "mewcode"):
        raise refuse_agent(agent)


@command("connect", help=CONNECT_HELP)
@click.argument("agent", type=click.Choice(AGENTS))
@click.option("--dry-run", is_flag=True, help="Print the exact change (a diff) and write nothing.")
@click.option("--print", "print_", is_flag=True, help="mcp: print the MCP client configuration snippet.")
@click.pass_context
def connect_cmd(ctx: click.Context, agent: str, dry_run: bool, print_: bool) -> None:
    from memd.agent import connect
    from memd.errors import UsageError

    _check_agent(agent)
    home = get_home(ctx)
    if agent == "mcp":
        if not print_:
            raise UsageError("`memd connect mcp` writes nothing: use --print and put the snippet in your client's "
                             "MCP configuration")  # fmt: skip
        click.echo(connect.mcp_snippet(home))
        return
    _run(home, connect_=True, dry_run=dry_run)


@command("disconnect")
@click.argument("agent", type=click.Choice(("claude",)))
@click.option("--dry-run", is_flag=True, help="Print the exact change (a diff) and write nothing.")
@click.pass_context
def disconnect_cmd(ctx: click.Context, agent: str, dry_run: bool) -> None:
    """Remove exactly what `memd connect claude` added: memd's hooks and its MCP server entry."""
    _run(get_home(ctx), connect_=False, dry_run=dry_run)


def _run(home: Home, *, connect_: bool, dry_run: bool) -> None:
    from memd.agent import connect
    from memd.clock import system_clock

    plan = connect.plan_claude(home, connect=connect_)
    for note in plan.notes:
        click.echo(f"memd: {note}", err=True)
    if not plan.changed:
        click.echo("already connected: nothing to change" if connect_ else "not connected: nothing to change")
        return
    if dry_run:
        for ch in plan.changed:
            click.echo(ch.diff(), nl=False)
        return
    for ch, backup in connect.apply(plan, home, system_clock()):
        saved = f" (backup: {backup})" if backup else " (new file)"
        click.echo(f"{'wrote' if connect_ else 'cleaned'} {ch.path}{saved}")
    if connect_:
        click.echo("Claude Code now loads memd's context at session start, recalls memories on each prompt, asks for "
                   "the session summary before compacting, and has memd's MCP tools; sessions already running "
                   "pick them up when restarted. `memd disconnect claude` removes exactly this.")  # fmt: skip
    else:
        click.echo("memd's hooks and MCP server are gone from Claude Code's configuration.")
