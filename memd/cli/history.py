"""`memd history` and `memd undo`: what dreams changed, and taking a change back.

`--json` output is a stable interface (README): `history` prints a list of
runs, oldest first, each `{"run", "scope", "kind": "dream"|"undo"|"write", "job",
"reason", "time", "provider", "model", "forced", "undo_of", "memories_before",
"memories_after", "counts", "changes", "path"}` (`write` runs: every other memd
write — extraction, remember, forget, MCP, migrations — with `changes` listing
added/updated/deleted file names; `damaged`: an entry whose run.json cannot be read,
with the reason, which cannot be undone); `undo` prints the undo's own run record, or a
list of them when one run changed several scopes.
"""

from __future__ import annotations

from typing import Any

import click

from memd.cli import command, get_home, json_out
from memd.cli.completion import complete_project, complete_run
from memd.errors import UsageError
from memd.tree import Place

UNDO_LOCK_WAIT = 600.0


def _scope(key: str | None, glob: bool) -> Any:
    """The Place named by `--project KEY` / `--global`, or None when neither is given."""

    if key and glob:
        raise UsageError("give --project or --global, not both")
    if glob:
        return Place("global")
    if key:
        try:
            return Place.parse(f"project:{key}")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return None


def run_json(r: dict[str, Any]) -> dict[str, Any]:
    raw = r.get("changes")
    changes: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return {
        "run": r.get("run"), "scope": r.get("scope"), "kind": r.get("kind"), "job": r.get("job"),
        "reason": r.get("reason"), "time": r.get("time"),
        "provider": r.get("provider"), "model": r.get("model"), "forced": bool(r.get("forced")),
        "undo_of": r.get("undo_of"), "memories_before": r.get("memories_before"),
        "memories_after": r.get("memories_after"),
        "counts": {k: len(v) for k, v in changes.items() if isinstance(v, list)},
        "changes": changes, "path": r.get("path"),
    }  # fmt: skip


def _names(items: list[Any]) -> str:
    return ", ".join(str(i.get("name") or i.get("file")) if isinstance(i, dict) else str(i) for i in items)


def _reason(item: dict[str, Any]) -> str:
    return f" — {item['reason']}" if item.get("reason") else ""


def render_run(r: dict[str, Any]) -> list[str]:
    """A run as text lines: a heading, then one line per change."""
    who = r["kind"] or "?"
    if r["kind"] == "dream":
        who += f" ({r['provider'] or '?'}{', forced' if r['forced'] else ''})"
    elif r["kind"] == "undo":
        who += f" of {r['undo_of']}"
    elif r["kind"] == "write":
        who = f"{r.get('job') or 'write'}: {r.get('reason') or ''}".rstrip(": ")
    from memd.clock import local_text

    lines = [f"{r['run']}  {r['scope']}  {who}  {local_text(r['time']) if r['time'] else ''}".rstrip()]
    if r["kind"] == "damaged":
        return [*lines, f"  {r.get('reason') or 'run.json is damaged'}"]
    c = r["changes"]
    if r["kind"] == "write":
        for key in ("added", "updated", "deleted"):
            if c.get(key):
                lines.append(f"  {key:<8} {', '.join(map(str, c[key]))}")
        return lines if len(lines) > 1 else [*lines, "  (no file changed)"]
    for m in c.get("merged", []):
        lines.append(f"  merged   {_names(m.get('sources', []))} → {m.get('result', {}).get('name')}{_reason(m)}")
    for key, verb in (("rewritten", "rewrote"), ("deleted", "deleted"), ("added", "added")):
        for item in c.get(key, []):
            lines.append(f"  {verb:<8} {item.get('name')} ({item.get('file')}){_reason(item)}")
    for key in ("restored", "removed", "brought_back"):
        if c.get(key):
            lines.append(f"  {key.replace('_', ' '):<12} {', '.join(c[key])}")
    if len(lines) == 1:
        lines.append("  (no file changed)")
    return lines


@command("history")
@click.option("--project", "key", help="Only this project's memory.", shell_complete=complete_project)
@click.option("--global", "glob", is_flag=True, help="Only the global drawer.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def history_cmd(ctx: click.Context, key: str | None, glob: bool, as_json: bool) -> None:
    """Past dream runs (and undos), oldest first, with what each changed and why.

    Without --project or --global: every scope.
    """
    from memd.history.runs import list_runs
    from memd.ledger.lookup import check_project

    home = get_home(ctx)
    rows = [run_json(r) for r in list_runs(home, _scope(key, glob), damaged=True)]  # a damaged entry is shown
    if key and not rows:
        check_project(home, key)  # no history: a typo is exit 2, a known project just has none yet
    if as_json:
        json_out(rows)
        return
    if not rows:
        click.echo("no history yet")
        return
    for r in rows:
        click.echo("\n".join(render_run(r)))


@command("undo")
@click.argument("run_id", metavar="[RUN]", required=False, shell_complete=complete_run)
@click.option("--project", "key", help="The project whose memory to restore.", shell_complete=complete_project)
@click.option("--global", "glob", is_flag=True, help="Restore the global drawer.")
@click.option("--no-wait", is_flag=True, help="Exit 75 at once if the scope's lock is held.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def undo_cmd(ctx: click.Context, run_id: str | None, key: str | None, glob: bool, no_wait: bool, as_json: bool) -> None:
    """Restore a memory scope exactly as it was before RUN (default: the scope's latest run).

    The present is snapshotted first, so an undo can itself be undone
    (`memd undo` again). Runs under the scope's lock, like a dream.
    """
    from memd import settings as st
    from memd.cli import cli_logging
    from memd.clock import system_clock
    from memd.git.commits import after_run
    from memd.history import runs as history
    from memd.history import store
    from memd.history.lookup import resolve_run
    from memd.logs.events import get_logger

    home = get_home(ctx)
    ref = _scope(key, glob)
    if run_id is not None and not store.RUN_ID.match(run_id):
        run_id = resolve_run(home, run_id)  # a unique prefix of a run id
    if ref is None and run_id is None:
        raise UsageError("name the scope: --project KEY or --global (or give a RUN id)")
    refs = [ref] if ref is not None else history.find_runs(home, run_id or "")
    s = st.load(home.settings_file)
    cli_logging(home, s.memd.log_level)

    def on_wait(scope: Any) -> None:
        if not as_json:
            click.echo(f"waiting for the lock on {scope} (held by another memd process)…", err=True)

    rows = []
    for one in refs:  # a run that changed the drawer and a project is undone in both
        info = history.undo(home, s, one, run_id, now=system_clock(),
                            lock_timeout=0.0 if no_wait else UNDO_LOCK_WAIT, on_wait=on_wait,
                            logger=get_logger("memd.undo"))  # fmt: skip
        after_run(home, one, info, s)  # the undo as one commit when memd.git is on
        row = run_json({**info, "path": str(store.history_root(home, one) / str(info.get("run")))})
        rows.append(row)
        if not as_json:
            click.echo(f"{one}: restored as before {info.get('undo_of')} "
                       f"(this undo is run {info.get('run')}; `memd undo` again reverts it)")  # fmt: skip
            click.echo("\n".join(render_run(row)[1:]))
    if as_json:
        json_out(rows[0] if len(rows) == 1 else rows)
