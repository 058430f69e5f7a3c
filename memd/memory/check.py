"""Checking a whole memory file a user (or dream) wrote before memd saves it: `memd edit`, an
edited or accepted review proposal. The write path (`memd.write.apply.apply_changes`) calls it.

A model's operation is validated field by field (`memd.memory.operations`); here the text is the
user's, so it is parsed as a memory file and its fields go through the same validation,
except that a secret is refused (the user sees why) instead of redacted behind their back,
and names stay unique within their directory (SPEC §2.2).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from memd.errors import UsageError
from memd.memory.answer import Caps
from memd.memory.file import Memory, MemoryParseError, parse_memory
from memd.memory.names import fold_name
from memd.memory.operations import validate_operations
from memd.memory.scan import scan_dir
from memd.tree import Home, Place

if TYPE_CHECKING:
    from memd.memory.change import Change

__all__ = ["USER_BODY_MAX", "InvalidMemory", "check_names", "check_text"]

USER_BODY_MAX = 16 * 1024  # a body a user or dream wrote (dream's cap); a model's extraction stays at 8 KB


class InvalidMemory(UsageError):
    """A memory text a user wrote (an edit, an edited proposal) that memd will not save (exit 2)."""


def check_text(text: str, file: str) -> Memory:
    """Validate a whole memory file the user edited, as a model's operation is validated.

    It must parse (front matter with name, description, type) and pass `opsvalidate`
    unchanged: a name that is no path and holds no secret, a one-line description and a
    body within the caps, and no secret in either (one is refused here, not redacted
    behind the user's back). Raises InvalidMemory with the reason.
    """

    try:
        m = parse_memory(Path(file), text)
    except MemoryParseError as exc:
        raise InvalidMemory(f"{file}: {exc.reason}") from None
    raw = {"op": "add", "scope": "project", "name": m.name, "description": m.description, "type": m.type,
           "body": m.body}  # fmt: skip
    accepted, rejected = validate_operations({"operations": [raw]}, caps=Caps(max_body_bytes=USER_BODY_MAX))
    if rejected:
        raise InvalidMemory(f"{file}: {rejected[0][1]}")
    op = accepted[0]
    if op.redacted:
        raise InvalidMemory(f"{file}: holds a secret ({', '.join(op.redacted)}); remove it")
    return m


def check_names(home: Home, changes: Sequence[Change]) -> None:
    """Names stay unique within a directory (§2.2), counting what these changes add and delete."""
    by_dir: dict[Place, dict[str, str]] = {}
    for c in changes:
        if c.place not in by_dir:
            res = scan_dir(c.place.memory_dir(home), c.scope, c.key)
            by_dir[c.place] = {fold_name(m.name): m.path.name for m in res.memories}
    for c in changes:  # the files these changes replace or delete no longer hold their old names
        names = by_dir[c.place]
        for k in [k for k, f in names.items() if f == c.file]:
            del names[k]
    for c in changes:
        if c.text is None:
            continue
        m = check_text(c.text, c.file)
        names = by_dir[c.place]
        other = names.get(fold_name(m.name))
        if other is not None and other != c.file:
            raise InvalidMemory(f"{c.file}: the name {m.name!r} is already used by {other}")
        names[fold_name(m.name)] = c.file
