"""One extraction run: read the span since the cursor, pre-gate, gate, extract, apply, move the cursor.

The cursor moves only once every output of the run is durable (DESIGN "Cursor rule").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.extract.gate import GATE_SYSTEM, gate_text, human_texts, parse_gate, pre_gate
from jobs.extract.trigger import NAME, extract_due
from memd.clock import iso
from memd.job.context import JobContext, RunResult, get_cursor, set_cursor
from memd.transcripts.spans import Piece, read_span, render
from memd.tree import Place


def _facts(ctx: JobContext, row: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    """New human turns and bytes since the cursor; a cursor of an older transcript generation
    (the file was rewritten) counts from the start."""
    target = str(Place("session", row["key"], row["session_id"]))
    cur = get_cursor(ctx.conn, NAME, target) or {}
    if int(cur.get("generation", 0)) != int(row["generation"]):
        cur = {"generation": int(row["generation"]), "memory_key": cur.get("memory_key"), "rewritten": True}
    return row["safe_human_turns"] - int(cur.get("human_turns", 0)), row["safe_offset"] - int(cur.get("offset", 0)), cur


@dataclass
class Plan:
    """What one extraction run reads and judges: the span, its pieces, and the cursor it moves."""

    start: int
    end: int
    pieces: list[Piece]
    paused_after: bool
    human_turns: int
    memory_key: str
    generation: int
    judged: list[str]  # digests of the user texts this run judges
    pause_uuid: str | None = None  # the record that last said a pause command (see pause.Follow)


def _session(ctx: JobContext, target: Place) -> dict[str, Any] | None:
    row = ctx.conn.execute(
        "SELECT key, session_id, path, format, generation, safe_offset, safe_human_turns "
        "FROM sessions WHERE key=? AND session_id=? AND is_subagent=0",
        (target.key, target.session_id),
    ).fetchone()
    return None if row is None else dict(row)


def run(ctx: JobContext, target: Place, force: bool) -> RunResult:
    """Decide and ask the model without holding a memory lock; apply under the memory locks after
    checking that no other run moved the cursor meanwhile (issue 16: no lock held across a model call)."""
    row = _session(ctx, target)
    if row is None:
        return RunResult("skipped", "unknown session")
    if not ctx.settings.memory.enabled:
        return RunResult("skipped", "memory disabled (memory.enabled is false; --force does not override it)")
    turns, new_bytes, cur = _facts(ctx, row)
    ok, why = extract_due(turns, int(ctx.settings.memory.extract_every_turns), new_bytes, True)
    if not ok and not (force and new_bytes > 0):
        return RunResult("skipped", f"not due: {why}")
    plan = _plan(ctx, target, row, cur)
    if not plan.pieces and plan.paused_after:
        return _advance(ctx, target, cur, plan, RunResult("skipped", "paused"))
    go, why = pre_gate(plan.pieces)
    if not go:
        return _advance(ctx, target, cur, plan, RunResult("ok", f"pre-gate: {why}", {"gate": "skipped"}))
    offline = ctx.provider == "offline"
    if not (_offline_gate(plan) if offline else _model_gate(ctx, plan)):
        return _advance(ctx, target, cur, plan, RunResult("ok", "gate: no", {"gate": "no"}))
    ops, rejected, shown, provider, sources = _operations(ctx, plan, offline, target.session_id or "")
    from jobs.extract.drawer import withhold  # noqa: PLC0415 - start-up
    ops, held = withhold(ops, ctx.settings)
    if held:  # the drawer is off: said, never written (issue 26)
        ctx.log.info("extraction.drawer_off", withheld=held)
    return _apply(ctx, target, cur, plan, ops, rejected, shown, provider, sources)


def _plan(ctx: JobContext, target: Place, row: dict[str, Any], cur: dict[str, Any]) -> Plan:
    """What this run judges: the span since the cursor, minus what was said while paused and,
    after a rewrite, minus the user texts already judged before it."""

    start = int(cur.get("offset", 0))
    span = read_span(row["path"], start, row["safe_offset"], row["format"])
    from memd.ledger import pause  # noqa: PLC0415 - start-up
    words = pause.words(ctx.conn, row["key"], row["session_id"], int(row["generation"]), after=start - 1)
    state = pause.Follow(bool(cur.get("paused", False)), cur.get("pause_uuid"))
    pieces = pause.follow(span.pieces, state, words)
    if cur.get("rewritten"):
        seen = _judged(ctx, str(target))
        pieces = [p for p in pieces if p.kind != "human" or _digest(p.text) not in seen]
    from memd.discovery import session_cwd  # noqa: PLC0415 - start-up
    from memd.keys import memory_key_for_session  # noqa: PLC0415 - start-up
    key = cur.get("memory_key") or memory_key_for_session(session_cwd(row["path"]), row["key"])
    digests = [_digest(p.text) for p in pieces if p.kind == "human"]
    return Plan(span.start, span.end, pieces, state.paused, row["safe_human_turns"], key, int(row["generation"]),
                digests, state.last_uuid)  # fmt: skip


def _digest(text: str) -> str:
    import hashlib  # noqa: PLC0415 - start-up
    return hashlib.blake2b(text.strip().encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def _judged(ctx: JobContext, target: str) -> set[str]:
    return {r[0] for r in ctx.conn.execute("SELECT digest FROM judged WHERE target=?", (target,))}


def _apply(ctx: JobContext, target: Place, cur: dict[str, Any], plan: Plan, ops: list[Any],
           rejected: list[tuple[int, str]], shown: set[str] | None, provider: str,
           sources: list[dict[str, Any]]) -> RunResult:  # fmt: skip
    """Under the drawer's and the project's locks: re-check the cursor, write, refresh, advance."""

    places = [Place.global_(), Place.project(plan.memory_key)]
    from memd.locks import acquire  # noqa: PLC0415 - start-up
    with acquire(ctx.home, places, timeout=float(ctx.settings.memd.lock_timeout_seconds)):
        if _cursor_moved(ctx, target, cur):
            return RunResult("skipped", "another run handled this span meanwhile")

        from memd.memory.operations import log_rejections  # noqa: PLC0415 - start-up
        log_rejections(ctx.log, "operation.rejected", rejected)  # a runaway answer: one summary line
        from memd.write import apply as memwrite  # noqa: PLC0415 - start-up
        applied = memwrite.apply(ctx, plan.memory_key, ops, provider=provider, session_id=target.session_id or "",
                                 shown=shown, sources=sources)  # fmt: skip
        details = {"gate": "yes", "applied": applied.counts(), "rejected": len(rejected) + len(applied.refused)}
        if plan.memory_key != target.key:
            details["memory_key"] = plan.memory_key
        return _advance(ctx, target, cur, plan, RunResult("ok", "gate: yes", details))


def _cursor_moved(ctx: JobContext, target: Place, cur: dict[str, Any]) -> bool:
    now = get_cursor(ctx.conn, NAME, str(target)) or {}
    if cur.get("rewritten"):
        return int(now.get("generation", 0)) == int(cur.get("generation", 0)) and "offset" in now
    return int(now.get("offset", 0)) != int(cur.get("offset", 0)) or now.get("generation") != cur.get("generation")


def _advance(ctx: JobContext, target: Place, cur: dict[str, Any], plan: Plan, result: RunResult) -> RunResult:
    """The cursor rule: called only after every output of the run is durable. Compare-and-set:
    a run that finds the cursor moved by another one leaves it alone."""
    value = {"offset": plan.end, "human_turns": plan.human_turns, "paused": plan.paused_after,
             "pause_uuid": plan.pause_uuid, "generation": plan.generation, "memory_key": plan.memory_key}  # fmt: skip
    ctx.conn.execute("BEGIN IMMEDIATE")
    try:
        if _cursor_moved(ctx, target, cur):
            ctx.conn.execute("ROLLBACK")
            return RunResult("skipped", "another run handled this span meanwhile")
        ctx.conn.executemany("INSERT OR IGNORE INTO judged(target, digest) VALUES (?, ?)",
                             [(str(target), d) for d in plan.judged])  # fmt: skip
        set_cursor(ctx.conn, NAME, str(target), value, iso(ctx.now()))
        ctx.conn.execute("COMMIT")
    except BaseException:
        ctx.conn.execute("ROLLBACK")
        raise
    return result


def _offline_gate(plan: Plan) -> bool:
    from jobs.extract.offline import has_durable  # noqa: PLC0415 - start-up
    return has_durable(human_texts(plan.pieces))


def _model_gate(ctx: JobContext, plan: Plan) -> bool:
    reply = ctx.llm.complete(job="gate", tier="small", system=GATE_SYSTEM, user=gate_text(plan.pieces),
                             max_tokens=5)  # fmt: skip
    answer = parse_gate(reply.text)
    if answer is None:
        ctx.log.warning("gate.unclear_answer", answer=reply.text[:40])
        return False
    return answer


def _operations(
    ctx: JobContext, plan: Plan, offline: bool, session_id: str
) -> tuple[list[Any], list[tuple[int, str]], set[str] | None, str, list[dict[str, Any]]]:
    """The operations to apply, from the offline rules or the strong model (no lock held), and
    their provenance: the model saw the whole span, so its operations come from every human piece
    of it; an offline operation comes from the one turn its statement was in (it carries that
    itself, see `offline.Sourced`), and the call's sources are the union of those turns."""

    if offline:
        from jobs.extract.offline import offline_operations  # noqa: PLC0415 - start-up
        ops, union = offline_operations(plan.pieces, session_id, plan.memory_key)
        return ops, [], None, "offline", union
    ops, rejected, shown = _model_operations(ctx, plan)
    ops = _without_mass_deletes(ctx, ops, shown)
    from jobs.extract.provenance import sources, typed  # noqa: PLC0415 - start-up
    return ops, rejected, shown, "anthropic", sources(session_id, typed(plan.pieces))


def _without_mass_deletes(ctx: JobContext, ops: list[Any], shown: set[str]) -> list[Any]:
    """An answer deleting every memory it was shown (or more than `memd.dreamMaxDeleteShare` of them)
    loses its deletions, with one warning; its adds and updates stand. Dream's limit, for extraction."""
    from memd.memory.deletions import too_many_deleted  # noqa: PLC0415 - start-up
    deletes = [o for o in ops if getattr(o, "op", None) == "delete"]
    why = too_many_deleted(len(shown), len(deletes), float(ctx.settings.memd.dream_max_delete_share))
    if why is None:
        return ops
    ctx.log.warning("extraction.deletions_refused", count=len(deletes), shown=len(shown),
                    reason=f"the answer {why.replace('of the scope ', '')} it was shown")  # fmt: skip
    return [o for o in ops if getattr(o, "op", None) != "delete"]


def _model_operations(ctx: JobContext, plan: Plan) -> tuple[list[Any], list[tuple[int, str]], set[str]]:
    """Ask the strong model; when its answer touches a memory whose current text it was not shown
    (memwrite would refuse that, rightly), fetch those memories and ask once more with their text,
    so a correction ("we switched to poetry, uv is gone") lands instead of being dropped. At most
    two strong calls per run: what the second answer still touches unseen is refused as before."""

    texts = human_texts(plan.pieces)
    from jobs.extract.prompt import RELATED_BODIES, SPAN_BUDGET_CHARS, prompt_context, retry_note, unseen_targets  # noqa: PLC0415 - start-up
    conversation = f"## New conversation\n\n{render(plan.pieces, SPAN_BUDGET_CHARS)}"
    context, shown = prompt_context(ctx, plan.memory_key, texts, RELATED_BODIES)
    from memd.memory.answer import ModelOutputError  # noqa: PLC0415 - start-up
    try:
        accepted, rejected, answer = _ask(ctx, f"{context}\n\n{conversation}")
    except ModelOutputError as exc:
        from memd.llm.types import ModelCallFailed  # noqa: PLC0415 - start-up
        raise ModelCallFailed(f"extraction answer refused: {exc}") from exc
    unseen = unseen_targets(ctx, plan.memory_key, accepted, shown)
    if not unseen:
        return accepted, rejected, shown
    ctx.log.info("extraction.retried", unseen=[f"{m.scope}:{m.name}" for m in unseen])
    context2, shown2 = prompt_context(ctx, plan.memory_key, texts, RELATED_BODIES, extra=unseen)
    try:
        again, rejected2, _ = _ask(ctx, f"{context2}\n\n{conversation}\n\n{retry_note(answer, unseen)}")
    except ModelOutputError as exc:
        ctx.log.warning("retry_answer.refused", reason=exc.reason)
        return accepted, rejected, shown  # the first answer stands; what it touches unseen is refused
    return again, rejected2, shown | shown2


def _ask(ctx: JobContext, user: str) -> tuple[list[Any], list[tuple[int, str]], str]:
    """One strong call: (accepted operations, rejections, the answer's text). Raises ModelOutputError
    when the answer as a whole is unusable."""

    from jobs.extract.drawer import system_prompt  # noqa: PLC0415 - start-up
    from jobs.extract.prompt import EXTRACT_SYSTEM  # noqa: PLC0415 - start-up
    system = system_prompt(EXTRACT_SYSTEM, ctx.settings)
    reply = ctx.llm.complete(job="extract", tier="strong", system=system, user=user)
    from memd.memory.answer import parse_model_json  # noqa: PLC0415 - start-up
    data = parse_model_json(reply.text)
    from memd.memory.operations import validate_operations  # noqa: PLC0415 - start-up
    accepted, rejected = validate_operations(data, allowed_scopes=("global", "project"))
    return accepted, rejected, reply.text
