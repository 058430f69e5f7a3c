"""`memd demo`: the README's first command. Copies the bundled sample home and runs
every job on it with the offline provider (no API key, no network), then shows
`memd status` and where to look.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import click

from memd.cli import command

SAMPLE = Path(__file__).resolve().parents[2] / "sample" / "home"
DEMO_MARK = ".memd-demo"


@command("demo")
@click.argument("directory", required=False, default="sample-home", type=click.Path(file_okay=False))
def demo_cmd(directory: str) -> None:
    """Copy the bundled sample home to DIRECTORY (default ./sample-home) and run memd's jobs on it."""
    from memd import settings as st
    from memd.daemon import registry
    from memd.daemon.status import gather, render
    from memd.errors import UsageError
    from memd.job.context import make_context
    from memd.job.runner import run_job
    from memd.ledger.scan import scan_home
    from memd.logs.events import configure, get_logger
    from memd.tree import Home

    if not SAMPLE.is_dir():
        raise UsageError(f"the bundled sample is missing ({SAMPLE}); run from a clone of memd")
    target = Path(directory).absolute()
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target}: not a directory")
    if target.is_dir() and any(target.iterdir()):
        if not (target / DEMO_MARK).is_file():
            raise UsageError(f"{target}: not empty and not a memd demo home; give an empty or new directory")
        shutil.rmtree(target)  # an earlier demo's copy: replaced, as the README's first command promises
    shutil.copytree(SAMPLE, target, dirs_exist_ok=True)
    (target / DEMO_MARK).write_text("made by `memd demo`; `memd demo` may replace this directory\n")
    home = Home(target)
    configure(home, level="info", stderr_level="warning")
    log = get_logger("memd.demo")
    loaded = st.load(home.settings_file)
    s = replace(loaded, memd=loaded.memd._replace(provider="offline"))  # the demo never calls a model, key or not
    totals = scan_home(home, log=log)
    click.echo(f"ingested {totals['sessions']} sessions ({totals['bytes'] / 1e3:.0f} KB, {totals['records']} records)")
    for job in registry.all_jobs():
        if job.NAME == "sync":
            continue  # the demo keeps no git repository and syncs with nothing
        ctx = make_context(home, s, log=log)
        try:
            targets = job.targets(ctx) if not getattr(job, "HAS_THRESHOLDS", True) else job.due(ctx)
            for t in targets:
                r = run_job(ctx, job, t)
                click.echo(f"  {job.NAME:<8} {t}: {r.outcome}{' — ' + r.reason if r.reason else ''}")
        finally:
            ctx.conn.close()
    click.echo("")
    click.echo(render(gather(home)))
    click.echo("")
    click.echo("where to look:")
    for p in [home.global_memory / "MEMORY.md", home.drawer_render, *sorted(home.projects.glob("*/memory/MEMORY.md")),
              *sorted(home.projects.glob("*/*/session-memory/summary.md"))]:  # fmt: skip
        if p.exists():
            click.echo(f"  {p}")
    click.echo(f"  memd --home {target} search tests      # full-text search over the memories")
    click.echo(f"  memd --home {target} sessions          # what the ledger knows about each session")
