"""The run: check due-ness, plan (offline, or the model given the scope and its sessions), guard, apply.

Locks (issue 16): the runner holds only the scope's dream lock (`eligibility.DreamLock`) for
the run. The memory scope's own lock is taken twice, briefly: to finish what a crash left
before anything is read, and for the apply, which first checks that the directory is exactly
as it was when the plan was made (`sig0`, the scan's stat of each entry); if not, the run is deferred with nothing written.

Not `run.py` (nor `due.py` for `eligibility`): a submodule would share its name with the job's
`run` (`due`) attribute of `jobs.dream`, and `jobs.dream.run` could not name both.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.dream.apply import Snapshot, apply
from jobs.dream.eligibility import (
    NAME,
    Baseline,
    baseline_of,
    due_decisions,
    epoch,
    note_failure,
    oldest_in,
    scope_lock,
    scope_ref,
)
from jobs.dream.plan import (
    Plan,
    Rules,
    guard,
    hand_edited,
    offline_plan,
    validate_dream,
)
from jobs.dream.prompt import (
    DREAM_SYSTEM,
    FIRST_REQUEST_SCAN_BYTES,
    MAX_OUTPUT_TOKENS,
    SESSION_NOTE_CHARS,
    SESSIONS_MAX,
    SessionNote,
    build_prompt,
    one_line,
    summary_note,
)
from memd.clock import iso

# The cyclic collector paused for the scan and, offline, the whole plan and apply: a run makes tens of
# thousands of objects that live until it ends (memories, paths, words and postings, the pack's manifest)
# and no cycles (at 5,000 memories three full passes, 60-90 ms). Never around a model call: a run with a
# model pauses only its scan; an offline run's only wait is the scope lock (`memd.lockTimeoutSeconds`).
from memd.collector import paused as collector_paused
from memd.history import store
from memd.job.context import Deferred, JobContext, RunResult
from memd.tree import Place

if TYPE_CHECKING:
    from memd.memory.file import Memory


def _session_notes(ctx: JobContext, ref: Place, since: datetime | None) -> list[SessionNote]:
    """Titles and summaries of the sessions since `since` (newest first), else their first request."""
    q = ("SELECT key, session_id, path, format, last_ts, safe_offset FROM sessions "
         "WHERE is_subagent=0 AND human_turns>0 AND last_ts IS NOT NULL")  # fmt: skip
    args: list[Any] = []
    if ref.kind == "project":
        q += " AND key=?"
        args.append(ref.key)
    if since is not None:
        q += " AND (last_ts >= ? OR last_ts NOT LIKE '____-__-__T%Z')"
        args.append(iso(since)[:19])
    cut = since.timestamp() if since is not None else float("-inf")
    rows = [(x, r) for r in ctx.conn.execute(q, args) if (x := epoch(r["last_ts"])) is not None and x > cut]
    rows.sort(key=lambda p: -p[0])
    notes = []
    for x, r in rows[:SESSIONS_MAX]:
        title, text = _note_of(ctx, r)
        when = datetime.fromtimestamp(x, UTC).date().isoformat()
        notes.append(SessionNote(when, r["key"] if ref.kind == "global" else "", title, text))
    return notes


def _note_of(ctx: JobContext, row: Any) -> tuple[str, str]:
    path = ctx.home.summary_file(row["key"], row["session_id"])
    try:
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as fh:
                return summary_note(fh.read(64 * 1024).decode("utf-8", "replace"))
        from memd.transcripts.spans import read_span  # noqa: PLC0415 - start-up
        span = read_span(row["path"], 0, min(int(row["safe_offset"] or 0), FIRST_REQUEST_SCAN_BYTES), row["format"])
    except OSError:
        return "(unreadable session)", ""
    first = next((p.text for p in span.pieces if p.kind == "human"), "")
    return "(no summary yet)", one_line(f"first request: {first}", SESSION_NOTE_CHARS) if first else ""


def _read_index(directory: Path) -> str | None:
    p = directory / "MEMORY.md"
    try:
        if p.is_file() and not p.is_symlink():
            return p.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return None


def _label(ref: Place) -> str:
    return "the global drawer (cross-project memories)" if ref.kind == "global" else f"the memory of project {ref.key}"


def _model_plan(ctx: JobContext, ref: Place, memories: list[Memory], rules: Rules, base: Baseline) -> Plan:
    directory = ref.memory_dir(ctx.home)
    notes = _session_notes(ctx, ref, base.at)
    user, unshown = build_prompt(_label(ref), ctx.now().date(), _read_index(directory), memories, set(rules.protected), notes)
    rules = replace(rules, unshown=frozenset(unshown))
    from memd.llm.types import ModelCallFailed  # noqa: PLC0415 - start-up
    try:
        reply = ctx.llm.complete(job=NAME, tier="strong", system=DREAM_SYSTEM, user=user, max_tokens=MAX_OUTPUT_TOKENS)
    except ModelCallFailed as exc:
        return Plan(error=f"model call failed: {exc}")
    plan = Plan(model=reply.model, input_tokens=reply.input_tokens + reply.cache_read_tokens + reply.cache_write_tokens)
    from memd.memory.answer import ModelOutputError, parse_model_json  # noqa: PLC0415 - start-up
    try:
        data = parse_model_json(reply.text)
        plan.ops, plan.rejected = validate_dream(data, memories, rules)
    except ModelOutputError as exc:
        cut = " (the answer was cut off at max_tokens)" if reply.stop_reason == "max_tokens" else ""
        plan.error = f"model answer refused: {exc.reason}{cut}"
    return plan


def run(ctx: JobContext, target: Place, force: bool) -> RunResult:
    ref = scope_ref(target)
    directory = ref.memory_dir(ctx.home)
    if directory.is_symlink():
        return RunResult("skipped", f"{directory} is a symlink; dream only rewrites real directories")
    with scope_lock(ctx, target):  # a swap a crash interrupted is finished (or undone) before we read
        from memd.history import snapshots as swap  # noqa: PLC0415 - start-up
        swap.recover_scope(ctx.home, ref, ctx.log)
    if not force:
        ok, why = due_decisions(ctx, [target])[target]
        if not ok:
            return RunResult("skipped", f"not due: {why}")

    from memd.memory import readonly  # noqa: PLC0415 - start-up
    locked = readonly.reason(ctx.home, ctx.settings, ref.kind, ref.key)
    if locked:  # before any model call: nothing it says could be written
        return RunResult("skipped", f"read-only: {locked}")
    provider = ctx.provider
    if not directory.is_dir():
        return RunResult("skipped", "no memories to consolidate")
    snap = Snapshot(ctx.home, ref, store.new_run_id(ctx.now()))
    try:
        if provider != "offline":
            return _plan_and_apply(ctx, target, ref, provider, snap, force)
        with collector_paused():  # an offline run is CPU and file I/O from here on: no model to wait for
            return _plan_and_apply(ctx, target, ref, provider, snap, force)
    finally:
        snap.discard()


def _plan_and_apply(ctx: JobContext, target: Place, ref: Place, provider: str, snap: Snapshot,
                    force: bool) -> RunResult:  # fmt: skip
    """Plan under no memory lock (every write to the directory is atomic, so the scan reads whole
    files, and `sig0`, the stat of every entry the scan took before reading it, says what the plan
    was made on), then apply under the lock."""

    directory = ref.memory_dir(ctx.home)
    from memd.history import treecopy  # noqa: PLC0415 - start-up
    from memd.memory.scan import scan_dir  # noqa: PLC0415 - start-up
    stats: dict[str, Any] = {}
    with collector_paused():
        scan = scan_dir(directory, ref.kind, ref.key, keep=snap.known, stats=stats)  # the snapshot packs these bytes
    sig0 = treecopy.signature_of(stats)  # one stat an entry for the scan and the signature, not a second pass
    if not scan.memories:
        return RunResult("skipped", "no memories to consolidate")
    base = baseline_of(ctx, target, oldest=lambda: oldest_in(stats))  # a scope never consolidated: from the same stats
    protected = hand_edited(scan.memories, base.at if base.consolidated else None)
    rules = Rules(ref.kind, directory, frozenset(protected), taken=frozenset(sig0))
    if provider == "offline":
        plan = Plan(ops=offline_plan(scan.memories, protected))
    else:
        snap.start()
        plan = _model_plan(ctx, ref, scan.memories, rules, base)
    details: dict[str, Any] = {"provider": provider, "memories": len(scan.memories), "proposed": len(plan.ops),
                               "rejected": len(plan.rejected)}  # fmt: skip

    if plan.rejected:  # the validator's module (and its secret patterns) only when there is something to log
        from memd.memory.operations import log_rejections  # noqa: PLC0415 - start-up
        log_rejections(ctx.log, "operation.rejected", plan.rejected)  # a runaway answer: one summary line
    if plan.error:
        note_failure(ctx, target, plan.error)
        return RunResult("failed", plan.error, details)
    refused = guard(scan.memories, plan.ops, max_share=float(ctx.settings.memd.dream_max_delete_share), force=force)
    if refused:
        ctx.log.warning("dream.refused", scope=str(ref), reason=refused, operations=len(plan.ops))
        note_failure(ctx, target, refused)
        return RunResult("failed", f"refused: {refused}", details)
    with scope_lock(ctx, target):
        if treecopy.signature(directory, snap.checked) != sig0:
            # Another writer (an extraction, `memd remember`, an undo, a hand edit) came first:
            # the plan was made on what is no longer there. Nothing is written; the cursor stays.
            ctx.log.info("dream.deferred", scope=str(ref), reason="memory changed", provider=provider)
            waited = "the model answered" if provider != "offline" else "the dream planned"
            raise Deferred(f"memory changed while {waited}; will retry")
        return apply(ctx, target, ref, scan.memories, plan, sig0, snap, provider, force, details)
