"""`memd completion`: the shell completion script."""

from __future__ import annotations

import click

from memd.cli import command, main


@command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_cmd(shell: str) -> None:
    """Print the shell completion script: `eval "$(memd completion bash)"`."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None
    click.echo(cls(main, {}, "memd", "_MEMD_COMPLETE").source())
