"""The one `memd` command. Every read command takes `--json`; its fields are documented
in the README and are a stable interface.

Each module of this package declares one group of commands; `COMMAND_MODULES` says
which, and a command's module is imported only when the command runs, so `memd --help`,
`memd status` and the hook commands start fast.
"""

from __future__ import annotations

import functools
import importlib
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

import click

from memd import __version__
from memd.errors import MemdError
from memd.output import error_answer
from memd.output import json_out as json_out  # the commands write their documents through memd.cli

F = Callable[..., Any]

# Which module of memd.cli declares each command (tests/cli/test_command_table.py holds
# this equal to what the modules register).
COMMAND_MODULES: dict[str, str] = {
    **dict.fromkeys(("run", "run-now", "jobs", "logs"), "daemon"),
    "status": "status",
    **dict.fromkeys(("install", "uninstall"), "service"),
    **dict.fromkeys(("config", "key"), "config"),
    **dict.fromkeys(("scan", "sessions", "pause", "resume"), "sessions"),
    **dict.fromkeys(("search", "list", "show"), "memories"),
    "recall": "recall",
    **dict.fromkeys(("history", "undo"), "history"),
    "doctor": "doctor",
    "completion": "completion",
    "demo": "demo",
    "review": "review",
    **dict.fromkeys(("remember", "edit", "forget", "why", "readonly"), "control"),
    **dict.fromkeys(("context", "precompact"), "context"),
    **dict.fromkeys(("connect", "disconnect"), "connect"),
    "mcp": "mcp",
    **dict.fromkeys(("sync", "export", "import"), "sync"),
    "cost": "cost",
    "ui": "ui",
    "backfill": "backfill",
    "provider": "provider",
    "init": "init",
}

# Commands that must start fast and never log: they skip importing structlog (`scan` sets logging
# up on its first warning: memd.ledger.scan.DeferredLog).
FAST_COMMANDS = frozenset({"status", "sessions", "key", "jobs", "config", "context", "precompact", "recall", "mcp",
                           "scan", "search", "list", None})  # fmt: skip

HOME_HELP = "The agent home to work on (default $DEEPCODE_HOME, else ~/.deepcode)."


def _home_callback(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.ensure_object(dict)["home"] = value


def home_option(f: F) -> F:
    """`--home` on every command as well as on the group, so it may come anywhere."""
    return click.option(
        "--home", "home_opt", expose_value=False, callback=_home_callback, help=HOME_HELP,
        type=click.Path(file_okay=False), is_eager=True,
    )(f)  # fmt: skip


# Commands that may start on a home that does not exist yet (they create it, or need none).
CREATES_HOME = frozenset({"run", "install", "uninstall", "demo", "key", "completion", "import"})


def get_home(ctx: click.Context) -> Any:
    """The home of `--home` / `$DEEPCODE_HOME`. One that does not exist is a usage error (exit 2) for
    every command but those that create it: a typo must not get databases written into a new tree."""
    from memd.errors import UsageError
    from memd.tree import Home, resolve_home

    obj = ctx.find_root().ensure_object(dict)
    root = resolve_home(obj.get("home"))
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root}: the home is not a directory (check --home and $DEEPCODE_HOME)")
    if not root.exists() and ctx.info_name not in CREATES_HOME:
        raise UsageError(f"{root}: no such home (check --home and $DEEPCODE_HOME; `memd run` creates one)")
    return Home(root)


def cli_logging(home: Any, level: str, stderr_level: str = "warning") -> None:
    """A one-shot command's logging (`memd.logs.events.command_logging`)."""
    from memd.logs.events import command_logging

    command_logging(home, level, stderr_level)


def handles_errors(f: F) -> F:
    """A MemdError (or a database held locked) becomes one line on stderr and its exit code
    (`memd.output.error_answer`); bugs keep their traceback."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except (MemdError, sqlite3.OperationalError) as exc:
            answer = error_answer(exc)
            if answer is None:
                raise
            click.echo(answer[0], err=True)
            sys.exit(answer[1])

    return wrapper


def command(*dargs: Any, **dkwargs: Any) -> Callable[[F], click.Command]:
    """A `memd` sub-command with `--home` and one-line error handling."""

    def deco(f: F) -> click.Command:
        return main.command(*dargs, **dkwargs)(home_option(handles_errors(f)))

    return deco


class LazyGroup(click.Group):
    """A group whose sub-commands are imported on first use."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"{__name__}.{module}")
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_MODULES) | set(self.commands))


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memd")
@home_option
@click.pass_context
def main(ctx: click.Context) -> None:
    """memd keeps a coding agent's long-term memory in shape in the background.

    Exit codes: 0 ok, 1 error, 2 usage, 3 already running, 4 model API,
    5 configuration, 75 busy (a lock was held; try again).
    """
    ctx.ensure_object(dict)
    if ctx.invoked_subcommand not in FAST_COMMANDS:
        from memd.logs.events import cli_defaults

        cli_defaults()
