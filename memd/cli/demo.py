"""`memd demo`: the README's first command. Copies the bundled sample home (package data,
`memd/sample_home`, so it works from any install: a clone, `pip install .`, pipx, uv) and
runs every job on it with the offline provider (no API key, no network); then a dream
merges the drawer's two near-duplicate notes and is undone, through the same code as
`memd run-now dream` and `memd undo`. It ends with `memd status` and where to look, each
hint spelled as this user can run it.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from memd.cli import command

SAMPLE = Path(__file__).resolve().parents[1] / "sample_home"
DEMO_MARK = ".memd-demo"


def runnable(argv0: str, on_path: str | None, cwd: Path, executable: str) -> str:
    """How the user can run memd again from `cwd`: `memd` when that is the one on PATH, else the
    script they ran (relative when it is under `cwd`, e.g. `.venv/bin/memd`), else `python -m memd`.
    Pure: the caller passes sys.argv[0], shutil.which("memd"), the directory and sys.executable."""
    script = Path(argv0)
    is_script = script.name == "memd" and script.is_file()
    if on_path is not None and (not is_script or Path(on_path).resolve() == script.resolve()):
        return "memd"
    if is_script:
        path = script if script.is_absolute() else cwd / script
        try:
            rel = path.absolute().relative_to(cwd)
        except ValueError:
            return _quote(str(path.absolute()))
        return _quote(str(rel) if rel.parent != Path(".") else f"./{rel}")
    return f"{_quote(executable)} -m memd"


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _copy_sample(directory: str) -> Path:
    from memd.errors import UsageError

    if not SAMPLE.is_dir():
        raise UsageError(f"the bundled sample is missing ({SAMPLE}): this memd was installed without its package data")
    target = Path(directory).absolute()
    if target.exists() and not target.is_dir():
        raise UsageError(f"{target}: not a directory")
    if target.is_dir() and any(target.iterdir()):
        if not (target / DEMO_MARK).is_file():
            raise UsageError(f"{target}: not empty and not a memd demo home; give an empty or new directory")
        shutil.rmtree(target)  # an earlier demo's copy: replaced, as the README's first command promises
    shutil.copytree(SAMPLE, target, dirs_exist_ok=True)
    (target / DEMO_MARK).write_text("made by `memd demo`; `memd demo` may replace this directory\n")
    _restore_times(target)
    return target


def _restore_times(home: Path) -> None:
    """The sample's memories are as memd wrote them, but a clone or a wheel keeps no file times:
    each copy gets its `updated` time back, or the dream would take it for a hand edit and keep out."""
    from memd.clock import parse_iso
    from memd.memory.scan import scan_dir

    for m in scan_dir(home / "memory", "global", None).memories:
        when = parse_iso(str(m.metadata.get("updated") or ""))
        if m.metadata.get("source") == "memd" and when is not None:
            os.utime(m.path, (when.timestamp(), when.timestamp()))


@command("demo")
@click.argument("directory", required=False, default="sample-home", type=click.Path(file_okay=False))
def demo_cmd(directory: str) -> None:
    """Copy the bundled sample home to DIRECTORY (default ./sample-home) and run memd's jobs on it."""
    from memd import settings as st
    from memd.cli import cli_logging
    from memd.daemon.status import gather, render
    from memd.ledger.scan import scan_home
    from memd.logs.events import get_logger
    from memd.tree import Home

    target = _copy_sample(directory)
    home = Home(target)
    cli_logging(home, "info")
    log = get_logger("memd.demo")
    loaded = st.load(home.settings_file)
    s = replace(loaded, memd=loaded.memd._replace(provider="offline"))  # the demo never calls a model, key or not
    s = replace(s, memory=s.memory._replace(backfill_days=0))  # offline spends nothing: every sample session, however old
    totals = scan_home(home, log=log)
    click.echo(f"ingested {totals['sessions']} sessions ({totals['bytes'] / 1e3:.0f} KB, {totals['records']} records)")
    _run_jobs(home, s, log)
    memd = runnable(sys.argv[0], shutil.which("memd"), Path.cwd(), sys.executable)
    run = f"{memd} --home {_quote(os.path.relpath(target) if target.is_relative_to(Path.cwd()) else str(target))}"
    click.echo("")
    _dream_and_undo(home, s, log, run)
    click.echo("")
    click.echo(render(gather(home)))
    click.echo("")
    click.echo("where to look:")
    for p in [home.global_memory / "MEMORY.md", home.drawer_render, *sorted(home.projects.glob("*/memory/MEMORY.md")),
              *sorted(home.projects.glob("*/*/session-memory/summary.md"))]:  # fmt: skip
        if p.exists():
            click.echo(f"  {p}")
    click.echo(f"  {run} search tests      # full-text search over the memories")
    click.echo(f"  {run} sessions          # what the ledger knows about each session")
    click.echo(f"  {run} history           # every run that changed a memory, and `undo` for each")


def _run_jobs(home: Any, s: Any, log: Any) -> None:
    """Every job's due targets, as the daemon would run them (the dream comes after, by itself)."""
    from memd.daemon import registry
    from memd.job.context import make_context
    from memd.job.runner import run_job

    for job in registry.all_jobs():
        if job.NAME in ("sync", "dream"):
            continue  # the demo keeps no git repository and syncs with nothing; the dream is shown on its own
        ctx = make_context(home, s, log=log)
        try:
            targets = job.targets(ctx) if not getattr(job, "HAS_THRESHOLDS", True) else job.due(ctx)
            for t in targets:
                r = run_job(ctx, job, t)
                click.echo(f"  {job.NAME:<8} {t}: {r.outcome}{' — ' + r.reason if r.reason else ''}")
        finally:
            ctx.conn.close()


def _dream_and_undo(home: Any, s: Any, log: Any, memd: str) -> None:
    """The drawer's dream, forced (the sample is too young for its thresholds), then its undo;
    the index follows each, as the daemon's would."""
    from memd.cli.history import render_run, run_json
    from memd.clock import system_clock
    from memd.daemon import registry
    from memd.history import runs as history
    from memd.job.context import make_context
    from memd.job.runner import run_job
    from memd.tree import Place

    drawer = Place("global")
    click.echo(f"a dream on the global drawer (`{memd} run-now dream --global --force`):")
    ctx = make_context(home, s, log=log)
    try:
        r = run_job(ctx, registry.get("dream"), drawer, force=True)
        click.echo(f"  dream {drawer}: {r.outcome}{' — ' + r.reason if r.reason else ''}")
        dreams = [x for x in history.list_runs(home, drawer) if x.get("kind") == "dream"]
        if r.outcome != "ok" or not dreams:
            return
        for line in render_run(run_json(dreams[-1]))[1:]:
            click.echo(line)
        click.echo(f"and its undo (`{memd} undo --global`):")
        info = history.undo(home, s, drawer, str(dreams[-1]["run"]), now=system_clock(), lock_timeout=60.0, logger=log)
        click.echo(f"  {drawer}: restored as before {info.get('undo_of')} (this undo is run {info.get('run')}; "
                   f"`{memd} undo --global` again puts the merge back)")  # fmt: skip
        for line in render_run(run_json(info))[1:]:
            click.echo(line)
        run_job(ctx, registry.get("index"), drawer)
    finally:
        ctx.conn.close()
