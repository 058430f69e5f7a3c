"""What the extraction call is sent: the span, both indexes and the bodies of related memories."""

from __future__ import annotations

from typing import Any

from jobs.extract.related import rank
from memd.job.context import JobContext
from memd.memory.classify import is_chinese
from memd.memory.file import Memory
from memd.memory.scan import scan_dir

SPAN_BUDGET_CHARS = 24_000
RELATED_BODIES = 8
RETRY_BODIES = 8  # at most this many memories the model named unseen are shown in the second call

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
apply, with the labels **Why:** and **How to apply:**; the body adds to the description and never repeats it. \
Write each memory in the user's language: the description, the body and its labels in the language of the \
statement it comes from (a memory of a Chinese statement has a Chinese description and body, labelled **为什么：** \
and **怎么用：**); a name stays short kebab-case. Turn relative dates ("tomorrow", "next week") into absolute ones \
using the dates given. Never store secrets, code listings or one-off task details. If nothing is worth keeping, \
return no operations.

Answer only with JSON: {"operations": [{"op": "add"|"update"|"delete", "scope": "global"|"project", \
"name": "...", "description": "...", "type": "user"|"feedback"|"project"|"reference", "body": "...", \
"reason": "..."}]}"""


def prompt_context(ctx: JobContext, key: str, texts: list[tuple[str, str | None]], limit: int,
                   extra: list[Memory] | None = None) -> tuple[str, set[str]]:  # fmt: skip
    """Both indexes and the bodies of the memories most related to what the user said (plus `extra`,
    memories the model named without having been shown them); the paths whose text it shows."""
    parts = []
    for title, directory in (("Global drawer index", ctx.home.global_memory), ("Project memory index", ctx.home.project_memory(key))):
        idx = directory / "MEMORY.md"
        body = idx.read_text(encoding="utf-8", errors="replace") if idx.is_file() and not idx.is_symlink() else "(empty)"
        parts.append(f"## {title}\n\n{body.strip()[:12000]}")
    shown: set[str] = set()
    related = _related(ctx, key, " ".join(t for t, _ in texts), limit)
    for m in extra or []:
        if all(m.path != r.path for r in related):
            related.append(m)
    if related:
        parts.append("## Current text of memories that may be affected")
        for m in related:
            shown.add(str(m.path))
            parts.append(f"### [{m.scope}] {m.name} ({m.type}) — {m.description}\n\n{m.body.strip()[:4000]}")
    today = ctx.now().date().isoformat()
    dates = sorted({ts[:10] for _, ts in texts if ts})
    parts.append(f"Today is {today}." + (f" The conversation is from {', '.join(dates)}." if dates else "")
                 + language_note(texts))  # fmt: skip
    return "\n\n".join(parts), shown


def language_note(texts: list[tuple[str, str | None]]) -> str:
    """A reminder of the user's language when they wrote in Chinese (the system prompt states the rule for
    every language; this names the one of this conversation, found by the offline rules' own test)."""
    zh = [t for t, _ in texts if is_chinese(t)]
    if not zh:
        return ""
    some = "Most" if len(zh) * 2 > len(texts) else "Some"
    return (f" {some} of the user's statements are in Chinese: write the memories that come from them in Chinese "
            "(description and body, labels **为什么：** and **怎么用：**).")


def unseen_targets(ctx: JobContext, key: str, ops: list[Any], shown: set[str],
                   limit: int = RETRY_BODIES) -> list[Memory]:  # fmt: skip
    """Existing memories the operations would change although the model was not shown their text
    (matched as the write path matches them: by name, then by file stem, case-insensitively), the
    first `limit` of them. An `add` under an existing name counts: the write path treats it as a
    change of that memory, and refuses it unseen."""
    out: list[Memory] = []
    cache: dict[str, dict[str, Memory]] = {}
    for op in ops:
        if op.scope not in cache:
            directory = ctx.home.global_memory if op.scope == "global" else ctx.home.project_memory(key)
            by: dict[str, Memory] = {}
            if directory.is_dir() and not (op.scope == "project" and directory.is_symlink()):
                for m in scan_dir(directory, op.scope, None if op.scope == "global" else key).memories:
                    by.setdefault(m.name.lower(), m)
                    by.setdefault(m.path.stem.lower(), m)
            cache[op.scope] = by
        hit = cache[op.scope].get(op.name.lower()) or cache[op.scope].get(op.slug.lower())
        if hit is not None and str(hit.path) not in shown and all(hit.path != o.path for o in out):
            out.append(hit)
            if len(out) >= limit:
                break
    return out


def retry_note(answer: str, unseen: list[Memory]) -> str:
    """What the second extraction call adds: the first answer and which memories it named unseen."""
    names = ", ".join(f"[{m.scope}] {m.name}" for m in unseen)
    return (f"## Your previous answer\n\n{answer.strip()[:8000]}\n\nIt changes memories whose current text you had "
            f"not been shown: {names}. Their current text is now above, under \"Current text of memories that may be "
            "affected\". Answer again with the complete list of operations for this conversation (the previous "
            "answer is discarded); keep what in those memories is still true.")  # fmt: skip


def _related(ctx: JobContext, key: str, text: str, limit: int) -> list[Memory]:
    """The memories of the project and the drawer most related to what the user said (`related.rank`),
    read from their files."""

    memories: list[Memory] = []
    for scope, directory, pkey in (("global", ctx.home.global_memory, None), ("project", ctx.home.project_memory(key), key)):
        if directory.is_dir() and not (scope == "project" and directory.is_symlink()):
            memories.extend(scan_dir(directory, scope, pkey).memories)
    return rank(memories, text, limit)
