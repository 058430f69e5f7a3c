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

from dataclasses import dataclass, fields, replace
from typing import Any

from jobs.extract.provenance import sources
from memd.memory.classify import (
    DONT_KEEP,
    classify,
    describe,
    is_chinese,
    is_question,
    names_for,
    project_names,
    scope_of,
    sentences,
    statement_digest,
)
from memd.memory.operations import Operation, validate_operations
from memd.redact.redactor import redact
from memd.transcripts.spans import Piece


@dataclass(frozen=True)
class Found:
    """One durable statement: what it is, where it belongs, the words to keep, and which turn said it.

    `statement` is the digest of the statement's normalised text (`classify.statement_digest`): the
    write path decides "the same statement again" on it, never on the name. `names` are longer names
    to try, in order, when `name` is taken by a different statement."""

    kind: str
    type: str
    scope: str
    name: str
    description: str
    body: str
    turn: int = 0  # index of the (text, ts) pair it came from
    statement: str = ""
    names: tuple[str, ...] = ()


_HOW = {
    ("user", "global"): "keep it in mind in every project.",
    ("user", "project"): "keep it in mind in this project.",
    ("feedback", "global"): "follow it in every project.",
    ("feedback", "project"): "follow it in this project.",
    ("project", "project"): "take it as given when working on this project.",
    ("reference", "project"): "look there first.",
}

_HOW_ZH = {
    ("user", "global"): "在每个项目里都记着这一点。",
    ("user", "project"): "在这个项目里记着这一点。",
    ("feedback", "global"): "在每个项目里都照此执行。",
    ("feedback", "project"): "在这个项目里照此执行。",
    ("project", "project"): "在这个项目里把它当作前提。",
    ("reference", "project"): "先去那里查。",
}


def find_durable(human_texts: list[tuple[str, str | None]], project_key: str = "") -> list[Found]:
    """Durable statements in (text, timestamp) pairs of human turns, in order, one per distinct
    statement (a statement said twice is kept once, from its last turn); two distinct statements
    never share a name.

    The text is redacted first: names, descriptions and bodies are all derived from redacted text.
    `project_key` (the memory key) lets a rule that names its project ("in spotter we …") go there.
    """
    out: dict[str, Found] = {}
    projects = project_names(project_key)
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
            scope = scope_of(mtype, s, projects)
            desc, rest = describe(s)
            digest = statement_digest(s)
            out.pop(digest, None)
            names = names_for(desc)
            out[digest] = Found(kind, mtype, scope, names[0], desc, _body(said, i, rest, ts, mtype, scope), turn,
                                digest, tuple(names[1:]))  # fmt: skip
    return _distinct_names(list(out.values()))


def _body(said: list[str], i: int, rest: str, ts: str | None, mtype: str, scope: str) -> str:
    """What the description does not say (the rest of the statement, the sentence that prompted it),
    then why and how to apply it, in the statement's own language."""
    zh = is_chinese(said[i])
    when = f"（{ts[:10]}）" if ts and zh else f" ({ts[:10]})" if ts else ""
    context = _context(said, i, zh)
    parts = [p for p in (rest, context) if p]
    if zh:
        why = f"**为什么：** 用户明确这样说过{when}。"
        how = f"**怎么用：** {_HOW_ZH.get((mtype, scope), '照此执行。')}"
    else:
        why = f"**Why:** the user said so explicitly{when}."
        how = f"**How to apply:** {_HOW.get((mtype, scope), 'follow it.')}"
    return "\n\n".join([*parts, f"{why}\n{how}"])


def _distinct_names(found: list[Found]) -> list[Found]:
    """Within one run, a name taken by an earlier statement: the next longer name, else a number."""
    taken: set[str] = set()
    out = []
    for f in found:
        name = next((n for n in (f.name, *f.names) if n.casefold() not in taken), "")
        k = 2
        while not name:
            name = f"{f.name}-{k}" if f"{f.name}-{k}".casefold() not in taken else ""
            k += 1
        taken.add(name.casefold())
        out.append(replace(f, name=name))
    return out


def _context(said: list[str], i: int, zh: bool = False) -> str:
    """The sentence just before a statement when it is what prompted it ("No, don't return 400 there.")."""
    if i == 0 or classify(said[i - 1]) is not None or is_question(said[i - 1]) or len(said[i - 1]) > 200:
        return ""
    return f"起因：“{said[i - 1]}”" if zh else f"Said after: “{said[i - 1]}”"


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
    statement: str = ""  # digest of the statement's normalised text: what "the same statement" is decided on
    names: tuple[str, ...] = ()  # longer names to try when `name` is taken by a different statement

    @classmethod
    def of(cls, op: Operation, sources: list[dict[str, Any]], found: Found | None = None) -> Sourced:
        base = {f.name: getattr(op, f.name) for f in fields(op)}
        if found is None:
            return cls(**base, sources=tuple(sources))
        return cls(**base, sources=tuple(sources), statement=found.statement, names=found.names)


def offline_operations(pieces: list[Piece], session_id: str = "",
                       project_key: str = "") -> tuple[list[Sourced], list[dict[str, Any]]]:  # fmt: skip
    """The offline provider's operations, validated like a model's, each with the turn its statement
    came from; and the sources of the whole call (the union of those turns)."""

    humans = [p for p in pieces if p.kind == "human"]
    found = find_durable([(p.text, p.ts) for p in humans], project_key)
    data = {"operations": [
        {"op": "add", "scope": f.scope, "name": f.name, "description": f.description, "type": f.type, "body": f.body}
        for f in found
    ]}  # fmt: skip
    accepted, rejected = validate_operations(data, allowed_scopes=("global", "project"))
    refused = {i for i, _ in rejected}
    kept = [f for i, f in enumerate(found) if i not in refused]
    origins = [humans[f.turn] for f in kept]
    ops = [Sourced.of(op, sources(session_id, [piece]), f) for op, piece, f in zip(accepted, origins, kept, strict=True)]
    union = sorted({id(p): p for p in origins}.values(), key=lambda p: p.end)
    return ops, sources(session_id, union)
