"""One extraction run: read the span since the cursor, pre-gate, gate, extract, apply, move the cursor.

The cursor moves only once every output of the run is durable (DESIGN "Cursor rule").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.extract.gate import (
    GATE_SYSTEM,
    gate_text,
    human_texts,
    parse_gate,
    pre_gate,
    unpaused,
)
from jobs.extract.trigger import NAME, extract_due
from memd.clock import iso
from memd.jobctx import JobContext, RunResult, Target, get_cursor, set_cursor
from memd.spans import Piece, read_span, render


def _facts(ctx: JobContext, row: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    target = str(Target("session", row["key"], row["session_id"]))
    cur = get_cursor(ctx.conn, NAME, target) or {}
    return row["safe_human_turns"] - int(cur.get("human_turns", 0)), row["safe_offset"] - int(cur.get("offset", 0)), cur


@dataclass
class Plan:
    start: int
    end: int
    pieces: list[Piece]
    paused_after: bool
    human_turns: int


def _session(ctx: JobContext, target: Target) -> dict[str, Any] | None:
    from memd.ledger import session_rows

    for row in session_rows(ctx.conn, target.key):
        if row["session_id"] == target.session_id:
            return row
    return None


def _cli_paused(row: dict[str, Any]) -> bool:
    """A pause set from the CLI after the transcript's last toggle: nothing is extracted."""
    if row["pause_cli"] != 1:
        return False
    toggled = row["pause_toggled_ts"]
    return toggled is None or row["pause_cli_ts"] is None or str(row["pause_cli_ts"]) >= str(toggled)


def run(ctx: JobContext, target: Target, force: bool) -> RunResult:
    row = _session(ctx, target)
    if row is None:
        return RunResult("skipped", "unknown session")
    if not ctx.settings.get("memory.enabled") and not force:
        return RunResult("skipped", "memory disabled")
    turns, new_bytes, cur = _facts(ctx, row)
    ok, why = extract_due(turns, int(ctx.settings.get("memory.extractEveryTurns")), new_bytes, True)
    if not ok and not (force and new_bytes > 0):
        return RunResult("skipped", f"not due: {why}")
    span = read_span(row["path"], int(cur.get("offset", 0)), row["safe_offset"], row["format"])
    pieces, paused_after = unpaused(span.pieces, bool(cur.get("paused", False)))
    plan = Plan(span.start, span.end, pieces, paused_after, row["safe_human_turns"])
    if _cli_paused(row):
        return _advance(ctx, target, plan, RunResult("skipped", "paused (memd pause)"))
    go, why = pre_gate(plan.pieces)
    if not go:
        return _advance(ctx, target, plan, RunResult("ok", f"pre-gate: {why}", {"gate": "skipped"}))
    offline = _provider(ctx) == "offline"
    if not (_offline_gate(plan) if offline else _model_gate(ctx, plan)):
        return _advance(ctx, target, plan, RunResult("ok", "gate: no", {"gate": "no"}))
    applied = _extract(ctx, target, plan, offline)
    return _advance(ctx, target, plan, RunResult("ok", "gate: yes", {"gate": "yes", **applied}))


def _provider(ctx: JobContext) -> str:
    """What the model layer resolved: "offline" or "anthropic" (which may still wait for a key)."""
    return str(ctx.llm.provider)


def _advance(ctx: JobContext, target: Target, plan: Plan, result: RunResult) -> RunResult:
    """The cursor rule: called only after every output of the run is durable."""
    value = {"offset": plan.end, "human_turns": plan.human_turns, "paused": plan.paused_after}
    set_cursor(ctx.conn, NAME, str(target), value, iso(ctx.now()))
    return result


def _offline_gate(plan: Plan) -> bool:
    from jobs.extract.offline import has_durable

    return has_durable(human_texts(plan.pieces))


def _model_gate(ctx: JobContext, plan: Plan) -> bool:
    reply = ctx.llm.complete(job="gate", tier="small", system=GATE_SYSTEM, user=gate_text(plan.pieces),
                             max_tokens=5)  # fmt: skip
    answer = parse_gate(reply.text)
    if answer is None:
        ctx.log.warning("gate.unclear_answer", answer=reply.text[:40])
        return False
    return answer


def _extract(ctx: JobContext, target: Target, plan: Plan, offline: bool) -> dict[str, Any]:
    from memd import memwrite

    shown: set[str] | None = None
    if offline:
        from jobs.extract.offline import offline_operations

        ops = offline_operations(plan.pieces)
        rejected: list[tuple[int, str]] = []
        provider = "offline"
    else:
        ops, rejected, shown = _model_operations(ctx, target, plan)
        provider = "anthropic"
    for idx, reason in rejected:
        ctx.log.warning("operation.rejected", index=idx, reason=reason)
    applied = memwrite.apply(ctx, target.key or "", ops, provider=provider, session_id=target.session_id or "",
                             shown=shown)  # fmt: skip
    return {"applied": applied.counts(), "rejected": len(rejected) + len(applied.refused)}


def _model_operations(
    ctx: JobContext, target: Target, plan: Plan
) -> tuple[list[Any], list[tuple[int, str]], set[str]]:
    from jobs.extract.prompt import (
        EXTRACT_SYSTEM,
        RELATED_BODIES,
        SPAN_BUDGET_CHARS,
        prompt_context,
    )
    from memd.opsvalidate import ModelOutputError, parse_model_json, validate_operations

    context, shown = prompt_context(ctx, target.key or "", human_texts(plan.pieces), RELATED_BODIES)
    user = f"{context}\n\n## New conversation\n\n{render(plan.pieces, SPAN_BUDGET_CHARS)}"
    reply = ctx.llm.complete(job="extract", tier="strong", system=EXTRACT_SYSTEM, user=user)
    try:
        data = parse_model_json(reply.text)
        accepted, rejected = validate_operations(data, allowed_scopes=("global", "project"))
    except ModelOutputError as exc:
        from memd.llm import ModelCallFailed

        raise ModelCallFailed(f"extraction answer refused: {exc}") from exc
    return accepted, rejected, shown

