"""`memd ui`: the local page (memd/ui/): what memd knows, did and cost, and review, undo and edit."""

from __future__ import annotations

import click

from memd.cli import command, get_home


@command("ui")
@click.option("--port", default=0, type=click.IntRange(0, 65535), help="The port on 127.0.0.1 (default: a free one).")
@click.option("--no-open", is_flag=True, help="Print the address only; do not open a browser.")
@click.pass_context
def ui_cmd(ctx: click.Context, port: int, no_open: bool) -> None:
    """Serve a page on 127.0.0.1 for this home: memories, review, the daemon, cost, dreams and sync.

    The browser is opened when there is a display (else, or with --no-open, open the address yourself).

    The printed address carries a random token; only a browser that opened it gets in. Changes
    made on the page go through memd's write path and are undoable like the CLI's. Ctrl-C stops it.
    """
    from memd import settings as st
    from memd.clock import system_clock
    from memd.logs.events import configure
    from memd.ui.serve import serve

    home = get_home(ctx)
    configure(home, level=st.load(home.settings_file).memd.log_level, stderr_level="warning")

    def announce(url: str) -> None:
        click.echo(f"memd ui: {url}")
        click.echo("(only this address gets in: it carries the page's token; Ctrl-C stops the page)", err=True)

    try:
        serve(home, port=port, open_browser=not no_open, clock=system_clock, announce=announce)
    except OSError as exc:
        from memd.errors import UsageError

        raise UsageError(f"cannot listen on 127.0.0.1:{port} ({exc.strerror or exc})") from None
