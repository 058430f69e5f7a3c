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
claude  finds Claude Code's home as Claude Code does ($CLAUDE_CONFIG_DIR, else
        ~/.claude with ~/.claude.json; --home names another) and writes into its
        settings.json (strict JSON, only memd's members spliced in: every other
        byte and the file's mode kept; atomic; the old file backed up under
        memd/backups/):
          SessionStart      memd context --hook     date, global drawer, staleness rule
          UserPromptSubmit  memd recall --hook      up to 5 relevant memories, each once
          PreCompact        memd precompact --hook  asks the daemon for the session summary
        and registers the MCP server `memd` (memd mcp) in Claude Code's user-scope
        .claude.json ($CLAUDE_CONFIG_DIR/.claude.json, or ~/.claude.json for ~/.claude),
        and installs the custom commands /pause-memory (aliases /memory-pause,
        /toggle-memory) and /resume-memory under commands/.
        --auto-memory off also turns Claude Code's own auto-memory off
        (autoMemoryEnabled: false); keep (the default) leaves it as it is: both
        then write projects/<key>/memory/, and memd keeps every line and file
        of the other's (README, "Beside Claude Code's own memory").
mcp     with --print: the mcpServers entry for any MCP client (nothing is written).

--dry-run prints the exact change as a diff. Connecting twice is connecting once.
`memd disconnect claude` removes exactly what connect added: the files come back
byte for byte, and what connect created (a file, an "mcpServers") goes.
"""


def _check_agent(agent: str) -> None:
    from memd.agent.connect import refuse_agent

    if agent in ("deepcode", "mewcode"):
        raise refuse_agent(agent)


def claude_home(ctx: click.Context) -> Home:
    """The Claude Code home to connect: `--home`, else as Claude Code finds its own
    (`$CLAUDE_CONFIG_DIR`, else `~/.claude`). Anything that is not a Claude Code home is a
    usage error (exit 2): Claude Code reads hooks only from its own settings.json."""
    import os
    from pathlib import Path

    from memd.errors import UsageError
    from memd.settings import looks_like_claude_home
    from memd.tree import Home, resolve_home

    explicit = ctx.find_root().ensure_object(dict).get("home")
    if explicit:
        root, how = resolve_home(explicit), "--home"
    elif os.environ.get("CLAUDE_CONFIG_DIR"):
        root, how = Path(os.environ["CLAUDE_CONFIG_DIR"]).expanduser().absolute(), "$CLAUDE_CONFIG_DIR"
    else:
        root, how = Path.home() / ".claude", "Claude Code's default"
    if not root.is_dir():
        raise UsageError(f"{root} ({how}): no such directory; run Claude Code once, or name its home with --home")
    if not looks_like_claude_home(root):
        raise UsageError(f"{root} ({how}) is not a Claude Code home (no .claude.json, plugins or todos, and not "
                         "named .claude); name Claude Code's config directory with --home")  # fmt: skip
    return Home(root)


@command("connect", help=CONNECT_HELP)
@click.argument("agent", type=click.Choice(AGENTS))
@click.option("--dry-run", is_flag=True, help="Print the exact change (a diff) and write nothing.")
@click.option("--print", "print_", is_flag=True, help="mcp: print the MCP client configuration snippet.")
@click.option("--auto-memory", "auto_memory", type=click.Choice(("off", "keep")), default="keep", show_default=True,
              help="claude: turn Claude Code's own auto-memory off (autoMemoryEnabled: false), or keep it as it is.")
@click.pass_context
def connect_cmd(ctx: click.Context, agent: str, dry_run: bool, print_: bool, auto_memory: str) -> None:
    from memd.agent import connect
    from memd.errors import UsageError

    _check_agent(agent)
    if agent == "mcp":
        if not print_:
            raise UsageError("`memd connect mcp` writes nothing: use --print and put the snippet in your client's "
                             "MCP configuration")  # fmt: skip
        click.echo(connect.mcp_snippet(get_home(ctx)))
        return
    _run(claude_home(ctx), connect_=True, dry_run=dry_run, auto_memory=auto_memory)


@command("disconnect")
@click.argument("agent", type=click.Choice(("claude",)))
@click.option("--dry-run", is_flag=True, help="Print the exact change (a diff) and write nothing.")
@click.pass_context
def disconnect_cmd(ctx: click.Context, agent: str, dry_run: bool) -> None:
    """Remove exactly what `memd connect claude` added: memd's hooks, its MCP server entry, the pause
    commands it installed and its autoMemoryEnabled; the files come back byte for byte."""
    _run(claude_home(ctx), connect_=False, dry_run=dry_run)


def _run(home: Home, *, connect_: bool, dry_run: bool, auto_memory: str = "keep") -> None:
    from memd.agent import connect
    from memd.clock import system_clock

    plan = connect.plan_claude(home, connect=connect_, auto_memory=auto_memory)
    for note in plan.notes:
        click.echo(f"memd: {note}", err=True)
    if not plan.any:
        click.echo("already connected: nothing to change" if connect_ else "not connected: nothing to change")
    elif dry_run:
        for ch in plan.changed:
            click.echo(ch.diff(), nl=False)
        for path in plan.commands_add:
            click.echo(f"+ {path} (a custom command)")
        for path in plan.commands_remove:
            click.echo(f"- {path}")
        return
    else:
        for ch, backup in connect.apply(plan, home, system_clock()):
            saved = f" (backup: {backup})" if backup else " (new file)" if ch.old_text is None else ""
            verb = "removed" if ch.new_text is None else "wrote" if connect_ else "restored"
            click.echo(f"{verb} {ch.path}{saved}")
        if plan.commands_add or plan.commands_remove:
            names = [p.stem for p in (plan.commands_add or plan.commands_remove)]
            where = next(iter(plan.commands_add or plan.commands_remove)).parent
            click.echo(f"{'installed' if connect_ else 'removed'} the custom commands "
                       f"{', '.join('/' + n for n in names)} in {where}")  # fmt: skip
    if plan.kept_commands:
        click.echo("memd: your own " + ", ".join(f"commands/{n}.md" for n in plan.kept_commands)
                   + " left as it is (memd installs only where nothing is)", err=True)  # fmt: skip
    if connect_:
        _explain(home)
    elif plan.any:
        click.echo("memd's hooks, MCP server and commands are gone from Claude Code's configuration.")


def _explain(home: Home) -> None:
    """What a connect leaves the user to know: auto-memory beside memd, and the daemon the hooks need."""
    from memd.agent import connect
    from memd.daemon.lock import daemon_alive

    try:
        text = home.settings_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = None
    if connect.auto_memory_on(text):
        click.echo("Claude Code's own auto-memory is on: it writes projects/<key>/memory/ too, and memd keeps every "
                   "line and file of its own there (README, \"Beside Claude Code's own memory\"). "
                   "`memd connect claude --auto-memory off` leaves memory to memd; disconnect restores the setting.")
    else:
        click.echo("Claude Code's own auto-memory is off (autoMemoryEnabled: false): memd alone keeps the memory; "
                   "`memd connect claude --auto-memory keep` puts back what was there.")  # fmt: skip
    try:
        alive = daemon_alive(home)
    except Exception:
        alive = None
    where = f"memd --home {home.root}"
    if alive:
        click.echo(f"The hooks bring the memory of {home.root}; a memd daemon maintains it (pid {alive.get('pid')}).")
    else:
        click.echo(f"The hooks bring the memory of {home.root}, which a memd daemon must maintain, and none runs for "
                   f"it: `{where} install` (a service) or `{where} run`.")  # fmt: skip
