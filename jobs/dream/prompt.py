"""What the model is asked: the system prompt, the user prompt and its budgets, session notes. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING

from jobs.dream.eligibility import INDEX_MAX_BYTES, INDEX_MAX_LINES
from jobs.dream.plan import mem_date

if TYPE_CHECKING:
    from memd.memory.file import Memory

MAX_OUTPUT_TOKENS = 16_000
# What the model is shown: every memory in full up to a budget; past it, a
# memory's head only (and it cannot be changed by this run). ~140k tokens of
# memories + index + sessions + 16k of answer stay inside a 200k-token context.
BODY_MAX_CHARS = 6_000
MEMORIES_BUDGET_CHARS = 560_000
INDEX_MAX_CHARS = 12_000
SESSIONS_MAX = 30
SESSION_NOTE_CHARS = 700
FIRST_REQUEST_SCAN_BYTES = 512 * 1024

DREAM_SYSTEM = """You consolidate the long-term memory of a coding agent (a "dream"). Each memory is a Markdown \
file with a name, a one-line description, a type and a body. Types: user (who the user is, their preferences), \
feedback (the user's guidance on the way of working, with why), project (decisions and constraints of the \
project not readable from the code), reference (pointers to outside resources).

You get every memory of one scope with its file date, the scope's MEMORY.md index, and what the sessions since \
the last consolidation were about. Make the memory smaller and more accurate without losing durable information:
- merge memories that say the same thing, or are parts of one topic, into one more general memory;
- resolve contradictions: the newer word wins (file dates, sessions);
- rewrite a memory to turn relative dates ("today", "last week", "next Monday") into absolute dates, using that \
memory's file date, or to make it tighter and clearer;
- delete what is stale or superseded, and say why;
- keep descriptions to one line; bodies say what, why and how to apply.
Memories marked "edited by hand" hold the user's own words: keep them unless they are clearly superseded, and \
give a reason for any change to one. Never invent facts, never store secrets, never delete most memories. If \
nothing needs to change, answer with no operations.

Answer only with JSON:
{"operations": [
 {"op": "merge", "sources": ["<existing name>", "<existing name>"], "name": "...", "description": "...", \
"type": "user|feedback|project|reference", "body": "...", "reason": "..."},
 {"op": "update", "name": "<existing name>", "description": "...", "type": "...", "body": "...", "reason": "..."},
 {"op": "delete", "name": "<existing name>", "reason": "..."}
]}
A merge result may keep the name of one of its sources."""


@dataclass(frozen=True)
class SessionNote:
    """What one session since the last consolidation was about."""

    when: str
    key: str
    title: str
    text: str


def build_prompt(
    label: str,
    today: date,
    index_text: str | None,
    memories: Sequence[Memory],
    protected: set[str],
    notes: Sequence[SessionNote],
) -> tuple[str, set[str]]:
    """The user prompt, and the files whose full text it does not show (they may not be changed)."""
    parts = [f"Today is {today.isoformat()}. The scope to consolidate: {label}."]
    idx = (index_text or "(no MEMORY.md)").strip()
    if len(idx) > INDEX_MAX_CHARS:
        idx = idx[:INDEX_MAX_CHARS] + "\n[… index cut …]"
    parts.append(f"## MEMORY.md\n\n{idx}")
    parts.append(size_goal(index_text))
    unshown: set[str] = set()
    blocks: list[str] = []
    left = MEMORIES_BUDGET_CHARS
    for m in sorted(memories, key=lambda m: (m.type, m.name.casefold())):
        flags = " · edited by hand since the last consolidation" if m.path.name in protected else ""
        head = f"### {m.name}\nfile: {m.path.name} · type: {m.type} · dated {mem_date(m).isoformat()}{flags}\n" \
               f"description: {m.description}"  # fmt: skip
        body = m.body.strip()
        if len(body) > BODY_MAX_CHARS or left < len(head) + len(body):
            unshown.add(m.path.name)
            shown = body[: max(0, min(BODY_MAX_CHARS, left - len(head)))]
            body = f"{shown}\n[… body not shown in full: this memory cannot be changed in this run …]"
        block = f"{head}\n\n{body}"
        left -= len(block)
        blocks.append(block)
    parts.append(f"## Memories ({len(memories)})\n\n" + "\n\n".join(blocks))
    if notes:
        lines = [f"- {n.when} · {n.title}" + (f" ({n.key})" if n.key else "") + (f"\n  {n.text}" if n.text else "")
                 for n in notes]  # fmt: skip
        parts.append(f"## Sessions since the last consolidation ({len(notes)}, newest first)\n\n" + "\n".join(lines))
    else:
        parts.append("## Sessions since the last consolidation\n\n(none recorded)")
    return "\n\n".join(parts), unshown


def size_goal(index_text: str | None) -> str:
    """The size to reach, named in every dream prompt (issue 26): MEMORY.md is loaded whole into
    every session and agents stop reading after about 200 lines / 25 KB; an index past that is
    what made the dream due, so the goal is said with the current size."""
    text = index_text or ""
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    size = len(text.encode("utf-8"))
    now = f"{lines} lines, {size / 1000:.1f} KB"
    goal = f"at most {INDEX_MAX_LINES} lines and {INDEX_MAX_BYTES / 1000:g} KB"
    if lines > INDEX_MAX_LINES or size > INDEX_MAX_BYTES:
        return (f"## Size to reach\n\nMEMORY.md is over its budget ({now}); bring it to {goal} (one index line per "
                "memory): merge overlapping memories and delete stale ones until it fits, losing no durable fact.")
    return f"## Size to reach\n\nMEMORY.md is {now}; keep it within {goal} (one index line per memory)."


def one_line(text: str, limit: int) -> str:
    s = " ".join(text.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def summary_note(text: str) -> tuple[str, str]:
    """(title, excerpt) of a summary.md: its `# ` title and the start of its sections."""
    title = ""
    rest: list[str] = []
    for line in text.splitlines():
        if not title and line.startswith("# "):
            title = line[2:].strip()
        elif line.startswith("<!--"):
            continue
        else:
            rest.append(line)
    return one_line(title or "(untitled)", 120), one_line(" ".join(rest), SESSION_NOTE_CHARS)
