"""Applying a plan: render the operations, stage them beside the live directory, snapshot to the
history, check nothing moved under the run, record and swap in (`memd.history.snapshots`); any failure rolls back."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.dream.eligibility import advance
from jobs.dream.plan import DreamOp, Plan
from memd.clock import iso
from memd.history import store
from memd.job.context import Deferred, JobContext, RunResult
from memd.memory.names import child
from memd.tree import Place

if TYPE_CHECKING:
    from memd.memory.file import Memory


@dataclass(frozen=True)
class Rendered:
    """One operation with the text of the file it writes (None for a delete) and that text's metadata."""

    op: DreamOp
    text: str | None
    meta: dict[str, Any] = field(default_factory=dict)


def render_ops(ops: Sequence[DreamOp], by_file: dict[str, Memory], *, provider: str, now_iso: str) -> tuple[list[Rendered], list[tuple[DreamOp, str]]]:
    """Each op rendered as memd writes memories, and the ops that cannot be rendered (with why)."""

    out: list[Rendered] = []
    bad: list[tuple[DreamOp, str]] = []
    from memd.memory.file import render_memory  # noqa: PLC0415 - start-up
    for op in ops:
        if op.op == "delete":
            out.append(Rendered(op, None))
            continue
        base = by_file.get(op.result or "")
        meta = dict(base.metadata) if base is not None else {}
        meta.update({"source": "memd", "provider": provider, "updated": now_iso})
        if op.op == "merge":
            meta["merged_from"] = [by_file[f].name for f in op.files]
        try:
            out.append(Rendered(op, render_memory(op.name, op.description, op.type or "", op.body, meta), meta))
        except ValueError as exc:
            bad.append((op, str(exc)))
    return out, bad


def _write_fresh(path: Path, text: str) -> None:
    """A new inode at `path`, never a write through the hard link staging holds there.

    No fsync and no rename: nobody reads the staging directory, and `swap.seal`
    fsyncs every file written here in one batch before the journal names it.
    """

    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        view = memoryview(text.encode("utf-8"))
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def apply_to_staging(staging: Path, rendered: Sequence[Rendered], by_file: dict[str, Memory]) -> tuple[dict[str, list[dict[str, Any]]], list[Path]]:
    """Write the plan into the staging directory; returns what changed (for run.json) and the files written."""
    changes: dict[str, list[dict[str, Any]]] = {"added": [], "merged": [], "rewritten": [], "deleted": []}
    written: list[Path] = []
    for r in rendered:
        op = r.op
        if r.text is not None and op.result:
            path = child(staging, op.result)
            _write_fresh(path, r.text)
            written.append(path)
        for f in op.files:
            if f != op.result:
                child(staging, f).unlink(missing_ok=True)
        if op.op == "delete":
            changes["deleted"].append({"name": op.name, "file": op.files[0], "reason": op.reason})
        elif op.op == "merge":
            changes["merged"].append({
                "sources": [{"name": by_file[f].name, "file": f} for f in op.files],
                "result": {"name": op.name, "file": op.result}, "reason": op.reason,
            })  # fmt: skip
        elif op.op == "update":
            changes["rewritten"].append({"name": op.name, "file": op.result, "reason": op.reason})
        else:
            changes["added"].append({"name": op.name, "file": op.result, "reason": op.reason})
    return changes, written


def final_memories(memories: Sequence[Memory], rendered: Sequence[Rendered], directory: Path) -> list[Memory]:
    """The scope's memories after the plan, placed in `directory`, without rescanning or reparsing:
    unchanged ones as scanned (their files are hard links, so mtimes hold), plus what was
    rendered, as `parse_memory` would read it back (mtime 0 until `_stamp` reads the file)."""

    gone: set[str] = set()
    from memd.memory.file import Memory  # noqa: PLC0415 - start-up
    new: dict[str, Memory] = {}
    scope, key = memories[0].scope, memories[0].project_key
    for r in rendered:
        gone.update(r.op.files)
        if r.text is not None and r.op.result:
            gone.add(r.op.result)
            extra = {k: v for k, v in r.meta.items() if k != "type"}
            new[r.op.result] = Memory(
                directory / r.op.result, " ".join(r.op.name.split()), " ".join(r.op.description.split()),
                (r.op.type or "").strip().lower(), r.op.body.strip("\r\n").rstrip(), 0.0,
                len(r.text.encode("utf-8")), scope, key, extra,
            )  # fmt: skip
    here = str(directory)  # compared as text: a Path's `parent` is a new Path a memory
    keep = [m if os.path.dirname(m.path) == here else replace(m, path=directory / m.path.name)
            for m in memories if m.path.name not in gone]  # fmt: skip
    return keep + list(new.values())


def _stamp(memories: list[Memory]) -> list[Memory]:
    """Fill in mtime and size of the files this run wrote, as a scan would see them."""
    out = []
    for m in memories:
        if m.mtime == 0.0:
            try:
                st = m.path.stat()
            except OSError:
                continue
            m = replace(m, mtime=st.st_mtime, size=st.st_size)
        out.append(m)
    return out


def refresh_known(ctx: JobContext, ref: Place, memories: list[Memory], staged_index: bytes | None = None) -> None:
    """The views `indexer.refresh_dir` keeps (MEMORY.md, the drawer render, search rows),
    from the memories this run already knows instead of a rescan.

    Why not `memwrite.refresh`: it parses every file's YAML again, about half a
    second for 1,000 memories, which alone is a quarter of the run's budget; the
    run knows the new directory exactly (it just built it). The renders and the
    search sync are the same public functions `refresh_dir` uses. `staged_index` is the
    MEMORY.md the staging got from these memories: while the live file still holds exactly
    it, rendering them over it gives it again (a render is its own fixpoint), so it is not
    rendered twice; anything else (an agent's write since the swap, a held rewrite) goes
    through `write_index` as before.
    """

    s = ctx.settings
    directory = ref.memory_dir(ctx.home)
    from memd.index.refresh import agent_hold, write_if_changed, write_index  # noqa: PLC0415 - start-up
    from memd.index.render import render_drawer  # noqa: PLC0415 - start-up
    if s.memory.index_consolidation.enabled and (staged_index is None or _live_bytes(directory / "MEMORY.md") != staged_index):
        hold = agent_hold(ctx.home, s, ref, ctx.now()) if ctx.hold_index is not None else None
        done = write_index(directory / "MEMORY.md", memories, hold=hold)  # lines memd did not write are kept (§14)
        ctx.index_held(ref, done.held)  # the daemon: MEMORY.md once the project's agent is quiet
    if ref.kind == "global" and s.memory.global_.enabled:
        drawer = render_drawer(memories, max_bytes=int(s.memory.global_.max_bytes), today=ctx.now().date(), tz=UTC)
        write_if_changed(ctx.home.drawer_render, drawer.text)
    from memd.index.writer import SearchIndex  # noqa: PLC0415 - start-up
    with SearchIndex.for_home(ctx.home) as db:
        db.sync({(ref.kind, ref.key): memories})


def _live_bytes(path: Path) -> bytes | None:
    """A regular file's bytes (never through a link, never a FIFO), None when there is none to read."""
    from memd.fsutil import read_regular  # noqa: PLC0415 - start-up
    try:
        return read_regular(path, follow=False)
    except OSError:
        return None


def _counts(changes: dict[str, list[Any]]) -> dict[str, int]:
    return {k: len(v) for k, v in changes.items()}


class Snapshot:
    """The history snapshot, copied in a thread while the model thinks.

    Why: the copy is I/O and the model call a network wait, so overlapping them
    takes the copy off the run's critical path. Not beside the YAML scan or the
    offline plan: CPU-bound Python in one thread and many short syscalls in the
    other convoy on the GIL and slow both. It stays consistent: the directory's
    signature is taken by the scan (each entry's stat, before its read) and checked again just before the swap,
    so a snapshot of a directory that changed meanwhile is never used. A run
    that ends without a change discards it (it has no run.json yet, so
    recovery would too). Never started, `wait` takes it in the caller's thread.

    The copy runs under no memory lock (only the dream lock), so a recovery in
    another process (a daemon starting beside `memd run-now dream`) may sweep
    it as an interrupted snapshot. `wait(live)`, called under the scope's lock
    once the directory is known unchanged, checks the copy against `live` and
    takes it again, there and then, if it is not whole.
    """

    def __init__(self, home: Any, ref: Place, run_id: str) -> None:
        self.home, self.ref, self.run_id = home, ref, run_id
        self.known: dict[str, tuple[int, int, int, int, bytes]] = {}  # what the scan read (memd.history.pack.Known)
        self.sums: dict[str, str] = {}  # the sha256 of every file the pack holds (for run.json)
        # The lstat of every entry taken under the scope's lock by the check that the directory is as
        # planned (`treecopy.signature`): a copy made in the run's thread right after it packs from
        # these instead of a stat pass of its own (never the background copy, which starts before).
        self.checked: dict[str, os.stat_result] = {}
        self.entry: Path | None = None
        self.error: BaseException | None = None
        self.kept = False
        self._thread: Any = None
        self._copied = False

    def start(self) -> None:
        """Copy in a background thread (from now until `wait`)."""

        if self._thread is None and not self._copied:
            import threading  # noqa: PLC0415 - start-up
            self._thread = threading.Thread(target=self._copy, name=f"dream-snapshot-{self.run_id}", daemon=True)
            self._thread.start()

    def _copy(self, stats: dict[str, os.stat_result] | None = None) -> None:
        self._copied = True
        try:
            from memd.history import snapshots as swap  # noqa: PLC0415 - start-up
            self.sums = {}
            self.entry = swap.snapshot(self.home, self.ref, self.run_id, self.known, self.sums, stats)
        except BaseException as exc:  # re-raised in the run's thread by wait()
            self.error = exc

    def settle(self) -> None:
        """Let the copy finish (or fail) before anyone cleans up around it."""
        if self._thread is not None:
            self._thread.join()

    def wait(self, live: Path | None = None) -> Path:
        """The snapshot's history entry, copied now if no thread was started; with `live`, taken
        again if the copy failed or no longer matches `live` (see the class docstring)."""

        self.settle()
        from memd.history import kept  # noqa: PLC0415 - start-up
        if not self._copied:
            self._copy(self.checked or None)
        elif live is not None and (self.error is not None or self.entry is None
                                   or kept.listing(self.entry) != kept.walk_listing(live)):  # fmt: skip
            import shutil  # noqa: PLC0415 - start-up
            shutil.rmtree(store.history_root(self.home, self.ref) / self.run_id, ignore_errors=True)
            self.entry, self.error = None, None
            self._copy()
        if self.error is not None:
            raise self.error
        assert self.entry is not None
        return self.entry

    def discard(self) -> None:
        self.settle()
        if not self.kept:
            import shutil  # noqa: PLC0415 - start-up
            shutil.rmtree(store.history_root(self.home, self.ref) / self.run_id, ignore_errors=True)


def _propose(ctx: JobContext, target: Place, ref: Place, rendered: Sequence[Rendered],
             by_file: dict[str, Memory], provider: str, details: dict[str, Any]) -> RunResult:  # fmt: skip
    """Review mode (`memory.review`): the whole change waits as one proposal; nothing is written.
    The cursor moves, so the same plan is not proposed again each hour (a rerun with the same
    result reuses the proposal)."""

    files: dict[str, str | None] = {}
    for r in rendered:
        if r.text is not None and r.op.result:
            files[r.op.result] = r.text
        files.update({f: None for f in r.op.files if f != r.op.result})
    sources = [s for f in sorted({f for r in rendered for f in r.op.files}) if f in by_file
               for s in (by_file[f].metadata.get("sources") or []) if isinstance(s, dict)]  # fmt: skip
    summary = ", ".join(f"{r.op.op} {r.op.name}" for r in rendered)[:300]
    from memd.write import proposals  # noqa: PLC0415 - start-up
    p = proposals.propose_directory_change(ctx, ref, files, job="dream", reason=f"dream: {summary}",
                                           provider=provider, details=dict(details), sources=sources or None)  # fmt: skip
    advance(ctx, target, None)
    if p is None:
        return RunResult("ok", "nothing to change", details)
    return RunResult("ok", f"review: proposal {p.id} waits", {**details, "proposal": p.id})


def apply(ctx: JobContext, target: Place, ref: Place, memories: list[Memory], plan: Plan, sig0: dict[str, Any],
          snap: Snapshot, provider: str, force: bool, details: dict[str, Any]) -> RunResult:  # fmt: skip
    now_iso = iso(ctx.now())
    by_file = {m.path.name: m for m in memories}
    rendered, bad = render_ops(plan.ops, by_file, provider=provider, now_iso=now_iso)
    for op, why in bad:
        ctx.log.warning("operation.rejected", memory=op.name, reason=why)
    touched = {(ref.kind, ref.key)}
    if not rendered:
        from memd.write import apply as memwrite  # noqa: PLC0415 - start-up
        memwrite.refresh(ctx, touched)  # type: ignore[arg-type]
        advance(ctx, target, None)
        return RunResult("ok", "nothing to change", details)

    from memd.write import proposals  # noqa: PLC0415 - start-up
    if proposals.review_on(ctx.settings):
        return _propose(ctx, target, ref, rendered, by_file, provider, details)
    run_id = snap.run_id
    from memd.history import treecopy  # noqa: PLC0415 - start-up
    try:
        changes, final, staged_index = _commit(ctx, ref, memories, rendered, by_file, sig0, snap, provider, force, plan)
    except treecopy.SpecialFile as exc:
        return RunResult("failed", str(exc), details)
    refresh_known(ctx, ref, _stamp(final), staged_index)
    advance(ctx, target, run_id)
    from memd.history import runs as history  # noqa: PLC0415 - start-up
    history.prune(ctx.home, ref, int(ctx.settings.memd.history_keep))
    counts = _counts(changes)
    ctx.log.info("dream.applied", scope=str(ref), run=run_id, **counts)
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no change"
    return RunResult("ok", f"run {run_id}: {summary}", {**details, **counts, "run": run_id})


def _commit(ctx: JobContext, ref: Place, memories: list[Memory], rendered: list[Rendered],
            by_file: dict[str, Memory], sig0: dict[str, Any], snap: Snapshot, provider: str, force: bool,
            plan: Plan) -> tuple[dict[str, list[dict[str, Any]]], list[Memory], bytes | None]:  # fmt: skip
    """Snapshot (done already if the model call hid it), stage, check nothing moved under us,
    record, swap. Any failure rolls back. Returns the changes, the memories after, and the
    MEMORY.md the staging got (None: none rendered, or its rewrite held for an agent at work)."""

    directory = ref.memory_dir(ctx.home)
    run_id = snap.run_id
    from memd.history import snapshots as swap  # noqa: PLC0415 - start-up
    try:
        entry = snap.wait(directory)
        staged = swap.stage(ctx.home, ref, run_id, source=directory, link=True)
        staging = staged.path
        changes, written = apply_to_staging(staging, rendered, by_file)
        staged.copied.files.extend(written)
        final = final_memories(memories, rendered, directory)
        staged_index = None
        if ctx.settings.memory.index_consolidation.enabled:
            from memd.index.refresh import agent_hold, write_index  # noqa: PLC0415 - start-up
            # The daemon's dream under an agent at work keeps the live MEMORY.md as it is (memd.index.hold):
            # `refresh_known` after the swap holds it too and has the index job write it once the agent is quiet.
            hold = agent_hold(ctx.home, ctx.settings, ref, ctx.now()) if ctx.hold_index is not None else None
            done = write_index(staging / "MEMORY.md", final, hold=hold)  # the snapshot keeps the old one; foreign lines stay (§14)
            if not done.held:
                staged_index = done.render.text.encode("utf-8", "surrogateescape")
        swap.seal(staged)
        from memd.history import treecopy  # noqa: PLC0415 - start-up
        if treecopy.signature(directory) != sig0:
            raise Deferred("the memory directory changed during the run (a hand edit?); the dream is retried later")
        info = {
            "run": run_id, "scope": str(ref), "kind": "dream", "time": iso(ctx.now()), "provider": provider,
            "model": plan.model, "forced": force, "memories_before": len(memories), "memories_after": len(final),
            "changes": changes, "rejected": [{"index": i, "reason": r} for i, r in plan.rejected],
            "input_tokens": plan.input_tokens,
        }  # fmt: skip
        store.write_run_info(entry, info, snap.sums)
        snap.kept = True
        swap.swap_in(ctx.home, ref, run_id, staging)
        from memd.git.commits import after_run  # noqa: PLC0415 - start-up: git only when a write lands
        after_run(ctx.home, ref, info, ctx.settings)  # the swapped-in directory as one commit when memd.git is on
    except BaseException:
        snap.settle()
        swap.recover_scope(ctx.home, ref, ctx.log)
        raise
    return changes, final, staged_index
