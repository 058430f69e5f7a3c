"""The user's direct control over memory: remember, edit, forget, why, readonly (memd/write/control.py,
memd/history/provenance.py, memd/memory/readonly.py hold the logic)."""

from __future__ import annotations

from typing import Any

import click

from memd.cli import command, get_home, json_out
from memd.cli.completion import complete_memory, complete_project, complete_session
from memd.errors import UsageError


def _target(key: str | None, cwd: str | None, glob: bool) -> tuple[str, str | None]:
    """(project key, forced scope) from `--project KEY | --cwd PATH | --global`."""
    from memd.keys import project_key

    if sum(bool(x) for x in (key, cwd, glob)) > 1:
        raise UsageError("give one of --project, --cwd, --global")
    if key:
        from memd.tree import Place

        try:
            Place.project(key)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return key, "project"
    if cwd:
        return project_key(cwd), "project"
    return project_key("."), ("global" if glob else None)


def _context(ctx: click.Context, name: str) -> Any:
    from memd import settings as st
    from memd.cli import cli_logging
    from memd.job.context import make_context
    from memd.logs.events import get_logger

    home = get_home(ctx)
    s = st.load(home.settings_file)
    cli_logging(home, s.memd.log_level)
    return make_context(home, s, log=get_logger(f"memd.{name}"))


def _on_wait(as_json: bool) -> Any:
    def on_wait(scope: Any) -> None:
        if not as_json:
            click.echo(f"waiting for the lock on {scope} (held by another memd process)…", err=True)

    return on_wait


def _rel(home: Any, path: Any) -> str:
    try:
        return str(path.relative_to(home.root))
    except ValueError:
        return str(path)


def _undo_hint(runs: list[str]) -> str:
    return f"run {runs[0]}; `memd undo {runs[0]}` reverts it" if runs else "nothing changed"


SCOPE_OPTIONS = [
    click.option("--project", "key", help="The project's memory (a project key).", shell_complete=complete_project),
    click.option("--cwd", type=click.Path(), help="The memory of the project this directory belongs to."),
    click.option("--global", "glob", is_flag=True, help="The global drawer."),
]


def scope_options(f: Any) -> Any:
    for opt in reversed(SCOPE_OPTIONS):
        f = opt(f)
    return f


@command("remember")
@click.argument("text")
@scope_options
@click.option("--type", "mtype", type=click.Choice(["user", "feedback", "project", "reference"]),
              help="The memory's type (default: decided by the model, or the offline rules).")  # fmt: skip
@click.option("--name", help="The memory's name (default: derived from the text, after redaction).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def remember_cmd(ctx: click.Context, text: str, key: str | None, cwd: str | None, glob: bool, mtype: str | None,
                 name: str | None, as_json: bool) -> None:  # fmt: skip
    """Remember TEXT as one memory, now, through memd's write path (undo with `memd undo`).

    Secrets are redacted before anything is derived from the text. Without --project, --cwd
    or --global, the scope follows the type: preferences and ways of working go to the global
    drawer, decisions and references to the current directory's project. With a model
    provider the small model types, names and scopes it; offline, the offline rules do.
    """
    from memd.write import control

    pkey, scope = _target(key, cwd, glob)
    jctx = _context(ctx, "remember")
    try:
        d = control.decide(jctx, text, scope=scope, key=pkey, mtype=mtype, name=name)
        applied, path = control.remember(jctx, d, on_wait=_on_wait(as_json))
    finally:
        jctx.conn.close()
    op = d.op
    home = jctx.home
    status = "added" if applied.added else "unchanged"
    row = {"status": status, "name": op.name, "type": op.type, "scope": op.scope,
           "project_key": None if op.scope == "global" else pkey, "description": op.description,
           "file": _rel(home, path) if path else None, "provider": d.provider,
           "run": applied.runs[0] if applied.runs else None, "notes": d.notes}  # fmt: skip
    if as_json:
        json_out(row)
        return
    for n in d.notes:
        click.echo(f"memd: {n}", err=True)
    where = "global drawer" if op.scope == "global" else f"project {pkey}"
    if status == "unchanged":
        click.echo(f"already remembered: {op.name} ({row['file']})")
        return
    click.echo(f"remembered {op.name} ({op.type}, {where}) in {row['file']} — {_undo_hint(applied.runs)}")


@command("forget")
@click.argument("name", shell_complete=complete_memory)
@scope_options
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def forget_cmd(ctx: click.Context, name: str, key: str | None, cwd: str | None, glob: bool, as_json: bool) -> None:
    """Delete the memory NAME (the project's first, then the drawer's) through memd's write path."""
    from memd.write import control

    pkey, scope = _target(key, cwd, glob)
    jctx = _context(ctx, "forget")
    try:
        m = control.find_memory(jctx.home, name, pkey, scope)
        applied = control.forget(jctx, m, on_wait=_on_wait(as_json))
    finally:
        jctx.conn.close()
    row = {"name": m.name, "file": _rel(jctx.home, m.path), "scope": m.scope, "project_key": m.project_key,
           "run": applied.runs[0] if applied.runs else None}  # fmt: skip
    if as_json:
        json_out(row)
        return
    click.echo(f"forgot {m.name} ({row['file']}) — {_undo_hint(applied.runs)}")


@command("edit")
@click.argument("name", shell_complete=complete_memory)
@scope_options
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def edit_cmd(ctx: click.Context, name: str, key: str | None, cwd: str | None, glob: bool, as_json: bool) -> None:
    """Edit the memory NAME in $EDITOR (a copy), validated on save, through memd's write path.

    An invalid file is refused with the reason and the memory is left as it was (your edit
    stays in the printed temporary file). A memory changed meanwhile is not overwritten.
    """
    from memd.memory.change import StaleChange, sha
    from memd.write import apply as memwrite
    from memd.write import control

    pkey, scope = _target(key, cwd, glob)
    jctx = _context(ctx, "edit")
    try:
        m = control.find_memory(jctx.home, name, pkey, scope)
        data = m.path.read_bytes()
        text, copy = control.edit_copy(data.decode("utf-8", "replace"), m.path.name)
        if text.encode("utf-8") == data:
            control.discard_copy(copy)
            applied = None
        else:
            try:
                applied = control.save_edit(jctx, m, sha(data), text, on_wait=_on_wait(as_json))
            except memwrite.InvalidMemory as exc:
                raise memwrite.InvalidMemory(f"{exc}; {_rel(jctx.home, m.path)} is unchanged "
                                             f"(your edit is kept in {copy})") from None  # fmt: skip
            except StaleChange as exc:
                raise StaleChange(f"not saved: {exc} (your edit is kept in {copy})") from None
            control.discard_copy(copy)
    finally:
        jctx.conn.close()
    row = {"name": m.name, "file": _rel(jctx.home, m.path), "status": "updated" if applied else "unchanged",
           "run": applied.runs[0] if applied and applied.runs else None}  # fmt: skip
    if as_json:
        json_out(row)
        return
    if applied is None:
        click.echo(f"no change to {row['file']}")
    else:
        click.echo(f"saved {row['file']} — {_undo_hint(applied.runs)}")


@command("why")
@click.argument("name", shell_complete=complete_memory)
@scope_options
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def why_cmd(ctx: click.Context, name: str, key: str | None, cwd: str | None, glob: bool, as_json: bool) -> None:
    """Where the memory NAME came from: the user's own lines (redacted) that led to it, with session
    and time, and for a merged memory the memories it was made of."""
    from memd.clock import system_clock
    from memd.history import provenance
    from memd.write import control

    pkey, scope = _target(key, cwd, glob)
    home = get_home(ctx)
    m = control.find_memory(home, name, pkey, scope)
    data = provenance.explain(home, m, system_clock())
    if as_json:
        json_out(data)
        return
    click.echo("\n".join(provenance.render(data)))


@command("readonly")
@click.argument("switch", required=False, type=click.Choice(["on", "off"]))
@click.option("--project", "keys", multiple=True, help="A project's memory (a project key; repeatable).")
@click.option("--cwd", type=click.Path(), help="The project this directory belongs to.")
@click.option("--global", "glob", is_flag=True, help="The global drawer.")
@click.option("--session", "sessions", multiple=True, help="Whatever this session's extraction would write.",
              shell_complete=complete_session)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def readonly_cmd(ctx: click.Context, switch: str | None, keys: tuple[str, ...], cwd: str | None, glob: bool,
                 sessions: tuple[str, ...], as_json: bool) -> None:  # fmt: skip
    """Show the read-only switches, or turn one on or off: memory there is only read.

    \b
    memd readonly                       what is read-only now
    memd readonly on --project KEY      memd writes nothing to that project's memory
    memd readonly on --global           ... nor to the global drawer
    memd readonly on --session ID       ... nor anything that session's extraction would write
    memd readonly off ...               writes resume

    Recall, search and the indexes go on. `memory.readOnly: true` in settings.json makes
    everything read-only.
    """
    from memd import settings as st
    from memd.clock import local_text, system_clock
    from memd.keys import project_key
    from memd.memory import readonly
    from memd.tree import Place

    home = get_home(ctx)
    projects = list(keys) + ([project_key(cwd)] if cwd else [])
    for k in projects:
        try:
            Place.project(k)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if switch is None and (projects or glob or sessions):
        raise UsageError("say `on` or `off` (e.g. `memd readonly on --project KEY`)")
    if switch is not None and not (projects or glob or sessions):
        raise UsageError("name what: --project KEY, --cwd PATH, --global or --session ID")
    if switch is not None:
        readonly.set_switch(home, on=switch == "on", now=system_clock(), glob=glob, projects=projects,
                            sessions=sessions)  # fmt: skip
    sw = readonly.load(home, st.load(home.settings_file))
    if as_json:
        json_out(sw.as_json())
        return
    lines = []
    if sw.everything:
        lines.append("everything (memory.readOnly is true in settings.json)")
    if sw.global_:
        lines.append(f"global drawer (since {local_text(sw.global_)})")
    lines.extend(f"project {k} (since {local_text(v)})" for k, v in sw.projects.items())
    lines.extend(f"session {k} (since {local_text(v)})" for k, v in sw.sessions.items())
    click.echo("read-only: " + ("nothing" if not lines else "\n  " + "\n  ".join(lines)))
