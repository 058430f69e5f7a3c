"""Runs one job on one target under its locks, and records what happened.

The daemon and `memd run-now` both come through `run_job`: same locks, same
code, same run record, same `job.finished` log line (DESIGN: "the daemon and
the shell never take different paths"). A run that would change nothing may be told without the lock
when its job can say so from what it reads (`unlocked`: the index job's nothing-changed check); it is
recorded and logged as any other run.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
import traceback
from collections.abc import Callable
from typing import Any

from memd.clock import iso
from memd.errors import MemdError
from memd.fsutil import kind_of
from memd.job.context import Deferred, Job, JobContext, RunResult
from memd.locks import LockBusy, LockError, acquire
from memd.tree import Place


def _classify(exc: BaseException) -> RunResult:
    """Expected failures become outcomes; anything else is a bug and fails the run."""
    from memd.llm import types as llmtypes  # noqa: PLC0415 - start-up: a run that fails (its redactor's patterns)

    if isinstance(exc, LockBusy):
        return RunResult("deferred", f"lock busy: {exc.scope}")
    if isinstance(exc, Deferred):
        return RunResult("deferred", str(exc))

    if isinstance(exc, (llmtypes.ModelUnavailable, llmtypes.BudgetExceeded, llmtypes.ModelCallStopped)):
        return RunResult("deferred", str(exc))
    if isinstance(exc, llmtypes.ModelError):
        return RunResult("failed", str(exc))

    if isinstance(exc, MemdError):  # its message is the one line (a FIFO in a file's place, a damaged ledger)
        return RunResult("failed", _one_line(str(exc)))
    return RunResult("failed", _one_line(f"{type(exc).__name__}: {exc}"))


def _one_line(text: str) -> str:
    """A reason is one line (a path may hold a newline), of bounded length."""
    text = " ".join(text.split())
    return text if len(text) <= 1000 else text[:999] + "…"


def run_job(
    ctx: JobContext,
    job: Job,
    target: Place,
    *,
    force: bool = False,
    lock_timeout: float | None = None,
    on_wait: Callable[[Place], None] | None = None,
) -> RunResult:
    """Lock, run, record. Never raises for a job's own failure: the outcome says it."""
    run_id = os.urandom(6).hex()  # 12 hex digits, random as uuid4's were (uuid, with platform, is not imported)
    log = ctx.log.bind(job=job.NAME, target=str(target), run_id=run_id)
    ctx.log = log
    started = time.monotonic()
    rowid = _record_start(ctx, job.NAME, str(target), run_id)
    log.info("job.started", force=force)
    timeout = float(ctx.settings.memd.lock_timeout_seconds) if lock_timeout is None else lock_timeout
    tb: str | None = None
    try:
        refused = refusal(ctx, job)
        if refused is not None:
            result = RunResult("deferred", refused)
        elif (unfit := precheck(ctx, job, target)) is not None:
            result = unfit
        elif (settled := unlocked(ctx, job, target)) is not None:
            result = settled
        else:
            with acquire(ctx.home, job.scopes(target), timeout=timeout, on_wait=on_wait):
                result = job.run(ctx, target, force)
    except Exception as exc:  # every failure becomes an outcome
        result = _classify(exc)
        if result.outcome == "failed" and not _expected(exc):
            tb = traceback.format_exc()
    duration_ms = int((time.monotonic() - started) * 1000)
    _record_end(ctx, rowid, result, duration_ms)
    fields: dict[str, Any] = {"outcome": result.outcome, "duration_ms": duration_ms, **ctx.usage}
    if result.reason:
        fields["reason"] = result.reason
    if result.details:
        fields["details"] = result.details
    if tb is not None:
        log.error("job.finished", traceback=tb, **fields)
    elif result.outcome == "failed":
        log.error("job.finished", **fields)
    else:
        log.info("job.finished", **fields)
    return result


def refusal(ctx: JobContext, job: Job) -> str | None:
    """Why this job must not run at all now, whatever `--force` says: a settings file that did
    not parse, with no earlier settings to keep, refuses every job that may call a model (§8.1)."""
    if getattr(job, "NEEDS_MODEL", False) and ctx.settings.refused:
        return ctx.settings.refused
    return None


# Jobs that write memories after a model call: their memory directories are checked before it.
WRITES_MEMORY_AFTER_MODEL = frozenset({"extract"})


def precheck(ctx: JobContext, job: Job, target: Place) -> RunResult | None:
    """A run that cannot succeed, found cheaply before any model call (issue 16: a memory
    directory that is a file used to fail only after the paid gate and extraction calls, with a
    traceback, then again at every retry): the session's transcript is gone (skipped), or a
    memory directory the run writes is something other than a directory (failed, one line)."""
    if getattr(job, "NAME", None) not in WRITES_MEMORY_AFTER_MODEL or target.kind != "session" or not target.key:
        return None

    row = ctx.conn.execute("SELECT path FROM sessions WHERE key=? AND session_id=? AND is_subagent=0",
                           (target.key, target.session_id)).fetchone()  # fmt: skip
    if row is not None and row[0] and not os.path.lexists(row[0]):
        return RunResult("skipped", _one_line(f"{row[0]}: the transcript is gone"))
    for d in (ctx.home.global_memory, ctx.home.project_memory(target.key)):
        try:
            mode = os.lstat(d).st_mode
        except FileNotFoundError:
            continue  # created on the first write
        except OSError as exc:
            return RunResult("failed", _one_line(f"{d}: cannot use the memory directory ({exc.strerror or exc})"))
        if not (stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):  # a link is judged where it is used
            return RunResult("failed", _one_line(f"{d}: {kind_of(mode)}, not a directory; memd cannot write memories "
                                                 "there (move it aside)"))  # fmt: skip
    return None


def unlocked(ctx: JobContext, job: Job, target: Place) -> RunResult | None:
    """The outcome of a run that would change nothing, when its job can tell it without the scope's lock
    (a job module's optional `unlocked(ctx, target)`: the index job's nothing-changed check); None: run it
    under the lock. Such an answer writes nothing but the run's record and log lines, so it needs no lock,
    and it is the answer a locked run would have given when the job took its stats."""
    told = getattr(job, "unlocked", None)
    return None if told is None else told(ctx, target)


def _expected(exc: BaseException) -> bool:
    """Failures a user can act on from their one-line reason: no traceback in the log.

    Besides lock, deferral and model failures, every OSError (a memory directory that is a file,
    a transcript deleted mid-run, a mode-000 file, a full disk) and every MemdError (a FIFO in a
    file's place, a damaged state database): the reason names the file and what is wrong.
    """

    from memd.llm import types as llmtypes  # noqa: PLC0415 - start-up: only for a failed run

    return isinstance(exc, (LockError, Deferred, llmtypes.ModelError, OSError, MemdError))


def _record_start(ctx: JobContext, job: str, target: str, run_id: str) -> int:
    cur = _write(ctx, "INSERT INTO runs(run_id, job, target, started_at, pid) VALUES (?,?,?,?,?)",
                 (run_id, job, target, iso(ctx.now()), os.getpid()))  # fmt: skip
    return int(cur.lastrowid or 0)


def _record_end(ctx: JobContext, rowid: int, result: RunResult, duration_ms: int) -> None:
    _write(
        ctx,
        "UPDATE runs SET finished_at=?, outcome=?, duration_ms=?, reason=?, error=?, input_tokens=?, output_tokens=? "
        "WHERE id=?",
        (
            iso(ctx.now()), result.outcome, duration_ms, result.reason or None,
            result.reason if result.outcome == "failed" else None,
            ctx.usage.get("input_tokens", 0), ctx.usage.get("output_tokens", 0), rowid,
        ),
    )  # fmt: skip


RECORD_PATIENCE_SECONDS = 60.0


def _write(ctx: JobContext, sql: str, args: tuple[Any, ...]) -> sqlite3.Cursor:
    """A run record must be written: a state database busy past its timeout is waited on longer."""
    deadline = time.monotonic() + RECORD_PATIENCE_SECONDS
    while True:
        try:
            return ctx.conn.execute(sql, args)
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
            ctx.log.warning("state.busy", waiting_to="record a run")
