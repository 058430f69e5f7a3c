"""What a merge of memories means (the rules: `memd.sync.run`): pure functions, no git, no files.

`merge_entries` turns three trees (base, ours, theirs) into one, file by file,
never per line, keeping both versions of a conflict as copies; `merged_text` is
the first draft of one memory from two versions that a merge proposal offers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from memd.git.layout import MANIFEST, split_path
from memd.git.plumbing import Entries
from memd.memory.file import MemoryParseError, parse_memory, render_memory

_CONFLICT = re.compile(r"^(?P<stem>.+)\.conflict-[A-Za-z0-9-]+(?:-\d+)?\.md$")


@dataclass
class Merged:
    """A merge of two machines' entries, and what it had to decide."""

    entries: Entries
    events: list[dict[str, str]] = field(default_factory=list)  # kind, path, copy, host


def merge_entries(base: Entries, ours: Entries, theirs: Entries, host_of: Callable[[str], str]) -> Merged:
    """Three trees → one, file by file, losing no version (the rules: `memd.sync.run`).

    `manifest.json` is left to the caller (a union of its JSON). A copy's name
    is reused when it already holds theirs' version (a sync repeated after a
    crash makes no second copy); a conflict copy identical to its file is dropped.
    """
    out: Entries = {}
    res = Merged(out)
    copies: list[tuple[str, tuple[str, str], str]] = []
    for path in sorted(set(base) | set(ours) | set(theirs)):
        if path == MANIFEST:
            continue
        b, o, t = base.get(path), ours.get(path), theirs.get(path)
        r = o
        if o == t or t == b:
            r = o
        elif o == b:
            r = t
        elif o is None:
            r = t
            res.events.append({"kind": "kept-changed", "path": path, "note": "changed there, deleted here"})
        elif t is None:
            res.events.append({"kind": "kept-changed", "path": path, "note": "changed here, deleted there"})
        else:
            assert t is not None
            copies.append((path, t, "created-both" if b is None else "changed-both"))
        if r is not None:
            out[path] = r
    for path, t, kind in copies:
        host = host_of(path)
        d, name = split_path(path) or (path.rsplit("/", 1)[0] if "/" in path else "", path.rsplit("/", 1)[-1])
        suffix = f".conflict-{host}" if kind == "changed-both" else f"-{host}"
        prefix = f"{d}/" if d else ""
        taken = {p[len(prefix):] for p in out if p.startswith(prefix) and "/" not in p[len(prefix):]}
        copy = _reuse_or_free(name, suffix, taken, {n for n in taken if out.get(prefix + n) == t})
        out[prefix + copy] = t
        res.events.append({"kind": kind, "path": path, "copy": prefix + copy, "host": host})
    for path in [p for p in out if (sp := split_path(p)) and _CONFLICT.match(sp[1])]:
        d, name = split_path(path)  # type: ignore[misc]
        m = _CONFLICT.match(name)
        if m and out.get(f"{d}/{m.group('stem')}.md") == out[path]:
            del out[path]
    return res


def _reuse_or_free(name: str, suffix: str, taken: set[str], holding: set[str]) -> str:
    """`<stem><suffix>.md` (then `-2`, `-3`…), or the first of those already holding the same version."""
    stem = name[: -len(".md")] if name.endswith(".md") else name
    ext = ".md" if name.endswith(".md") else ""
    cand, n = f"{stem}{suffix}{ext}", 2
    while cand in taken:
        if cand in holding:
            return cand
        cand, n = f"{stem}{suffix}-{n}{ext}", n + 1
    return cand


def merged_text(ours: bytes, theirs: bytes) -> str | None:
    """A first draft of one memory from two versions, for the user to review: the newer version
    (by `metadata.updated`; ours on a tie) with the other's body lines it lacks appended.
    None when either version is not a memory memd can read."""

    try:
        a, b = parse_memory("ours.md", ours), parse_memory("theirs.md", theirs)
    except MemoryParseError:
        return None
    newer, older = (b, a) if str(b.metadata.get("updated") or "") > str(a.metadata.get("updated") or "") else (a, b)
    have = {line.strip() for line in newer.body.splitlines() if line.strip()}
    extra = [line for line in older.body.splitlines() if line.strip() and line.strip() not in have]
    body = newer.body.rstrip() + ("\n\n" + "\n".join(extra) if extra else "")
    try:
        return render_memory(newer.name, newer.description, newer.type, body, newer.metadata)
    except ValueError:
        return None
