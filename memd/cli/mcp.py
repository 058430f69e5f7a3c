"""`memd mcp`: memd's memory tools for any agent, as a stdio MCP server."""

from __future__ import annotations

import click

from memd.cli import command, get_home


@command("mcp")
@click.pass_context
def mcp_cmd(ctx: click.Context) -> None:
    """Serve memd's memory over MCP on stdin/stdout (what `memd connect` registers).

    \b
    Tools: search_memory, read_memory, list_memories, recall (reads, no lock),
    remember, forget (validated, redacted, locked, atomic, indexed; `memd undo`
    reverts them). The project is the one of the working directory the client
    starts the server in (or $CLAUDE_PROJECT_DIR). For a client's configuration:
    `memd connect mcp --print`.
    """
    from memd.agent.mcpwire import serve  # the SDK waits for the first tool call (start-up window)

    serve(get_home(ctx))
