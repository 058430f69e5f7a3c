"""Deciding on review proposals (`memd.write.proposals` stores them): accept, reject, edit, rebase.

Accepting goes through the write path (`memwrite.apply_changes`) under the scopes'
locks: every proposed file is validated, each file must still hold the proposal's
base (its hash when proposed), then atomic writes, one history run, indexes. A
refusal (a stale base, an invalid file, a read-only scope) keeps the proposal and
notes why in its `check`; `rebase` moves a proposal onto the files as they are
now, with a fresh diff for the user to review before accepting again.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memd.clock import iso
from memd.fsutil import atomic_write, fsync_dir
from memd.locks import acquire
from memd.memory import readonly
from memd.memory.change import StaleChange, sha
from memd.memory.names import child
from memd.tree import Home
from memd.write import apply as memwrite
from memd.write.proposals import ID_RE, INFO, Proposal, ProposalError, ProposalRefused, diff_text, load, root

if TYPE_CHECKING:
    from memd.job.context import JobContext

__all__ = ["ProposalError", "ProposalRefused", "accept", "rebase", "reject", "remove", "replace_proposed"]


def _note(p: Proposal, now: datetime, why: str) -> None:
    p.info["check"] = {"time": iso(now), "reason": why}
    atomic_write(p.path / INFO, json.dumps(p.info, ensure_ascii=False, indent=2, default=str) + "\n")


def remove(home: Home, p: Proposal) -> None:
    """Gone at once for every reader (one rename), then deleted."""
    gone = root(home) / f".gone-{p.id}"
    try:
        os.rename(p.path, gone)
    except FileNotFoundError:
        return  # removed meanwhile (a reject racing an accept): gone either way
    fsync_dir(root(home))
    shutil.rmtree(gone, ignore_errors=True)


def accept(ctx: JobContext, pid: str, *, lock_timeout: float,
           on_wait: Callable[[Any], None] | None = None) -> Any:  # fmt: skip
    """Apply a proposal through the write path, under its scopes' locks; then it is gone.

    Refused (ProposalRefused, the proposal kept with the reason noted) when a file no longer
    holds the proposal's base, a proposed file does not validate, or a scope is read-only.
    """

    p = load(ctx.home, pid)
    try:
        planned = p.planned()
    except (ValueError, ProposalRefused) as exc:
        raise ProposalRefused(f"proposal {pid} not applied: {exc}") from None
    places = sorted({c.place for c in planned}, key=lambda pl: pl.sort_key)
    job = str(p.info.get("job") or "?")
    with acquire(ctx.home, places, timeout=lock_timeout, on_wait=on_wait):
        if not (p.path / INFO).exists():
            raise ProposalError(f"proposal {pid} is gone (accepted or rejected meanwhile)")
        try:
            applied = memwrite.apply_changes(
                ctx, planned, job="review", reason=f"accepted proposal {pid} ({job}: {p.info.get('reason') or ''})",
                session_id=str(p.info.get("session") or ""), provider=str(p.info.get("provider") or ""),
                extra={"proposal": pid, "proposed_by": job},
            )  # fmt: skip
        except (StaleChange, memwrite.InvalidMemory, readonly.ReadOnlyError, ValueError) as exc:
            why = str(exc)
            _note(p, ctx.now(), why)
            ctx.log.warning("proposal.refused", proposal=pid, reason=why)
            hint = "" if isinstance(exc, readonly.ReadOnlyError) else (
                f"; it is kept: `memd review rebase {pid}` to review it against the files as they are now, "
                f"or `memd review reject {pid}`")  # fmt: skip
            raise ProposalRefused(f"proposal {pid} not applied: {why}{hint}") from None
        remove(ctx.home, p)
    ctx.log.info("proposal.accepted", proposal=pid, runs=applied.runs, **applied.counts())
    return applied


def reject(ctx: JobContext, pid: str) -> Proposal:
    """Drop a proposal; a damaged one (its proposal.json unreadable, listed by `memd review`) too."""
    try:
        p = load(ctx.home, pid)
    except ProposalError:
        path = root(ctx.home) / pid
        if not (ID_RE.match(pid) and path.is_dir() and not path.is_symlink()):
            raise
        p = Proposal(pid, path, {"damaged": True})
    remove(ctx.home, p)
    ctx.log.info("proposal.rejected", proposal=pid, job=p.info.get("job"))
    return p


def replace_proposed(ctx: JobContext, pid: str, n: int, text: str) -> Proposal:
    """A user's edit of one proposed file: validated (InvalidMemory, the proposal unchanged), then kept."""

    p = load(ctx.home, pid)
    changes = p.changes
    if not 0 <= n < len(changes) or changes[n].get("action") == "delete":
        raise ProposalError(f"proposal {pid} has no proposed file number {n}")
    memwrite.check_text(text, str(changes[n].get("file")))
    atomic_write(p.path / "proposed" / f"{n}.md", text)
    changes[n]["proposed"] = sha(text.encode("utf-8"))
    p.info["edited"] = True
    p.info["diff"] = _diff_of(ctx.home, p)
    p.info.pop("fingerprint", None)  # an edited proposal is the user's: never merged with a re-run's
    atomic_write(p.path / INFO, json.dumps(p.info, ensure_ascii=False, indent=2, default=str) + "\n")
    ctx.log.info("proposal.edited", proposal=pid, file=changes[n].get("file"))
    return p


def _diff_of(home: Home, p: Proposal) -> str:
    planned = p.planned()
    return diff_text(home, planned, [p.base_text(n) for n in range(len(planned))])


def rebase(ctx: JobContext, pid: str) -> Proposal:
    """Move a proposal onto the files as they are now: new bases, a new diff to review.

    Nothing is applied; the proposed texts stay as they were. A delete of a file that is
    gone already is dropped.
    """

    p = load(ctx.home, pid)
    planned = p.planned()
    keep: list[int] = []
    for n, c in enumerate(planned):
        path = child(c.place.memory_dir(ctx.home), c.file)
        try:
            data: bytes | None = None if path.is_symlink() or not path.is_file() else path.read_bytes()
        except OSError:
            data = None
        if data is None and c.action == "delete":
            continue
        base_file = p.path / "base" / f"{n}.md"
        if data is None:
            base_file.unlink(missing_ok=True)
        else:
            atomic_write(base_file, data)
        entry = p.changes[n]
        entry["base"] = sha(data)
        if c.action != "delete":
            entry["action"] = "add" if data is None else "update"
        keep.append(n)
    if len(keep) != len(planned):
        _renumber(p, keep)
    p.info.pop("check", None)
    p.info.pop("fingerprint", None)
    p.info["rebased"] = iso(ctx.now())
    p.info["diff"] = _diff_of(ctx.home, p)
    atomic_write(p.path / INFO, json.dumps(p.info, ensure_ascii=False, indent=2, default=str) + "\n")
    ctx.log.info("proposal.rebased", proposal=pid)
    return p


def _renumber(p: Proposal, keep: list[int]) -> None:
    changes = p.changes
    for new, old in enumerate(keep):
        for sub in ("base", "proposed"):
            src = p.path / sub / f"{old}.md"
            if src.exists() and new != old:
                os.replace(src, p.path / sub / f"{new}.md")
            elif not src.exists():
                (p.path / sub / f"{new}.md").unlink(missing_ok=True)
    for gone in range(len(keep), len(changes)):
        for sub in ("base", "proposed"):
            (p.path / sub / f"{gone}.md").unlink(missing_ok=True)
    p.info["changes"] = [changes[i] for i in keep]
