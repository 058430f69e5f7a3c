"""What reaches the gate, and its answer (SPEC §3.1): pre-gate and gate (pure; pause is `memd.ledger.pause`).

A deterministic pre-gate spares the model call when the new span holds no user
text of substance; the gate is a small model answering one word, yes or no.
"""

from __future__ import annotations

import re

from memd.transcripts.spans import Piece, render

GATE_BUDGET_CHARS = 6_000
GATE_ASSISTANT_CHARS = 300
MIN_SUBSTANCE_CHARS = 12

GATE_SYSTEM = """You are the memory gate of a coding agent. You read the newest part of a conversation \
between a user and the agent and decide whether it holds durable information worth keeping in long-term memory.

Answer yes for: facts about the user or their long-term preferences; the user's corrections of, or explicit \
guidance on, the way of working; key decisions or constraints of the project that cannot be read from the code \
or the git history; pointers to outside resources (URLs, boards, tickets).
Answer no for: chit-chat; execution details of a one-off task; concrete code or command content; the agent's own \
analysis or summaries; temporary context.

Answer with exactly one word: yes or no."""


def human_texts(pieces: list[Piece]) -> list[tuple[str, str | None]]:
    return [(p.text, p.ts) for p in pieces if p.kind == "human"]


INTERRUPTED = "[Request interrupted by user"


def pre_gate(pieces: list[Piece]) -> tuple[bool, str]:
    """No model call when there is no user text of substance (tool output only, a word or two,
    or Claude Code's "[Request interrupted by user…]" markers, which the user never typed)."""
    texts = [t for t, _ in human_texts(pieces) if not t.lstrip().startswith(INTERRUPTED)]
    if not texts:
        return False, "no user text in the span (tool output only)"
    if max(_chars(t) for t in texts) < MIN_SUBSTANCE_CHARS or max(_words(t) for t in texts) < 3:
        return False, "no user text of substance"
    return True, ""


_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def _words(text: str) -> int:
    """Words of a text, Chinese and Japanese included (written without spaces: about two characters
    a word), so "以后提交信息请用中文写" is a statement of substance, not "a word or two" (issue 26)."""
    return len(_CJK.sub(" ", text).split()) + len(_CJK.findall(text)) // 2


def _chars(text: str) -> int:
    """Length, a CJK character counting two (it carries about as much as two Latin letters and more)."""
    t = text.strip()
    return len(t) + len(_CJK.findall(t))


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
