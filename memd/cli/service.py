"""`memd install` and `memd uninstall`: memd as a user service (memd/daemon/service.py)."""

from __future__ import annotations

import sys

import click

from memd.cli import command, get_home


@command("install")
@click.option("--dry-run", is_flag=True, help="Print what would be written and run; change nothing.")
@click.pass_context
def install_cmd(ctx: click.Context, dry_run: bool) -> None:
    """Install memd as a user service (systemd on Linux, launchd on macOS) and start it."""
    from memd.daemon import service

    sys.exit(service.install(get_home(ctx), dry_run=dry_run, echo=click.echo))


@command("uninstall")
@click.option("--dry-run", is_flag=True)
@click.pass_context
def uninstall_cmd(ctx: click.Context, dry_run: bool) -> None:
    """Stop and remove the user service."""
    from memd.daemon import service

    sys.exit(service.uninstall(dry_run=dry_run, echo=click.echo))
