"""Review mode: writes kept as proposals until the user accepts them (issue 13, SPEC §12).

With `memory.review` on, `memwrite.apply` (extraction, MCP writes) and dream
(`propose_directory_change`) do not touch a memory directory: they store what
they would write here, under the home, and nothing reaches a memory directory,
`MEMORY.md` or the search database until `memd review accept`.

One proposal is one directory `memd/proposals/<id>/` (0700; files 0600):

* `proposal.json`: `id`, `time`, `kind` ("write": operations of one call;
  "directory": a dream's change to one scope), `job`, `reason`, `provider`,
  `session`, `sources`, `operations` (as validated), `details` (the writer's
  own summary, e.g. dream's merges), `changes` (one per file: `scope`, `key`,
  `file`, `action` add|update|delete, `name`, `base` — the sha256 of the file
  when proposed, null when it did not exist — `proposed` — the sha256 of the
  proposed text — and `label`), `diff` (unified, against the files as they
  were), `fingerprint`, and after a refused accept `check` {`time`, `reason`};
* `base/<n>.md`: the file as it was when proposed (for the diff);
* `proposed/<n>.md`: the text the file will hold (absent for a delete).

A proposal is built in `.new-<id>` and renamed into place once complete, so a
crash leaves no half proposal (stray `.new-*` are swept). The same change
proposed twice (a re-run after a crash) is one proposal: the fingerprint covers
files, bases and texts, timestamps aside.

Deciding (accept, reject, edit, rebase) is `memd.write.review`. Accepting goes
through the write path (`memwrite.apply_changes`): the scopes' locks,
validation of every proposed file, atomic writes, history (one run, undoable
with `memd undo`), indexes. A file whose bytes differ from the proposal's base —
changed by hand, by another proposal, by undo — makes the accept refuse with the
file's name; the proposal is kept (`rebase` moves it onto the files as they are
now, with a fresh diff to review).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memd.clock import iso, parse_iso
from memd.errors import MemdError, UsageError
from memd.fsutil import ensure_private_dir, fsync_dir, read_regular
from memd.settings import Settings
from memd.tree import Home, Place

if TYPE_CHECKING:
    from memd.memory.change import Change

if TYPE_CHECKING:  # the job context (and the YAML it loads) is imported where a proposal is made or applied,
    from memd.job.context import JobContext  # so that `memd status`, which counts proposals, stays light

DIR_NAME = "proposals"
PROPOSED_MAX_BYTES = 1 << 20  # a proposed memory file (a body is capped at 16 KB; the whole file far below this)
INFO = "proposal.json"
ID_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$")
_UPDATED = re.compile(r"^  updated: .*$", re.MULTILINE)


class ProposalError(UsageError):
    """An unknown proposal, or a request that cannot apply to it (exit 2)."""


class ProposalRefused(MemdError):
    """An accept refused after re-checking (stale base, invalid file, read-only); the proposal is kept (exit 1)."""


@dataclass
class Proposal:
    """A proposal waiting for review: its id, its directory and its recorded information."""

    id: str
    path: Path
    info: dict[str, Any]

    @property
    def changes(self) -> list[dict[str, Any]]:
        raw = self.info.get("changes")
        return [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []

    @property
    def time(self) -> datetime | None:
        return parse_iso(str(self.info.get("time") or ""))

    def proposed_text(self, n: int) -> str | None:
        """The proposed file's text; a FIFO, a link or anything but a regular file in its place is refused
        (`ProposalRefused`) without blocking on it or reading through it."""
        data = self._read(self.path / "proposed" / f"{n}.md")
        try:
            return None if data is None else data.decode("utf-8")
        except UnicodeDecodeError:
            raise ProposalRefused(f"proposal {self.id}: proposed/{n}.md is not UTF-8 text") from None

    def base_text(self, n: int) -> str | None:
        try:
            data = self._read(self.path / "base" / f"{n}.md")
        except ProposalRefused:
            return None
        return None if data is None else data.decode("utf-8", errors="replace")

    def _read(self, path: Path) -> bytes | None:
        try:
            return read_regular(path, PROPOSED_MAX_BYTES, follow=False)
        except FileNotFoundError:
            return None
        except OSError as exc:  # UnusableFile (FIFO, device, over the cap) or ELOOP (a symlink)
            why = str(exc) if isinstance(exc, MemdError) else f"{path}: a symlink or unreadable ({exc.strerror})"
            raise ProposalRefused(f"proposal {self.id}: {why}") from None

    def planned(self) -> list[Change]:
        """The proposal as changes for `memwrite.apply_changes`, texts read from `proposed/`."""

        out = []
        from memd.memory.change import Change  # noqa: PLC0415 - start-up
        for n, c in enumerate(self.changes):
            scope = c.get("scope")
            key = c.get("key")
            if scope not in ("global", "project") or (scope == "project" and not isinstance(key, str)):
                raise ProposalRefused(f"proposal {self.id}: change {n} names no memory directory")
            Place.memory(None if scope == "global" else key)  # raises on a key that is not one path component
            text = self.proposed_text(n)
            action = str(c.get("action"))
            if (text is None) != (action == "delete"):
                raise ProposalRefused(f"proposal {self.id}: change {n} ({c.get('file')}) has no proposed text")
            out.append(Change(scope, key if scope == "project" else None, str(c.get("file")), action,
                              str(c.get("name") or ""), text, c.get("base"), str(c.get("label") or "")))  # fmt: skip
        return out


def root(home: Home) -> Path:
    return home.memd_dir / DIR_NAME


def review_on(settings: Settings) -> bool:
    """Whether writers must propose instead of write (`memory.review`)."""
    return settings.memory.review


# --------------------------------------------------------------------------- reading


def load(home: Home, pid: str) -> Proposal:
    if not isinstance(pid, str) or not ID_RE.match(pid):
        raise ProposalError(f"{pid!r} is not a proposal id (see `memd review`)")
    path = root(home) / pid
    try:
        info = json.loads((path / INFO).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProposalError(f"no proposal {pid} (see `memd review`)") from None
    except (OSError, ValueError) as exc:
        raise ProposalError(f"proposal {pid}: unreadable {INFO} ({exc})") from None
    if not isinstance(info, dict):
        raise ProposalError(f"proposal {pid}: {INFO} is not an object")
    return Proposal(pid, path, info)


def _scan(home: Home) -> tuple[list[Proposal], list[dict[str, str]]]:
    """(proposals that load, damaged ones as id, reason, path): one pass over the proposal directories."""
    try:
        names = sorted(os.listdir(root(home)))
    except OSError:
        return [], []
    good: list[Proposal] = []
    damaged: list[dict[str, str]] = []
    for name in names:
        if ID_RE.match(name):
            try:
                good.append(load(home, name))
            except ProposalError as exc:
                damaged.append({"id": name, "reason": str(exc), "path": str(root(home) / name)})
    return good, damaged


def list_proposals(home: Home) -> list[Proposal]:
    """Waiting proposals, oldest first (ids sort by time)."""

    def order(p: Proposal) -> tuple[str, int, str]:
        made = p.info.get("created_ns")
        return (p.id[:16], made if isinstance(made, int) else 0, p.id)

    return sorted(_scan(home)[0], key=order)


def damaged_proposals(home: Home) -> list[dict[str, str]]:
    """Proposal directories whose `proposal.json` cannot be read (id, reason): listed by `memd review`
    rather than hidden, so the user can look and `memd review reject` them."""
    return _scan(home)[1]


def summary(home: Home, now: datetime) -> dict[str, Any]:
    """For `memd status`: how many wait, and since when the oldest does."""
    waiting = list_proposals(home)
    oldest = waiting[0].time if waiting else None
    return {
        "waiting": len(waiting),
        "oldest": iso(oldest) if oldest else None,
        "oldest_age_seconds": max(0, int((now - oldest).total_seconds())) if oldest else None,
    }


# --------------------------------------------------------------------------- creating


def _new_id(now: datetime) -> str:
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def _jsonable(op: Any) -> Any:
    if dataclasses.is_dataclass(op) and not isinstance(op, type):
        return dataclasses.asdict(op)
    if isinstance(op, Mapping):
        return dict(op)
    return str(op)


def _rel(home: Home, c: Change) -> str:
    directory = c.place.memory_dir(home)
    try:
        return str((directory / c.file).relative_to(home.root))
    except ValueError:
        return str(directory / c.file)


def diff_text(home: Home, changes: Sequence[Change], bases: Sequence[str | None]) -> str:
    """One unified diff of every change against its base text."""
    parts: list[str] = []
    for c, base in zip(changes, bases, strict=True):
        rel = _rel(home, c)
        a = [] if base is None else base.splitlines(keepends=True)
        b = [] if c.text is None else c.text.splitlines(keepends=True)
        lines = list(difflib.unified_diff(a, b, "/dev/null" if base is None else f"a/{rel}",
                                          "/dev/null" if c.text is None else f"b/{rel}"))  # fmt: skip
        parts.append("".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                             for line in lines))  # fmt: skip
    return "".join(parts)


def _fingerprint(changes: Sequence[Change]) -> str:
    """What the proposal changes, without the `updated` stamp a re-run would renew."""
    h = hashlib.sha256()
    for c in changes:
        text = None if c.text is None else _UPDATED.sub("", c.text)
        h.update(json.dumps([c.scope, c.key, c.file, c.action, c.base, text]).encode("utf-8"))
    return h.hexdigest()


def create(
    ctx: JobContext,
    changes: Sequence[Change],
    *,
    job: str,
    reason: str,
    provider: str = "",
    session_id: str = "",
    sources: list[dict[str, Any]] | None = None,
    operations: Sequence[Any] = (),
    kind: str = "write",
    details: dict[str, Any] | None = None,
) -> Proposal:
    """Store `changes` as a proposal (nothing is written to a memory directory). The same
    changes already waiting are that proposal, returned as is."""
    home = ctx.home
    fp = _fingerprint(changes)
    for p in list_proposals(home):
        if p.info.get("fingerprint") == fp:
            return p
    bases: list[str | None] = []
    from memd.memory.change import StaleChange, sha  # noqa: PLC0415 - start-up
    from memd.memory.names import child  # noqa: PLC0415 - start-up
    for c in changes:
        path = child(c.place.memory_dir(home), c.file)
        data = None
        if c.base is not None:
            try:
                data = path.read_bytes()
            except OSError:
                data = None
        if sha(data) != c.base:
            raise StaleChange(f"{_rel(home, c)} changed while the proposal was made; try again")
        bases.append(None if data is None else data.decode("utf-8", "replace"))
    now = ctx.now()
    top = root(home)
    ensure_private_dir(top)
    _sweep(top)
    pid = _new_id(now)
    while (top / pid).exists():
        pid = _new_id(now)
    tmp = top / f".new-{pid}"
    os.mkdir(tmp, 0o700)
    try:
        for sub in ("base", "proposed"):
            os.mkdir(tmp / sub, 0o700)
        for n, (c, base) in enumerate(zip(changes, bases, strict=True)):
            if base is not None:
                _write_private(tmp / "base" / f"{n}.md", base)
            if c.text is not None:
                _write_private(tmp / "proposed" / f"{n}.md", c.text)
        info = {
            "id": pid, "time": iso(now), "kind": kind, "job": job, "reason": reason, "provider": provider,
            "session": session_id, "sources": list(sources or []), "operations": [_jsonable(o) for o in operations],
            "details": dict(details or {}), "changes": [_change_json(c) for c in changes],
            "diff": diff_text(home, changes, bases), "fingerprint": fp,
            "created_ns": time.time_ns(),  # orders proposals made within one second (ids sort by the second)
        }  # fmt: skip
        _write_private(tmp / INFO, json.dumps(info, ensure_ascii=False, indent=2, default=str) + "\n")
        for d in (tmp / "base", tmp / "proposed", tmp):
            fsync_dir(d)
        os.rename(tmp, top / pid)
        fsync_dir(top)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    ctx.log.info("proposal.created", proposal=pid, job=job, changes=len(changes))
    return Proposal(pid, top / pid, info)


def _change_json(c: Change) -> dict[str, Any]:
    from memd.memory.change import sha  # noqa: PLC0415 - start-up
    return {"scope": c.scope, "key": c.key, "file": c.file, "action": c.action, "name": c.name, "base": c.base,
            "proposed": None if c.text is None else sha(c.text.encode("utf-8")), "label": c.label or c.file}  # fmt: skip


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(text.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())


def _sweep(top: Path) -> None:
    """Half-built (`.new-*`) and half-removed (`.gone-*`) proposals a crash left behind."""
    try:
        names = os.listdir(top)
    except OSError:
        return
    for name in names:
        if name.startswith((".new-", ".gone-")):
            shutil.rmtree(top / name, ignore_errors=True)


def propose_directory_change(
    ctx: JobContext,
    place: Place,
    files: Mapping[str, str | None],
    *,
    job: str = "dream",
    reason: str,
    provider: str = "",
    details: dict[str, Any] | None = None,
    sources: list[dict[str, Any]] | None = None,
) -> Proposal | None:
    """Dream's entry point in review mode: a whole-scope change as one proposal.

    `files` maps a file name of `place`'s memory directory to the full text it should
    hold, or None to delete it; files left out stay as they are, and entries equal to
    the file on disk are dropped. Returns None when nothing would change. Raises
    `readonly.ReadOnlyError` when the scope is read-only. Call it under the scope's lock,
    where dream would have swapped its staging directory in.
    """

    scope = "global" if place.is_global else "project"
    key = None if place.is_global else place.key
    from memd.memory import readonly  # noqa: PLC0415 - start-up
    locked = readonly.reason(ctx.home, ctx.settings, scope, key)
    if locked:
        raise readonly.ReadOnlyError(f"read-only: {locked}")
    directory = place.memory_dir(ctx.home)
    from memd.memory.change import Change, current_sha, sha  # noqa: PLC0415 - start-up
    changes: list[Change] = []
    from memd.memory.file import MemoryParseError, parse_memory  # noqa: PLC0415 - start-up
    from memd.memory.names import child  # noqa: PLC0415 - start-up
    for file, text in sorted(files.items()):
        path = child(directory, file)
        base = current_sha(path)
        if text is None and base is None:
            continue
        if text is not None and base == sha(text.encode("utf-8")):
            continue
        shown = text if text is not None else path.read_text(encoding="utf-8", errors="replace")
        try:
            name = parse_memory(path, shown).name
        except MemoryParseError:
            if text is not None:
                raise ValueError(f"{file}: the proposed text is not a memory") from None
            name = path.stem
        action = "delete" if text is None else "add" if base is None else "update"
        changes.append(Change(scope, key, file, action, name, text, base, f"{scope}:{path.stem}"))
    if not changes:
        return None
    return create(ctx, changes, job=job, reason=reason, provider=provider, sources=sources, kind="directory",
                  details=details)  # fmt: skip
