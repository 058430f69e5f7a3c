"""`memd status`: is the daemon running, what has each job done, what is due (memd/daemon/status.py)."""

from __future__ import annotations

import click

from memd.cli import command, get_home, json_out


@command("status")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status_cmd(ctx: click.Context, as_json: bool) -> None:
    """Is the daemon running, what has each job done, what is due, what did models cost."""
    from memd.daemon.status import gather, render

    data = gather(get_home(ctx))
    if as_json:
        json_out(data)
    else:
        click.echo(render(data))
