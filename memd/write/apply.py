"""Applying validated memory operations to memory directories: the one write path.

Every memd write comes through here: extraction runs, MCP writes, `memd
remember`/`edit`/`forget`, accepted review proposals. Callers hold the scopes'
locks. A write is planned first (`plan`: which file becomes which bytes, from
which base), then either done (`_commit`: before-images into the history, each
file replaced atomically, indexes refreshed) or, in review mode, kept as a
proposal (`memd.write.proposals`) that nothing applies until the user accepts it.

An operation that would overwrite a file memd cannot parse, a memory whose
current text the model was not shown (a hand edit it never saw), or a memory
directory that is read-only (`memd.memory.readonly`) is refused and logged, and the
rest still apply. Every change goes into the history (`memd.history.writes`), one run
per call, so `memd undo` can take it back. The indexes of touched directories
are refreshed afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memd.clock import iso
from memd.fsutil import atomic_write, ensure_private_dir
from memd.history.writes import Recorder, refresh_recorded
from memd.job.context import JobContext
from memd.memory import readonly
from memd.memory.change import Change, StaleChange, current_sha
from memd.memory.check import InvalidMemory as InvalidMemory  # re-exported: the write path's refusals
from memd.memory.check import check_names
from memd.memory.check import check_text as check_text
from memd.memory.classify import normalised
from memd.memory.file import Memory, delete_memory, render_memory
from memd.memory.names import InvalidName, child, fold_name, memory_path, slugify
from memd.memory.operations import log_rejections
from memd.memory.scan import scan_dir
from memd.tree import Place
from memd.write import proposals


@dataclass
class Applied:
    """What one application of memory operations did, scope by scope (or proposed, in review mode)."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)  # history run ids (one per scope changed)
    proposed: list[str] = field(default_factory=list)  # review mode: what the proposal would change
    proposal: str | None = None  # review mode: the proposal's id
    read_only: int = 0  # operations refused because their memory is read-only
    note: str = ""  # one line for the job's outcome when the write was diverted (review, read-only)

    def counts(self) -> dict[str, int]:
        out = {"added": len(self.added), "updated": len(self.updated), "deleted": len(self.deleted),
               "unchanged": len(self.unchanged), "refused": len(self.refused)}  # fmt: skip
        if self.proposed:
            out["proposed"] = len(self.proposed)
        if self.read_only:
            out["read_only"] = self.read_only
        return out










def scope_dir(ctx: JobContext, scope: str, key: str) -> Path:
    return ctx.home.global_memory if scope == "global" else ctx.home.project_memory(key)


def _index(directory: Path, scope: str, key: str | None) -> tuple[dict[str, Memory], set[str]]:
    """Memories of a directory by case-folded name and by file stem, and the stems of unparseable files
    (case-folded, as scan_dir's duplicate check and dream match names: `Straße` is `STRASSE`)."""
    res = scan_dir(directory, scope, key)
    by: dict[str, Memory] = {}
    for m in res.memories:
        by.setdefault(fold_name(m.name), m)
        by.setdefault(m.path.stem.casefold(), m)
    bad = {Path(p.path).stem.casefold() for p in res.problems}
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
    review: bool | None = None,
) -> Applied:
    """Apply operations; `shown` lists the files whose current text the model saw (None: no check).

    `review`: None follows `memory.review`; True keeps the write as a proposal (nothing reaches a
    memory directory); False writes now (the user's own commands: remember, forget).
    """
    out = Applied()
    changes, aimed = plan(ctx, key, ops, provider=provider, session_id=session_id, shown=shown, sources=sources,
                          out=out)  # fmt: skip
    why = reason or f"{job} of session {session_id}"
    if review is None:
        review = ctx.settings.memory.review
    if review:
        if changes:
            p = proposals.create(ctx, changes, job=job, reason=why, provider=provider, session_id=session_id,
                                 sources=sources, operations=ops)  # fmt: skip
            out.proposal = p.id
            out.proposed = [c.label for c in changes]
            out.note = f"review: proposal {p.id} waits ({len(changes)} change(s); `memd review show {p.id}`)"
        _log_refused(ctx, out)
        return out
    _commit(ctx, changes, job=job, reason=why, session_id=session_id, provider=provider, out=out)
    _log_refused(ctx, out)
    # Every directory an operation aimed at, changed or not: a rerun after a crash between the
    # file writes and the index rebuild finds the files already new and must still rebuild the index.
    refresh(ctx, aimed | {(c.scope, c.key) for c in changes})
    return out


def plan(
    ctx: JobContext,
    key: str,
    ops: Sequence[Any],
    *,
    provider: str,
    session_id: str,
    shown: set[str] | None = None,
    sources: list[dict[str, Any]] | None = None,
    out: Applied | None = None,
) -> tuple[list[Change], set[tuple[str, str | None]]]:
    """The changes `ops` make to the files as they are now (nothing written), and every
    (scope, key) an operation aimed at. Refusals and no-ops are noted in `out`."""

    out = out if out is not None else Applied()
    changes: list[Change] = []
    cache: dict[str, tuple[dict[str, Memory], set[str]]] = {}
    try:
        switches: readonly.Switches | None = readonly.load(ctx.home, ctx.settings)
        broken = ""
    except readonly.ReadOnlyError as exc:
        switches, broken = None, str(exc)
    for op in ops:
        directory = scope_dir(ctx, op.scope, key)
        pkey = None if op.scope == "global" else key
        label = f"{op.scope}:{op.slug}"  # slug validated: ASCII, no separators, confined to the directory
        locked = broken or (switches.reason(op.scope, pkey, session_id) if switches is not None else None)
        if locked:
            out.refused.append((label, f"read-only: {locked}"))
            out.read_only += 1
            out.note = f"read-only: {locked}"
            continue
        if link := ctx.home.memory_link(pkey):
            # Like discovery (tree.list_memory_dirs): a linked memory directory (or projects/) is not followed.
            out.refused.append((label, f"{link} is a symlink; memd never writes through one"))
            continue
        if op.scope == "global" and not ctx.settings.memory.global_.enabled:
            out.refused.append((label, "the drawer is off (memory.global.enabled is false)"))  # SPEC §18
            continue
        if op.scope not in cache:
            cache[op.scope] = _index(directory, op.scope, pkey)
        by, bad = cache[op.scope]
        if provider == "offline" and op.op == "add" and getattr(op, "statement", ""):  # offline extraction
            same = _same_statement(op, by)
            if same is not None:  # the same statement again: never overwrite a (maybe hand-edited) file
                out.unchanged.append(label)
                ctx.log.info("operation.duplicate", memory=f"{op.scope}:{same.name}", file=_rel(ctx, same.path),
                             statement_of=label)  # fmt: skip
                continue
            op = _free_name(op, by, bad)  # a different statement under a taken name gets a name of its own
            label = f"{op.scope}:{op.slug}"
        existing = by.get(fold_name(op.name)) or by.get(op.slug.casefold())
        if existing is None and op.slug.casefold() in bad:
            out.refused.append((label, "a file of that name exists but cannot be parsed; left in place"))
            continue
        if existing is not None and provider == "offline" and op.op == "add":
            out.unchanged.append(label)  # `memd remember` offline (it refuses a taken name itself): never overwrite
            continue
        if existing is not None and shown is not None and str(existing.path) not in shown:
            out.refused.append((label, "the model was not shown this memory's current text"))
            continue
        if op.op == "delete":
            if existing is not None:
                changes.append(Change(op.scope, pkey, existing.path.name, "delete", existing.name, None,
                                      current_sha(existing.path), label))  # fmt: skip
            continue
        meta = dict(existing.metadata) if existing is not None else {}
        stamp = {"source": "memd", "provider": provider, "session": session_id, "updated": iso(ctx.now())}
        if not session_id and "session" not in meta:
            del stamp["session"]  # the user's own command (`memd remember`): no session to name
        meta.update(stamp)
        own = getattr(op, "sources", None) or sources  # an offline op knows the turn it came from
        if own:
            meta["sources"] = merge_sources(meta.get("sources"), own)
        if getattr(op, "statement", ""):
            meta["statement"] = op.statement  # what a later "the same statement again" is decided on
        text = render_memory(op.name, op.description, op.type, op.body, meta)
        path = existing.path if existing is not None else memory_path(directory, op.slug)
        base = current_sha(path) if existing is not None else None
        if existing is not None and path.read_text(encoding="utf-8", errors="replace") == text:
            out.unchanged.append(label)
            continue
        changes.append(Change(op.scope, pkey, path.name, "update" if existing is not None else "add", op.name, text,
                              base, label))  # fmt: skip
        if existing is None:  # a later operation of the call sees this name taken and this statement stored
            planned = Memory(path, op.name, op.description, op.type or "", op.body, 0.0, 0, op.scope, metadata=meta)
            by.setdefault(fold_name(op.name), planned)
            by.setdefault(op.slug.casefold(), planned)
    return changes, {(scope, None if scope == "global" else key) for scope in cache}


def _same_statement(op: Any, by: dict[str, Memory]) -> Memory | None:
    """The memory an offline extraction's `add` states again, if any: one whose stored statement digest
    is the operation's, or (a memory written before digests were kept, or by hand) whose description
    reads the same once normalised. Never decided on the name: two facts may share their first words."""
    digest = op.statement
    want = normalised(op.description)
    for m in {id(m): m for m in by.values()}.values():
        stored = m.metadata.get("statement")
        if (digest and stored == digest) or (not stored and normalised(m.description) == want):
            return m  # a memory that keeps its digest is judged on it alone (its description may be cut short)
    return None


def _free_name(op: Any, by: dict[str, Memory], bad: set[str]) -> Any:
    """`op` under the first of its names (its own, then its longer `names`, then `<name>-2`, `-3`, …)
    that no memory and no unparseable file of the directory holds."""

    def free(name: str) -> str | None:
        try:
            slug = slugify(name)
        except InvalidName:
            return None
        taken = fold_name(name) in by or slug.casefold() in by or slug.casefold() in bad
        return None if taken else slug

    candidates = [op.name, *getattr(op, "names", ())]
    k = 2
    while True:
        for name in candidates:
            slug = free(name)
            if slug is not None:
                return op if name == op.name else replace(op, name=name, slug=slug)
        candidates, k = [f"{op.name}-{k}"], k + 1


def apply_changes(
    ctx: JobContext,
    changes: Sequence[Change],
    *,
    job: str,
    reason: str,
    session_id: str = "",
    provider: str = "",
    extra: dict[str, Any] | None = None,
) -> Applied:
    """Apply planned changes exactly (accepted proposals, `memd edit`), all or nothing.

    Each file must still hold its change's base (else StaleChange, nothing written), no
    target may be read-only (else ReadOnlyError), and every new text must be a valid memory
    whose name is unique in its directory (else InvalidMemory). Then: history, atomic
    writes, indexes. The texts are written exactly as given.
    The caller holds the scopes' locks.
    """

    switches = readonly.load(ctx.home, ctx.settings)
    stale: list[str] = []
    for c in changes:
        locked = switches.reason(c.scope, c.key, session_id or None)
        if locked:
            raise readonly.ReadOnlyError(f"read-only: {locked}")
        directory = c.place.memory_dir(ctx.home)
        if link := ctx.home.memory_link(c.key if c.scope == "project" else None):
            raise StaleChange(f"{link} is a symlink; memd never writes through one")
        path = child(directory, c.file)
        now = current_sha(path)
        if now != c.base:
            what = "exists now" if c.base is None else "is gone" if now is None else "was changed"
            stale.append(f"{_rel(ctx, path)} {what} since the change was planned")
    if stale:
        raise StaleChange("; ".join(stale))
    check_names(ctx.home, changes)
    out = Applied()
    _commit(ctx, changes, job=job, reason=reason, session_id=session_id, provider=provider, out=out, extra=extra)
    refresh(ctx, {(c.scope, c.key) for c in changes})
    return out


def _commit(ctx: JobContext, changes: Sequence[Change], *, job: str, reason: str, session_id: str, provider: str,
            out: Applied, extra: dict[str, Any] | None = None) -> None:  # fmt: skip
    """Before-images into the history, then each file replaced (or removed) atomically."""

    recorders: dict[Place, Recorder] = {}

    def recorder(place: Place) -> Recorder:
        if place not in recorders:
            run_id = next(iter(recorders.values())).run_id if recorders else ""
            info = {"session": session_id, "provider": provider, **(extra or {})}
            recorders[place] = Recorder(ctx.home, place, job, reason, ctx.now(), run_id=run_id, extra=info)
        return recorders[place]

    for c in changes:
        directory = c.place.memory_dir(ctx.home)
        path = child(directory, c.file)
        recorder(c.place).before(path)
        if c.text is None:
            if delete_memory(path):
                out.deleted.append(c.label)
            continue
        ensure_private_dir(directory)
        atomic_write(path, c.text)
        ctx.log.info("memory.written", path=str(path), bytes=len(c.text.encode("utf-8")))
        (out.added if c.base is None else out.updated).append(c.label)
    from memd.git.commits import after_run  # noqa: PLC0415 - start-up: git only when a write lands
    for place, rec in recorders.items():
        info = rec.commit()
        if info is not None:
            out.runs.append(info["run"])
            after_run(ctx.home, place, info, ctx.settings)  # one commit per scope's run when memd.git is on




def _rel(ctx: JobContext, path: Path) -> str:
    try:
        return str(path.relative_to(ctx.home.root))
    except ValueError:
        return str(path)


def _log_refused(ctx: JobContext, out: Applied) -> None:
    log_rejections(ctx.log, "operation.refused", out.refused, key="memory")  # many: one summary line


MAX_SOURCES = 20


def merge_sources(old: Any, new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A memory's provenance (`metadata.sources`): earlier entries kept, new ones appended once,
    the newest `MAX_SOURCES` kept so a memory updated every day does not grow without bound.

    An entry is `{"session": str, "uuids": [str], "offsets": [int], "ts": str}`: the session,
    the `uuid`s of the user records that led to the memory (Claude Code / deepcode), or for a
    transcript without uuids (MewCode) the byte offsets where those records' lines end, and
    the time of the newest of them. `memd why` reads them back (`memd.history.provenance`)."""
    out = [s for s in old if isinstance(s, dict)] if isinstance(old, list) else []
    for s in new:
        if s not in out:
            out.append(s)
    return out[-MAX_SOURCES:]


def refresh(ctx: JobContext, touched: set[tuple[str, str | None]]) -> None:
    """Rebuild MEMORY.md, the drawer render and search rows of the touched directories."""
    for scope, key in sorted(touched, key=str):
        refresh_scope(ctx, scope, key)


def refresh_scope(ctx: JobContext, scope: str, key: str | None) -> Any:
    """One directory's indexes, through the one refresh entry (`memd.index.refresh.refresh_place`);
    a MEMORY.md holding lines memd did not write is rewritten as a history run. For a MewCode home,
    MewCode's `memories.md` of the scope too (`memd.write.mewcode`)."""

    from memd.write.mewcode import own_memories, update_views  # noqa: PLC0415 - start-up

    place = Place.memory(None if scope == "global" else key)
    also = own_memories(ctx, key) if key is not None else []  # the project's own `.mewcode/memory/`, for recall
    result = refresh_recorded(ctx.home, ctx.settings, place, ctx.now(), also=also, hold=ctx.hold_index is not None)
    ctx.index_held(place, result.index_held)  # the daemon: MEMORY.md once the project's agent is quiet
    update_views(ctx, place)  # a MewCode home: its `memories.md` views (a no-op elsewhere)
    return result
