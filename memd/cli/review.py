"""`memd review`: proposals waiting for the user (review mode, memd/write/proposals.py).

`--json` output is a stable interface (README): the listing is a list of
`{"id", "time", "age_seconds", "job", "kind", "reason", "session", "provider",
"changes": [{"scope", "key", "file", "action", "name"}], "check"}`; `show --json`
adds `operations`, `sources`, `details` and `diff`.
"""

from __future__ import annotations

from typing import Any

import click

from memd.cli import get_home, handles_errors, home_option, json_out, main
from memd.errors import UsageError

ACCEPT_LOCK_WAIT = 600.0


def _row(p: Any, now: Any, full: bool = False) -> dict[str, Any]:
    t = p.time
    info = p.info
    row = {
        "id": p.id, "time": info.get("time"), "age_seconds": max(0, int((now - t).total_seconds())) if t else None,
        "job": info.get("job"), "kind": info.get("kind"), "reason": info.get("reason"),
        "session": info.get("session") or None, "provider": info.get("provider") or None,
        "changes": [{k: c.get(k) for k in ("scope", "key", "file", "action", "name")} for c in p.changes],
        "check": info.get("check"), "edited": bool(info.get("edited")),
    }  # fmt: skip
    if full:
        row.update({k: info.get(k) for k in ("operations", "sources", "details", "diff")})
    return row


def _where(c: dict[str, Any]) -> str:
    return "global" if c.get("scope") == "global" else f"project {c.get('key')}"


def _context(ctx: click.Context) -> Any:
    from memd import settings as st
    from memd.cli import cli_logging
    from memd.job.context import make_context
    from memd.logs.events import get_logger

    home = get_home(ctx)
    s = st.load(home.settings_file)
    cli_logging(home, s.memd.log_level)
    return make_context(home, s, log=get_logger("memd.review"))


def _list(ctx: click.Context, as_json: bool) -> None:
    from memd.clock import local_text, system_clock
    from memd.history.provenance import age_text
    from memd.write import proposals

    now = system_clock()
    rows = [_row(p, now) for p in proposals.list_proposals(get_home(ctx))]
    damaged = proposals.damaged_proposals(get_home(ctx))
    if as_json:
        json_out(rows + [{"id": d["id"], "damaged": d["reason"]} for d in damaged])
        return
    for d in damaged:  # never hidden: the user sees it and can drop it
        click.echo(f"{d['id']}  damaged: {d['reason']} (`memd review reject {d['id']}` drops it)")
    if not rows:
        if not damaged:
            click.echo("no proposals waiting")
        return
    for r in rows:
        age = age_text(r["age_seconds"]) if r["age_seconds"] is not None else "?"
        click.echo(f"{r['id']}  {r['job']}  {age} ago  {r['reason'] or ''}".rstrip())
        for c in r["changes"]:
            click.echo(f"  {c['action']:<7} {c['name']} ({_where(c)}, {c['file']})")
        if r["check"]:
            click.echo(f"  ⚠ refused at {local_text(r['check'].get('time'))}: {r['check'].get('reason')}")


@main.group("review", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True)
@home_option
@handles_errors
@click.pass_context
def review_cmd(ctx: click.Context, as_json: bool) -> None:
    """Proposals waiting for review (memory.review): list, show, accept, reject, edit.

    \b
    memd review [--json]             the proposals, oldest first
    memd review show ID              the diff against the memory files
    memd review accept ID | --all    apply through memd's write path (undo with `memd undo`)
    memd review reject ID            drop it
    memd review edit ID [FILE]       change a proposed file in $EDITOR (validated on save)
    memd review rebase ID            review a refused (stale) proposal against the files as they are now
    """
    if ctx.invoked_subcommand is None:
        _list(ctx, as_json)


def sub(name: str) -> Any:
    def deco(f: Any) -> Any:
        return review_cmd.command(name)(home_option(handles_errors(f)))

    return deco


@sub("list")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def list_cmd(ctx: click.Context, as_json: bool) -> None:
    """The proposals, oldest first."""
    _list(ctx, as_json)


@sub("show")
@click.argument("pid", metavar="ID")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def show_cmd(ctx: click.Context, pid: str, as_json: bool) -> None:
    """One proposal: why, from where, and the diff against the files as they were."""
    from memd.clock import system_clock
    from memd.history.provenance import expected
    from memd.write import proposals

    p = proposals.load(get_home(ctx), pid)
    row = _row(p, system_clock(), full=True)
    if as_json:
        json_out(row)
        return
    click.echo(f"proposal {p.id}  {row['job']} ({row['kind']})  {row['time']}")
    if row["reason"]:
        click.echo(f"reason: {row['reason']}")
    if row["session"]:
        click.echo(f"session: {row['session']}")
    for s in row["sources"] or []:
        if isinstance(s, dict) and s.get("session"):
            n = expected(set(s.get("uuids") or []), set(s.get("offsets") or []))
            click.echo(f"source: session {s.get('session')} ({n} message(s), {s.get('ts') or '?'})")
    if row["check"]:
        click.echo(f"⚠ refused at {row['check'].get('time')}: {row['check'].get('reason')}")
    click.echo("")
    click.echo((row["diff"] or "(no change)").rstrip("\n"))


@sub("accept")
@click.argument("pid", metavar="[ID]", required=False)
@click.option("--all", "everything", is_flag=True, help="Every waiting proposal, oldest first.")
@click.option("--no-wait", is_flag=True, help="Exit 75 at once if a scope's lock is held.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def accept_cmd(ctx: click.Context, pid: str | None, everything: bool, no_wait: bool, as_json: bool) -> None:
    """Apply a proposal (or --all) through memd's write path: validated, locked, atomic, indexed,
    in the history. One whose files changed since it was made is refused and kept."""
    from memd.write import proposals, review

    if bool(pid) == everything:
        raise UsageError("give a proposal ID or --all")
    jctx = _context(ctx)

    def on_wait(scope: Any) -> None:
        if not as_json:
            click.echo(f"waiting for the lock on {scope} (held by another memd process)…", err=True)

    ids = [p.id for p in proposals.list_proposals(jctx.home)] if everything else [pid or ""]
    results: list[dict[str, Any]] = []
    try:
        for one in ids:
            try:
                applied = review.accept(jctx, one, lock_timeout=0.0 if no_wait else ACCEPT_LOCK_WAIT,
                                           on_wait=on_wait)  # fmt: skip
            except review.ProposalRefused as exc:
                if not everything:
                    raise
                results.append({"id": one, "accepted": False, "reason": str(exc), "runs": []})
                continue
            results.append({"id": one, "accepted": True, "reason": None, "runs": applied.runs,
                            "counts": applied.counts()})  # fmt: skip
    finally:
        jctx.conn.close()
    refused = [r for r in results if not r["accepted"]]
    if as_json:
        json_out(results if everything else results[0])
    else:
        if not results:
            click.echo("no proposals waiting")
        for r in results:
            if r["accepted"]:
                runs = ", ".join(r["runs"]) or "no file changed"
                click.echo(f"accepted {r['id']} (run {runs}; `memd undo` reverts it)")
            else:
                click.echo(f"refused {r['id']}: {r['reason']}", err=True)
    if refused:
        raise SystemExit(review.ProposalRefused.exit_code)


@sub("reject")
@click.argument("pids", metavar="ID...", nargs=-1, required=True)
@click.pass_context
def reject_cmd(ctx: click.Context, pids: tuple[str, ...]) -> None:
    """Drop proposals: nothing of them is written."""
    from memd.write import review

    jctx = _context(ctx)
    try:
        for pid in pids:
            review.reject(jctx, pid)
            click.echo(f"rejected {pid}")
    finally:
        jctx.conn.close()


@sub("rebase")
@click.argument("pid", metavar="ID")
@click.pass_context
def rebase_cmd(ctx: click.Context, pid: str) -> None:
    """Make a proposal's base the files as they are now, and print the new diff to review.

    Nothing is applied: accept it afterwards if the diff is still what you want.
    """
    from memd.write import review

    jctx = _context(ctx)
    try:
        p = review.rebase(jctx, pid)
    finally:
        jctx.conn.close()
    click.echo(f"proposal {pid} now applies to the files as they are; review it again:\n")
    click.echo((p.info.get("diff") or "(no change left)").rstrip("\n"))


@sub("edit")
@click.argument("pid", metavar="ID")
@click.argument("file", required=False)
@click.pass_context
def edit_cmd(ctx: click.Context, pid: str, file: str | None) -> None:
    """Change a proposed file in $EDITOR before accepting it; validated on save (an invalid file is
    refused with the reason, the proposal kept as it was). FILE: which file, when it has several."""
    from memd.write import apply as memwrite
    from memd.write import control, proposals, review

    jctx = _context(ctx)
    try:
        p = proposals.load(jctx.home, pid)
        files = [(n, c) for n, c in enumerate(p.changes) if c.get("action") != "delete"]
        if file is not None:
            files = [(n, c) for n, c in files if file in (c.get("file"), c.get("name"), str(c.get("file", ""))[:-3])]
        if not files:
            raise UsageError(f"proposal {pid} has no proposed file {file or ''}".rstrip())
        if len(files) > 1:
            raise UsageError(f"proposal {pid} proposes {len(files)} files; name one: "
                             + ", ".join(str(c.get("file")) for _n, c in files))  # fmt: skip
        n, c = files[0]
        before = p.proposed_text(n) or ""
        text, copy = control.edit_copy(before, str(c.get("file")))
        if text == before:
            control.discard_copy(copy)
            click.echo(f"no change to proposal {pid}")
            return
        try:
            review.replace_proposed(jctx, pid, n, text)
        except memwrite.InvalidMemory as exc:
            raise memwrite.InvalidMemory(f"{exc}; proposal {pid} is unchanged (your edit is kept in {copy})") from None
        control.discard_copy(copy)
    finally:
        jctx.conn.close()
    click.echo(f"proposal {pid}: {c.get('file')} changed; `memd review show {pid}` shows the diff")
