"""Applying validated memory operations to memory directories: the write path jobs share.

Callers hold the scopes' locks. Each file is replaced atomically; an operation
that would overwrite a file memd cannot parse, or a memory whose current text the
model was not shown (a hand edit it never saw), is refused and logged, and the
rest still apply. Every change goes into the history (`memd.changes`), one run
per call, so `memd undo` can take it back. The indexes of touched directories
are refreshed afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memd.clock import iso
from memd.jobctx import JobContext
from memd.tree import Place
from memd.memories import (
    Memory,
    delete_memory,
    memory_path,
    render_memory,
    scan_dir,
    write_memory,
)


@dataclass
class Applied:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)  # history run ids (one per scope changed)

    def counts(self) -> dict[str, int]:
        return {"added": len(self.added), "updated": len(self.updated), "deleted": len(self.deleted),
                "unchanged": len(self.unchanged), "refused": len(self.refused)}  # fmt: skip


def scope_dir(ctx: JobContext, scope: str, key: str) -> Path:
    return ctx.home.global_memory if scope == "global" else ctx.home.project_memory(key)


def _index(directory: Path, scope: str, key: str | None) -> tuple[dict[str, Memory], set[str]]:
    """Memories of a directory by lowercased name and by file stem, and the stems of unparseable files."""
    res = scan_dir(directory, scope, key)
    by: dict[str, Memory] = {}
    for m in res.memories:
        by.setdefault(m.name.lower(), m)
        by.setdefault(m.path.stem.lower(), m)
    bad = {Path(p.path).stem.lower() for p in res.problems}
    return by, bad


def apply(
    ctx: JobContext,
    key: str,
    ops: list[Any],
    *,
    provider: str,
    session_id: str,
    shown: set[str] | None = None,
    job: str = "extract",
    reason: str = "",
    sources: list[dict[str, Any]] | None = None,
) -> Applied:
    """Apply operations; `shown` lists the files whose current text the model saw (None: no check)."""
    from memd.changes import Recorder

    out = Applied()
    touched: set[tuple[str, str | None]] = set()
    cache: dict[str, tuple[dict[str, Memory], set[str]]] = {}
    recorders: dict[str, Recorder] = {}

    def recorder(scope: str) -> Recorder:
        if scope not in recorders:
            place = Place.memory(None if scope == "global" else key)
            run_id = next(iter(recorders.values())).run_id if recorders else ""
            recorders[scope] = Recorder(ctx.home, place, job, reason or f"{job} of session {session_id}", ctx.now(),
                                        run_id=run_id, extra={"session": session_id, "provider": provider})  # fmt: skip
        return recorders[scope]

    for op in ops:
        directory = scope_dir(ctx, op.scope, key)
        if op.scope == "project" and directory.is_symlink():
            # Like discovery (tree.list_memory_dirs): a linked project memory directory is not followed.
            out.refused.append((f"{op.scope}:{op.slug}", "the project's memory directory is a symlink; not followed"))
            continue
        pkey = None if op.scope == "global" else key
        if op.scope not in cache:
            cache[op.scope] = _index(directory, op.scope, pkey)
        by, bad = cache[op.scope]
        slug = op.slug  # validated: ASCII, no separators, confined to the directory
        existing = by.get(op.name.lower()) or by.get(slug.lower())
        label = f"{op.scope}:{slug}"
        if existing is None and slug.lower() in bad:
            out.refused.append((label, "a file of that name exists but cannot be parsed; left in place"))
            continue
        if existing is not None and provider == "offline" and op.op == "add":
            out.unchanged.append(label)  # the same statement again: never overwrite a (maybe hand-edited) file
            continue
        if existing is not None and shown is not None and str(existing.path) not in shown:
            out.refused.append((label, "the model was not shown this memory's current text"))
            continue
        if op.op == "delete":
            if existing is not None:
                recorder(op.scope).before(existing.path)
                if delete_memory(existing.path):
                    out.deleted.append(label)
                    touched.add((op.scope, pkey))
            continue
        meta = dict(existing.metadata) if existing is not None else {}
        meta.update({"source": "memd", "provider": provider, "session": session_id, "updated": iso(ctx.now())})
        if sources:
            meta["sources"] = merge_sources(meta.get("sources"), sources)
        text = render_memory(op.name, op.description, op.type, op.body, meta)
        path = existing.path if existing is not None else memory_path(directory, slug)
        if existing is not None and path.read_text(encoding="utf-8", errors="replace") == text:
            out.unchanged.append(label)
            continue
        recorder(op.scope).before(path)
        write_memory(path.parent, path.stem, text)
        (out.updated if existing is not None else out.added).append(label)
        touched.add((op.scope, pkey))
    for rec in recorders.values():
        info = rec.commit()
        if info is not None:
            out.runs.append(info["run"])
    for label, why in out.refused:
        ctx.log.warning("operation.refused", memory=label, reason=why)
    # Every directory an operation aimed at, changed or not: a rerun after a crash between the
    # file writes and the index rebuild finds the files already new and must still rebuild the index.
    touched |= {(scope, None if scope == "global" else key) for scope in cache}
    refresh(ctx, touched)
    return out


MAX_SOURCES = 20


def merge_sources(old: Any, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A memory's provenance (`metadata.sources`): earlier entries kept, new ones appended once,
    the newest `MAX_SOURCES` kept so a memory updated every day does not grow without bound."""
    out = [s for s in old if isinstance(s, dict)] if isinstance(old, list) else []
    for s in new:
        if s not in out:
            out.append(s)
    return out[-MAX_SOURCES:]


def refresh(ctx: JobContext, touched: set[tuple[str, str | None]]) -> None:
    """Rebuild MEMORY.md, the drawer render and search rows of the touched directories."""
    for scope, key in sorted(touched, key=str):
        refresh_scope(ctx, scope, key, scope_dir(ctx, scope, key or ""))


def refresh_scope(ctx: JobContext, scope: str, key: str | None, directory: Path) -> Any:
    """One directory's indexes as the settings want them (§6, §8): the one place that reads them."""
    from memd.indexer import refresh_dir

    s = ctx.settings
    return refresh_dir(
        ctx.home, scope, key, directory,
        max_bytes_drawer=int(s.get("memory.global.maxBytes")), today=ctx.now().date(),
        write_index=bool(s.get("memory.indexConsolidation.enabled")), write_drawer=bool(s.get("memory.global.enabled")),
    )  # fmt: skip

