"""`memd sync`, `memd export`, `memd import`: memory on several machines.

`--json` output is a stable interface (README): `sync` prints `{"remote", "pushed",
"merged", "fast_forward", "committed", "applied" {scope: [files]}, "conflicts"
[{"kind", "path", "copy", "host"}], "rounds", "duration_ms", "head"}`; `import`
prints `{"written" {scope: [files]}, "unchanged", "conflicts" [{"path", "copy"}],
"skipped"}`.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from memd.cli import command, get_home, json_out
from memd.errors import UsageError


def _setup(ctx: click.Context) -> tuple[Any, Any]:
    from memd import settings as st
    from memd.cli import cli_logging

    home = get_home(ctx)
    s = st.load(home.settings_file)
    cli_logging(home, s.memd.log_level, "error")
    return home, s


@command("sync")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def sync_cmd(ctx: click.Context, as_json: bool) -> None:
    """Fetch, merge and push the memory repository with memd.sync.remote, now.

    Needs memd.git on. Conflicts keep both versions (`<name>.conflict-<host>.md`);
    nothing is ever force-pushed. The daemon does the same every
    memd.sync.everyMinutes and soon after memd writes.
    """
    from memd.sync import run as sync

    home, s = _setup(ctx)
    r = sync.run(home, s)
    if as_json:
        json_out(r)
        return
    pulled = sum(len(v) for v in r["applied"].values())
    how = "fast-forward" if r["fast_forward"] else "merged" if r["merged"] else "nothing to merge"
    click.echo(f"synced with {r['remote']} in {r['duration_ms'] / 1000:.1f} s: {how}, "
               f"{pulled} file(s) written here, {'pushed' if r['pushed'] else 'not pushed'}")  # fmt: skip
    for scope, files in sorted(r["applied"].items()):
        click.echo(f"  {scope}: {', '.join(files)}")
    for c in r["conflicts"]:
        where = f" → {c['copy']}" if c.get("copy") else ""
        click.echo(f"  kept both versions ({c['kind']}): {c['path']}{where}" + (f" ({c['note']})" if c.get("note") else ""))


@command("export")
@click.option("--project", "key", help="Only this project's memory (its key here).")
@click.option("--global", "glob", is_flag=True, help="Only the global drawer.")
@click.option("--all", "all_", is_flag=True, help="The drawer and every project (the default).")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.pass_context
def export_cmd(ctx: click.Context, key: str | None, glob: bool, all_: bool, file: str) -> None:
    """Write memories to FILE, a tar (`.tar.gz`/`.tgz`: compressed; `-`: standard output)."""
    from memd.sync.transfer import export

    if sum(bool(x) for x in (key, glob, all_)) > 1:
        raise UsageError("give one of --project KEY, --global, --all")
    home = get_home(ctx)
    compress = file.endswith((".gz", ".tgz"))
    if file == "-":
        got = export(home, sys.stdout.buffer, project=key, glob=glob)
        sys.stdout.buffer.flush()
    else:
        import os
        import tempfile

        from memd.fsutil import fsync_dir

        target = os.path.abspath(file)
        fd, tmp = tempfile.mkstemp(prefix=".memd-export.", suffix=".tmp", dir=os.path.dirname(target))
        try:
            with os.fdopen(fd, "wb") as fh:
                got = export(home, fh, project=key, glob=glob, compress=compress)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
            from pathlib import Path

            fsync_dir(Path(target).parent)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    click.echo(f"exported {got.files} memories from {got.scopes} scope(s), {got.bytes} bytes"
               + ("" if file == "-" else f", to {file}"), err=file == "-")  # fmt: skip


@command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def import_cmd(ctx: click.Context, file: str, as_json: bool) -> None:
    """Bring the memories of FILE (from `memd export`; `-`: standard input) into this home.

    A memory absent here is added; one that differs is kept and the imported
    version lands beside it as `<name>.conflict-<host>.md`. Undo with `memd undo`.
    """
    from memd.fsutil import ensure_private_dir
    from memd.sync.transfer import import_

    home, s = _setup(ctx)
    ensure_private_dir(home.root)
    if file == "-":
        r = import_(home, sys.stdin.buffer, s, source="standard input")
    else:
        try:
            fh = open(file, "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise UsageError(f"{file}: {exc.strerror or exc}") from None
        with fh:
            r = import_(home, fh, s, source=file)
    if as_json:
        json_out({"written": r.written, "unchanged": r.unchanged, "conflicts": r.conflicts, "skipped": r.skipped,
                  "quarantined": r.quarantined, "swept": r.swept})  # fmt: skip
        return
    n = sum(len(v) for v in r.written.values())
    click.echo(f"imported {n} file(s) into {len(r.written)} scope(s); {r.unchanged} already here")
    for scope, files in sorted(r.written.items()):  # a summary, not every name (`--json` has them)
        click.echo(f"  {scope}: {len(files)} file(s)" + (f" ({', '.join(files)})" if len(files) <= 5 else ""))
    for c in r.conflicts[:5]:
        click.echo(f"  kept both versions: {c['path']} (the imported one is {c['copy']})")
    if len(r.conflicts) > 5:
        click.echo(f"  kept both versions of {len(r.conflicts) - 5} more (`--json` lists them)")
    if r.quarantined:
        from memd.git.quarantine import quarantine_dir

        click.echo(f"  kept aside {len(r.quarantined)} file(s) that fail a memory's checks (no agent reads them): "
                   f"{quarantine_dir(home)}")  # fmt: skip
    if r.swept:
        click.echo(f"  removed {r.swept} temporary file(s) a killed import or sync left")
    if r.skipped:
        click.echo(f"  skipped {len(r.skipped)} entr{'y' if len(r.skipped) == 1 else 'ies'} that are not memories")
