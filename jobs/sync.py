"""The sync job: the memory repository fetched, merged and pushed with `memd.sync.remote`.

A job like any other, so the daemon runs it through the same dispatch, backoff,
`runs` table and `memd status` job table, and `memd run-now sync` runs it by hand.
Its target is the whole home's memory repository, recorded as `global`. It holds no
scope lock for the whole run: a sync takes every scope lock and the git lock itself,
round by round, and never while it waits on the network (`memd.sync.run`).

Due when `memd.git` is on with a remote and the interval (`memd.sync.everyMinutes`)
has passed, or about ten seconds after a write that is not pushed yet; never inside
the backoff after a failure (kept in `memd/sync.json`, so a restart does not hammer
an unreachable remote). The daemon runs it on a worker of its own: a slow remote never
holds up extraction or the index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memd.job.context import RunResult
from memd.tree import Place

if TYPE_CHECKING:
    from memd.job.context import JobContext

NAME = "sync"
TRIGGER = "every memd.sync.everyMinutes with memd.git and memd.sync.remote set, and ~10 s after a write"
NEEDS_MODEL = False
TARGET_KINDS: tuple[str, ...] = ("global",)
HAS_THRESHOLDS = False  # `run-now sync` syncs now; the daemon asks `due` (interval, a write not pushed, backoff)
EXECUTOR = "network"  # the daemon's worker for jobs that wait on the network
READS_SESSIONS = False  # `memd run-now sync` reads no transcript: the ledger is not brought up to date first


def scopes(target: Place) -> list[Place]:
    """None for the whole run: `memd.sync.run` takes the scope and git locks per round."""
    return []


def targets(ctx: JobContext) -> list[Place]:
    return [Place.global_()]


def due(ctx: JobContext, only: Place | None = None) -> list[Place]:
    if only is not None and only != Place.global_():
        return []
    from memd.sync.run import due_now  # noqa: PLC0415 - start-up: `memd jobs` and status list this job
    return [Place.global_()] if due_now(ctx.home, ctx.settings, ctx.now().timestamp()) else []


def run(ctx: JobContext, target: Place, force: bool) -> RunResult:
    from memd.sync.run import settings_of  # noqa: PLC0415 - start-up: the job's entry point

    on, remote, _every, _timeout = settings_of(ctx.settings)
    if not on:
        return RunResult("skipped", "memd.git is off (set \"memd\": {\"git\": true, \"sync\": {\"remote\": URL}})")
    if not remote:
        return RunResult("skipped", "memd.sync.remote is not set: memory is committed locally only")
    from memd.git.plumbing import SyncNotConfigured  # noqa: PLC0415 - start-up: the job's entry point
    try:
        from memd.sync.run import run as sync_run  # noqa: PLC0415 - start-up: the job's entry point
        hold = ctx.index_held if ctx.hold_index is not None else None  # the daemon's: MEMORY.md waits for an agent
        result = sync_run(ctx.home, ctx.settings, hold=hold)
    except SyncNotConfigured as exc:
        return RunResult("skipped", str(exc))
    applied = sum(len(v) for v in result.get("applied", {}).values())
    details = {"pushed": result.get("pushed"), "merged": result.get("merged"), "applied": applied,
               "conflicts": len(result.get("conflicts", [])), "rounds": result.get("rounds")}  # fmt: skip
    return RunResult("ok", details=details)
