"""`memd completion`: the shell completion script, and what it completes: the names commands take
(jobs, projects, memories, sessions and runs).

Each completer is a click `shell_complete` callback. It reads the home named on the command
line (`--home`, else `$DEEPCODE_HOME`, else ~/.deepcode) read-only, and on any trouble
offers nothing: completion never prints an error into the user's command line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import click
from click.shell_completion import CompletionItem

from memd.cli import command, main


@command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_cmd(shell: str) -> None:
    """Print the shell completion script: `eval "$(memd completion bash)"`."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None
    click.echo(cls(main, {}, "memd", "_MEMD_COMPLETE").source())


MAX_ITEMS = 200


def _home(ctx: click.Context) -> Any:
    from memd.tree import Home, resolve_home

    root = resolve_home((ctx.find_root().obj or {}).get("home") if isinstance(ctx.find_root().obj, dict) else None)
    return Home(root) if root.is_dir() else None


def _items(names: Iterable[str], incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(n) for n in sorted(set(names)) if n.startswith(incomplete)][:MAX_ITEMS]


def _safe(names: Callable[[Any], Iterable[str]]) -> Callable[[click.Context, click.Parameter, str], list[CompletionItem]]:
    def complete(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        with contextlib.suppress(Exception):
            from memd.logs.events import cli_defaults

            cli_defaults()  # a log line must not land in the shell's list of completions
            home = _home(ctx)
            return _items(names(home), incomplete) if home is not None else []
        return []

    return complete


def complete_job(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    from memd.daemon import registry

    return _items([*registry.JOB_NAMES, "all"] if ctx.info_name == "run-now" else registry.JOB_NAMES, incomplete)


def _ledger_column(home: Any, sql: str) -> list[str]:
    from memd import state

    if not home.state_db.exists():
        return []
    conn = state.connect(home.state_db, readonly=True)
    try:
        return [str(r[0]) for r in conn.execute(sql)]
    finally:
        conn.close()


def _sessions(home: Any) -> list[str]:
    return _ledger_column(home, "SELECT session_id FROM sessions WHERE is_subagent=0 ORDER BY last_ts DESC LIMIT 1000")


def _projects(home: Any) -> list[str]:
    from memd.ledger.lookup import project_keys

    return project_keys(home)


def _memories(home: Any) -> list[str]:
    from memd.discovery import list_memory_dirs
    from memd.memory.scan import scan_dir

    return [m.name for scope, key, path in list_memory_dirs(home) for m in scan_dir(path, scope, key).memories]


def _runs(home: Any) -> list[str]:
    from memd.history.runs import list_runs

    return [str(r["run"]) for r in list_runs(home)]


complete_session = _safe(_sessions)
complete_project = _safe(_projects)
complete_memory = _safe(_memories)
complete_run = _safe(_runs)
