"""The offline provider's extraction: deterministic, no network.

It finds explicit durable statements in what the user said — a request to
remember, always/never rules, stated preferences and roles, decisions and
constraints of the project, pointers to outside resources — and turns each into
one memory. It is deliberately conservative (a wrong memory costs more than a
missed one): a sentence must carry one of these markers, and questions,
observations ("it always crashes"), one-off choices ("I prefer the second
option"), temporary context ("for now", "in this PR") and turns that ask not
to be remembered are never kept. Everything it writes says `provider: offline`
in its metadata. It answers both the gate (`has_durable`) and extraction
(`find_durable`, `offline_operations`).

Judged on labelled statements by bench/bench_offline.py (tests/data/offline_labels.jsonl);
the figures are in bench/RESULTS.md.

Secrets are redacted from the text before anything is derived from it: a name,
a file name or a description is never built from a raw sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from jobs.extract.provenance import sources
from memd.memory.classify import DONT_KEEP, classify, describe, is_question, name_for, scope_of, sentences
from memd.memory.operations import Operation, validate_operations
from memd.redact.redactor import redact
from memd.transcripts.spans import Piece


@dataclass(frozen=True)
class Found:
    """One durable statement: what it is, where it belongs, the words to keep, and which turn said it."""

    kind: str
    type: str
    scope: str
    name: str
    description: str
    body: str
    turn: int = 0  # index of the (text, ts) pair it came from






















_HOW = {
    ("user", "global"): "keep it in mind in every project.",
    ("user", "project"): "keep it in mind in this project.",
    ("feedback", "global"): "follow it in every project.",
    ("feedback", "project"): "follow it in this project.",
    ("project", "project"): "take it as given when working on this project.",
    ("reference", "project"): "look there first.",
}


def find_durable(human_texts: list[tuple[str, str | None]]) -> list[Found]:
    """Durable statements in (text, timestamp) pairs of human turns, in order, one per name.

    The text is redacted first: names, descriptions and bodies are all derived from redacted text.
    """
    out: dict[str, Found] = {}
    for turn, (raw, ts) in enumerate(human_texts):
        text = redact(raw)
        if DONT_KEEP.search(text):
            continue
        said = sentences(text)
        for i, s in enumerate(said):
            got = classify(s)
            if got is None:
                continue
            kind, mtype = got
            scope = scope_of(mtype, s)
            desc, rest = describe(s)
            name = name_for(desc)
            when = f" ({ts[:10]})" if ts else ""
            context = _context(said, i)
            parts = [p for p in (rest, context) if p]
            why = f"**Why:** the user said so explicitly{when}."
            how = f"**How to apply:** {_HOW.get((mtype, scope), 'follow it.')}"
            body = "\n\n".join([*parts, f"{why}\n{how}"])
            out[name] = Found(kind, mtype, scope, name, desc, body, turn)
    return list(out.values())


def _context(said: list[str], i: int) -> str:
    """The sentence just before a statement when it is what prompted it ("No, don't return 400 there.")."""
    if i == 0 or classify(said[i - 1]) is not None or is_question(said[i - 1]) or len(said[i - 1]) > 200:
        return ""
    return f"Said after: “{said[i - 1]}”"


def has_durable(human_texts: list[tuple[str, str | None]]) -> bool:
    """The offline gate: yes exactly when there is something to extract."""
    return bool(find_durable(human_texts))


@dataclass(frozen=True)
class Sourced(Operation):
    """An operation that knows the user turn it came from (`sources`, the `metadata.sources` form).

    The write path stores a call's `sources` on every memory the call writes; an offline run over a
    span of several turns makes memories from different turns, so each operation carries its own,
    for a write path that prefers an operation's sources to the call's."""

    sources: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, op: Operation, sources: list[dict[str, Any]]) -> Sourced:
        return cls(**{f.name: getattr(op, f.name) for f in fields(op)}, sources=tuple(sources))


def offline_operations(pieces: list[Piece], session_id: str = "") -> tuple[list[Sourced], list[dict[str, Any]]]:
    """The offline provider's operations, validated like a model's, each with the turn its statement
    came from; and the sources of the whole call (the union of those turns)."""

    humans = [p for p in pieces if p.kind == "human"]
    found = find_durable([(p.text, p.ts) for p in humans])
    data = {"operations": [
        {"op": "add", "scope": f.scope, "name": f.name, "description": f.description, "type": f.type, "body": f.body}
        for f in found
    ]}  # fmt: skip
    accepted, rejected = validate_operations(data, allowed_scopes=("global", "project"))
    refused = {i for i, _ in rejected}
    origins = [humans[f.turn] for i, f in enumerate(found) if i not in refused]
    ops = [Sourced.of(op, sources(session_id, [piece])) for op, piece in zip(accepted, origins, strict=True)]
    union = sorted({id(p): p for p in origins}.values(), key=lambda p: p.end)
    return ops, sources(session_id, union)
