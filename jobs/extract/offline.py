"""The offline provider's extraction: deterministic, no network.

It finds explicit durable statements in what the user said — a request to
remember, always/never rules, stated preferences, corrections of the agent,
decisions, pointers to outside resources — and turns each into one memory.
It is deliberately conservative: a sentence must carry one of these markers.
Everything it writes says `provider: offline` in its metadata. It answers
both the gate (`has_durable`) and extraction (`offline_operations`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_SENT = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_URL = re.compile(r"https?://[^\s)>\]]+")
RULES: list[tuple[str, str, re.Pattern[str]]] = [
    # (kind, memory type, pattern) — first match wins for a sentence
    ("remember", "", re.compile(r"\b(remember|keep in mind|note that|for future reference)\b|记住|请记", re.IGNORECASE)),
    ("rule", "feedback", re.compile(r"\b(always|never|from now on|every time|don'?t ever)\b|总是|永远不要|不要再", re.IGNORECASE)),
    ("correction", "feedback", re.compile(r"^(no|nope|stop|wrong|that'?s not)\b|\b(don'?t|do not|instead of|rather than)\b.*\b(use|do|return|write|add|call)\b", re.IGNORECASE)),
    ("decision", "project", re.compile(r"\bwe (decided|agreed|chose|use|deploy|release|require|standardi[sz]ed)\b|\bour (convention|policy|contract|rule)\b|决定", re.IGNORECASE)),
    ("preference", "user", re.compile(r"\bI (prefer|like|hate|dislike|want|find)\b|\bI'?m (a|an|mostly)\b|\bmy (role|background|preference)\b|\bprefer\b|我(喜欢|更喜欢|习惯)", re.IGNORECASE)),
]
_PROJECT_WORDS = re.compile(
    r"\b(we|our|repo|repository|project|deploy|migration|api|contract|ci|staging|production|branch|main|pr)\b", re.IGNORECASE
)
_STOP = frozenset([
    "a", "an", "the", "and", "or", "but", "to", "of", "in", "on", "for", "with", "that", "this", "it", "is",
    "are", "be", "we", "i", "you", "our", "my", "me", "please", "always", "never", "remember", "dont",
    "don't", "do", "not", "just", "so", "as", "at", "by", "from", "m", "s", "t", "re", "ll", "ve", "no",
])


@dataclass(frozen=True)
class Found:
    """One durable statement: what it is, where it belongs, and the words to keep."""

    kind: str
    type: str
    scope: str
    name: str
    description: str
    body: str


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(text) if len(s.strip()) >= 8]


def classify(sentence: str) -> tuple[str, str] | None:
    """(kind, type) of a durable statement, or None for anything else."""
    for kind, mtype, pat in RULES:
        if pat.search(sentence):
            if kind == "remember":
                mtype = "project" if _PROJECT_WORDS.search(sentence) else "user"
            if _URL.search(sentence) and mtype in ("project", "user"):
                mtype = "reference"
            return kind, mtype
    if _URL.search(sentence) and re.search(r"\b(board|ticket|docs?|wiki|dashboard|runbook|tracker)\b", sentence, re.IGNORECASE):
        return "pointer", "reference"
    return None


def scope_of(mtype: str, sentence: str) -> str:
    """User and feedback memories not tied to this project go to the global drawer (§3.2)."""
    if mtype in ("project", "reference"):
        return "project"
    if mtype == "feedback" and re.search(r"\b(this|the) (repo|repository|project|codebase)\b|\bhere\b|\bin this\b", sentence, re.IGNORECASE):
        return "project"
    return "global"


def name_for(sentence: str) -> str:
    sentence = _URL.sub(" ", sentence)
    raw = re.findall(r"[A-Za-z0-9][A-Za-z0-9+#.-]*|[\u4e00-\u9fff]{2,}", sentence.lower())
    words = [w.rstrip(".-") for w in raw if w.rstrip(".-") not in _STOP]
    return "-".join(words[:5]) or "note"


def find_durable(human_texts: list[tuple[str, str | None]]) -> list[Found]:
    """Durable statements in (text, timestamp) pairs of human turns, in order, one per name."""
    out: dict[str, Found] = {}
    for text, ts in human_texts:
        turn = text.strip() if len(text.strip()) <= 600 else text.strip()[:597] + "…"
        for s in sentences(text):
            got = classify(s)
            if got is None:
                continue
            kind, mtype = got
            name = name_for(s)
            desc = s if len(s) <= 150 else s[:147].rstrip() + "…"
            when = f" ({ts[:10]})" if ts else ""
            said = turn if kind == "correction" else s
            body = f"{said}\n\n**Why:** the user said so explicitly{when}.\n**How to apply:** follow it in future work."
            out[name] = Found(kind, mtype, scope_of(mtype, s), name, desc, body)
    return list(out.values())


def has_durable(human_texts: list[tuple[str, str | None]]) -> bool:
    """The offline gate: yes exactly when there is something to extract."""
    return any(classify(s) for text, _ in human_texts for s in sentences(text))


def offline_operations(pieces: list[Any]) -> list[Any]:
    """The offline provider's operations, validated like a model's."""
    from memd.opsvalidate import validate_operations

    texts = [(p.text, p.ts) for p in pieces if p.kind == "human"]
    data = {"operations": [
        {"op": "add", "scope": f.scope, "name": f.name, "description": f.description, "type": f.type, "body": f.body}
        for f in find_durable(texts)
    ]}  # fmt: skip
    accepted, _rejected = validate_operations(data, allowed_scopes=("global", "project"))
    return accepted
