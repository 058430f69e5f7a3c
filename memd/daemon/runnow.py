"""`memd run-now`: jobs run once, now, through the daemon's own path and locks.

One code for the click command (`memd.cli.daemon.run_now_cmd`) and for the click-free start of its plain
command lines (`memd.__main__.run_now_command`): what runs, what is printed and the exit code are the
same, whichever parsed the command line (tests/cli/test_run_now_entry.py runs both). Nothing here
imports click: `memd run-now index` on an unchanged home is mostly start-up, and click and `memd.cli`
were a sixth of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memd.errors import BusyError, MemdError, ModelAPIError, UsageError
from memd.tree import Home, Place

RUN_NOW_LOCK_WAIT = 600.0


@dataclass(frozen=True)
class Request:
    """A `run-now` command line's meaning (the click command's parameters)."""

    job_name: str
    key: str | None = None
    session: str | None = None
    glob: bool = False
    all_: bool = False
    force: bool = False
    no_wait: bool = False
    as_json: bool = False


def check_job(name: str, *, allow_all: bool = False) -> str:
    """A job's name as given, else a usage error listing the jobs (`logs --job bogus` is exit 2)."""
    from memd.daemon import registry  # noqa: PLC0415 - start-up: the registry loads jobs/ lazily, but not for nothing

    names = list(registry.JOB_NAMES)
    if name in names or (allow_all and name == "all"):
        return name
    raise UsageError(f"no job {name!r} (jobs: {', '.join(names)}{', all' if allow_all else ''})")


def exit_code_of(results: list[dict[str, Any]]) -> int:
    """1 if any run failed; 75 if one waited on a lock in vain; 4 if the model made one wait."""
    outcomes = [r["outcome"] for r in results]
    if "failed" in outcomes:
        return MemdError.exit_code
    deferred = [r["reason"] for r in results if r["outcome"] == "deferred"]
    if any(x.startswith("lock busy") for x in deferred):
        return BusyError.exit_code
    return ModelAPIError.exit_code if deferred else 0


def targets(job: Any, jctx: Any, req: Request) -> list[Any]:
    """What `run-now` runs: the named target, or what is due (everything with --force)."""
    kinds = getattr(job, "TARGET_KINDS", ("session", "project", "global"))
    if req.session and "session" not in kinds:
        raise UsageError(f"{job.NAME} works on memory scopes (--project KEY or --global), not on a session")
    if req.glob and "global" not in kinds:
        raise UsageError(f"{job.NAME} works on sessions (--session ID or --project KEY), not on the global drawer")
    if req.session:
        from memd.ledger.lookup import resolve_session  # noqa: PLC0415 - start-up

        skey, sid = resolve_session(jctx.conn, req.session, req.key)  # an id or a unique prefix of one
        return [Place("session", skey, sid)]
    if req.glob:
        return [Place("global")]
    pool = job.targets(jctx) if (req.force or not getattr(job, "HAS_THRESHOLDS", True)) else job.due(jctx)
    if req.key:
        pool = [t for t in pool if t.key == req.key]
    if req.key and job.NAME in ("dream", "index") and not pool:
        pool = [Place("project", req.key)]
    return pool


def run_now(home: Home, req: Request, say: Callable[[str], None], warn: Callable[[str], None]) -> list[dict[str, Any]]:
    """Run `req` on `home`: each job's targets in turn, one result each (the `--json` document). `say`
    prints a line of the text report (not called with `--json`), `warn` one on stderr (a lock waited
    for). Logging is set up here, as the settings ask; MemdError propagates (the command's one line)."""
    from memd import settings as st  # noqa: PLC0415 - start-up
    from memd.daemon import registry  # noqa: PLC0415 - start-up
    from memd.ledger.lookup import check_project  # noqa: PLC0415 - start-up
    from memd.logs.events import command_logging, get_logger  # noqa: PLC0415 - start-up

    s = st.load(home.settings_file)
    command_logging(home, s.memd.log_level)
    log = get_logger("memd.run-now")
    names = list(registry.JOB_NAMES) if check_job(req.job_name, allow_all=True) == "all" else [req.job_name]
    jobs = [registry.get(n) for n in names]
    if any(getattr(job, "READS_SESSIONS", True) for job in jobs):  # index and sync read no transcript
        from memd.ledger.scan import scan_home  # noqa: PLC0415 - the ingest's modules: for session jobs only

        scan_home(home, key=req.key, log=log)  # with --project, that project's sessions only
    _check_project(home, req.key, check_project)
    results: list[dict[str, Any]] = []
    on_wait = _waiter(req, warn)
    for job in jobs:
        results += _run_job(home, s, log, job, req, say, on_wait)
    return results


def _check_project(home: Home, key: str | None, check: Callable[..., Any]) -> None:
    """`--project KEY` known to the home (its ledger read-only, closed at once), else a usage error."""
    if key is None:
        return
    conn = None
    if home.state_db.exists():
        from memd import state  # noqa: PLC0415 - start-up

        conn = state.connect(home.state_db, readonly=True)
    try:
        check(home, key, conn)
    finally:
        if conn is not None:
            conn.close()


def _waiter(req: Request, warn: Callable[[str], None]) -> Callable[[Any], None]:
    """`run_job`'s `on_wait`: one line a scope, the first time its lock is waited for (none with --json)."""
    waited: set[str] = set()

    def on_wait(scope: Any) -> None:
        if str(scope) not in waited and not req.as_json:
            waited.add(str(scope))
            warn(f"waiting for the lock on {scope} (held by another memd process)…")

    return on_wait


def _run_job(home: Home, s: Any, log: Any, job: Any, req: Request, say: Callable[[str], None],
             on_wait: Callable[[Any], None]) -> list[dict[str, Any]]:  # fmt: skip
    """One job over its targets, under a context of its own (closed however it ends)."""
    from memd.job.context import make_context  # noqa: PLC0415 - start-up
    from memd.job.runner import run_job  # noqa: PLC0415 - start-up

    results: list[dict[str, Any]] = []
    jctx = make_context(home, s, log=log)
    jctx.keep_search = True  # one search index writer for all its targets (the index job's scopes)
    try:
        pool = targets(job, jctx, req)
        if not pool and not req.as_json:
            say(f"{job.NAME}: nothing due" + ("" if req.force else " (use --force to run anyway)"))
        for t in pool:
            jctx.usage = {"calls": 0, "input_tokens": 0, "output_tokens": 0}
            r = run_job(jctx, job, t, force=req.force, lock_timeout=0.0 if req.no_wait else RUN_NOW_LOCK_WAIT,
                        on_wait=on_wait)  # fmt: skip
            results.append({"job": job.NAME, "target": str(t), "outcome": r.outcome, "reason": r.reason,
                            "details": r.details, "usage": dict(jctx.usage)})  # fmt: skip
            if not req.as_json:
                say(f"{job.NAME} {t}: {r.outcome}" + (f" — {r.reason}" if r.reason else ""))
    finally:
        try:
            jctx.drop_search()
        finally:
            jctx.conn.close()
    return results


__all__ = ["RUN_NOW_LOCK_WAIT", "Request", "check_job", "exit_code_of", "run_now", "targets"]
