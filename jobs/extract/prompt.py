"""What the extraction call is sent: the span, both indexes and the bodies of related memories."""

from __future__ import annotations

from memd.jobctx import JobContext
from memd.memories import Memory, scan_dir

SPAN_BUDGET_CHARS = 24_000
RELATED_BODIES = 8

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


def prompt_context(ctx: JobContext, key: str, texts: list[tuple[str, str | None]], limit: int) -> tuple[str, set[str]]:
    """Both indexes and the bodies of the memories most related to what the user said."""
    parts = []
    for title, directory in (("Global drawer index", ctx.home.global_memory), ("Project memory index", ctx.home.project_memory(key))):
        idx = directory / "MEMORY.md"
        body = idx.read_text(encoding="utf-8", errors="replace") if idx.is_file() and not idx.is_symlink() else "(empty)"
        parts.append(f"## {title}\n\n{body.strip()[:12000]}")
    shown: set[str] = set()
    related = _related(ctx, key, " ".join(t for t, _ in texts), limit)
    if related:
        parts.append("## Current text of memories that may be affected")
        for m in related:
            shown.add(str(m.path))
            parts.append(f"### [{m.scope}] {m.name} ({m.type}) — {m.description}\n\n{m.body.strip()[:4000]}")
    today = ctx.now().date().isoformat()
    dates = sorted({ts[:10] for _, ts in texts if ts})
    parts.append(f"Today is {today}." + (f" The conversation is from {', '.join(dates)}." if dates else ""))
    return "\n\n".join(parts), shown


def _related(ctx: JobContext, key: str, text: str, limit: int) -> list[Memory]:
    from memd.search import open_readonly, query_index

    words = [w for w in text.split() if len(w) > 3][:40]
    if not words or not ctx.home.search_db.exists():
        return []
    conn = open_readonly(ctx.home.search_db)
    try:
        hits = query_index(conn, " OR ".join(f'"{w.strip(chr(34))}"' for w in words), project_key=key, limit=limit)
    finally:
        conn.close()
    out: list[Memory] = []
    for h in hits:
        path = ctx.home.root / h.file
        scope = h.scope
        res = scan_dir(path.parent, scope, h.project_key)
        out.extend(m for m in res.memories if m.path == path)
    return out
