"""The extraction gate and extraction (SPEC §3).

Every `extractEveryTurns` human turns of a session that is not paused:

1. a deterministic pre-gate (no model call when the new span holds no user text
   of substance: only tool output, commands or a word or two);
2. the gate: a small model answers yes or no — is there durable information? —
   anything else counts as no, with a warning;
3. on yes, extraction: a stronger model sees the span, both scopes' MEMORY.md and
   the bodies of the memories it may touch, and answers add/update/delete
   operations as JSON; each is validated and applied atomically; the indexes follow;
4. the cursor moves only once all of that is durable.

The offline provider answers 2 and 3 deterministically (`memd.offline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memd.clock import iso
from memd.jobctx import JobContext, RunResult, Target, get_cursor, set_cursor
from memd.locks import Scope
from memd.spans import Piece, read_span, render
from memd.transcripts import PAUSE_COMMANDS

NAME = "extract"
TRIGGER = "every extractEveryTurns human turns of a session not paused (gate first; extraction only on yes)"
NEEDS_MODEL = True
SPAN_BUDGET_CHARS = 24_000
GATE_BUDGET_CHARS = 6_000
GATE_ASSISTANT_CHARS = 300
MIN_SUBSTANCE_CHARS = 12
RELATED_BODIES = 8

GATE_SYSTEM = """You are the memory gate of a coding agent. You read the newest part of a conversation \
between a user and the agent and decide whether it holds durable information worth keeping in long-term memory.

Answer yes for: facts about the user or their long-term preferences; the user's corrections of, or explicit \
guidance on, the way of working; key decisions or constraints of the project that cannot be read from the code \
or the git history; pointers to outside resources (URLs, boards, tickets).
Answer no for: chit-chat; execution details of a one-off task; concrete code or command content; the agent's own \
analysis or summaries; temporary context.

Answer with exactly one word: yes or no."""

EXTRACT_SYSTEM = """You maintain the long-term memory of a coding agent. Memories are Markdown files with a name, \
a one-line description and a type:
- user: who the user is (role, expertise, preferences)
- feedback: the user's corrections of, or guidance on, the way of working (always say why)
- project: key decisions or constraints of the project not readable from the code or git history
- reference: pointers to outside resources (URLs, boards, tickets)

Scopes: "global" holds user and feedback memories that are not specific to one project; "project" holds project \
and reference memories and anything specific to this project.

You get the new part of a conversation, the indexes of both scopes and the current text of memories that may be \
affected. Decide what to add, update or delete. Update a memory rather than add a duplicate; keep the user's own \
edits of a memory unless the conversation contradicts them (the newer word wins). Bodies say what, why and how to \
apply. Turn relative dates ("tomorrow", "next week") into absolute ones using the dates given. Never store secrets, \
code listings or one-off task details. If nothing is worth keeping, return no operations.

Answer only with JSON: {"operations": [{"op": "add"|"update"|"delete", "scope": "global"|"project", \
"name": "...", "description": "...", "type": "user"|"feedback"|"project"|"reference", "body": "...", \
"reason": "..."}]}"""


def scopes(target: Target) -> list[Scope]:
    """Extraction writes both the drawer and the project's memory."""
    return [Scope.global_(), Scope.project(target.key or "")]


def targets(ctx: JobContext) -> list[Target]:
    from memd.ledger import session_rows

    return [Target("session", r["key"], r["session_id"]) for r in session_rows(ctx.conn)]


def extract_due(new_turns: int, every: int, new_bytes: int, enabled: bool) -> tuple[bool, str]:
    """Pure: due once `every` human turns have come since the cursor (§3.1)."""
    if not enabled:
        return False, "memory disabled"
    if new_bytes <= 0:
        return False, "nothing new"
    if new_turns < every:
        return False, f"{new_turns}/{every} human turns since the last run"
    return True, f"{new_turns} new human turns"


def _facts(ctx: JobContext, row: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    target = str(Target("session", row["key"], row["session_id"]))
    cur = get_cursor(ctx.conn, NAME, target) or {}
    return row["safe_human_turns"] - int(cur.get("human_turns", 0)), row["safe_offset"] - int(cur.get("offset", 0)), cur


_DUE_SQL = """
SELECT s.key, s.session_id, s.safe_human_turns, s.safe_offset,
       COALESCE(json_extract(c.value, '$.human_turns'), 0), COALESCE(json_extract(c.value, '$.offset'), 0)
FROM sessions s LEFT JOIN cursors c ON c.job = 'extract' AND c.target = 'session:' || s.key || ':' || s.session_id
WHERE s.is_subagent = 0 AND s.safe_offset > COALESCE(json_extract(c.value, '$.offset'), 0)
"""


def due(ctx: JobContext, only: Target | None = None) -> list[Target]:
    """Sessions with enough new human turns; one query, so a due-check over 10,000 idle sessions is cheap."""
    enabled = bool(ctx.settings.get("memory.enabled"))
    every = int(ctx.settings.get("memory.extractEveryTurns"))
    q, args = _DUE_SQL, ()
    if only is not None:
        q, args = q + " AND s.key = ? AND s.session_id = ?", (only.key, only.session_id)
    out = []
    for key, sid, turns, safe, cur_turns, cur_off in ctx.conn.execute(q, args):
        if extract_due(turns - cur_turns, every, safe - cur_off, enabled)[0]:
            out.append(Target("session", key, sid))
    return out


# -- pure pieces of the decision ---------------------------------------------------------


def unpaused(pieces: list[Piece], paused: bool) -> tuple[list[Piece], bool]:
    """Drop what was said while memory was paused; pause commands toggle (§3.4)."""
    kept = []
    for p in pieces:
        if p.kind == "command" and p.name in PAUSE_COMMANDS:
            paused = not paused
            continue
        if not paused:
            kept.append(p)
    return kept, paused


def human_texts(pieces: list[Piece]) -> list[tuple[str, str | None]]:
    return [(p.text, p.ts) for p in pieces if p.kind == "human"]


INTERRUPTED = "[Request interrupted by user"


def pre_gate(pieces: list[Piece]) -> tuple[bool, str]:
    """No model call when there is no user text of substance (tool output only, a word or two,
    or Claude Code's "[Request interrupted by user…]" markers, which the user never typed)."""
    texts = [t for t, _ in human_texts(pieces) if not t.lstrip().startswith(INTERRUPTED)]
    if not texts:
        return False, "no user text in the span (tool output only)"
    if max(len(t.strip()) for t in texts) < MIN_SUBSTANCE_CHARS or max(len(t.split()) for t in texts) < 3:
        return False, "no user text of substance"
    return True, ""


def gate_text(pieces: list[Piece], budget: int = GATE_BUDGET_CHARS) -> str:
    """What the gate reads: what the user said, and the agent's words clipped short.

    Tool calls and results are never durable information (§3.1: concrete code or
    command content counts as no), so the cheap gate does not pay to read them;
    the extraction call, on yes, sees the whole span.
    """
    talk = []
    for p in pieces:
        if p.kind == "human" and not p.text.lstrip().startswith(INTERRUPTED):
            talk.append(p)
        elif p.kind == "assistant":
            clipped = p.text if len(p.text) <= GATE_ASSISTANT_CHARS else p.text[:GATE_ASSISTANT_CHARS] + " […]"
            talk.append(Piece("assistant", clipped, p.end, p.ts))
    return render(talk, budget)


def parse_gate(text: str) -> bool | None:
    """yes → True, no → False; anything else → None, which the job counts as no with a warning.

    Strict on purpose: the gate must answer one word, and a rambling answer is a
    sign the prompt or the model is off, worth a warning rather than a guess.
    """
    word = text.strip().strip(".!\"'`*").strip().lower()
    return {"yes": True, "no": False}.get(word)


# -- the run ----------------------------------------------------------------------------


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
    from memd.offline import has_durable

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
        ops = memwrite.offline_operations(plan.pieces)
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
    from memd import memwrite
    from memd.opsvalidate import ModelOutputError, parse_model_json, validate_operations

    context, shown = memwrite.prompt_context(ctx, target.key or "", human_texts(plan.pieces), RELATED_BODIES)
    user = f"{context}\n\n## New conversation\n\n{render(plan.pieces, SPAN_BUDGET_CHARS)}"
    reply = ctx.llm.complete(job="extract", tier="strong", system=EXTRACT_SYSTEM, user=user)
    try:
        data = parse_model_json(reply.text)
        accepted, rejected = validate_operations(data, allowed_scopes=("global", "project"))
    except ModelOutputError as exc:
        from memd.llm import ModelCallFailed

        raise ModelCallFailed(f"extraction answer refused: {exc}") from exc
    return accepted, rejected, shown
