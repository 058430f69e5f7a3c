"""A planned change to one memory file: the exact bytes it will hold, and the base it applies onto.

Shared by the write path (`memd.write.apply`), review (`memd.write.proposals`) and the
checks (`memd.memory.check`), which is why it sits below all three. Invariant: a change
is applied only onto `base`, the sha256 of the file's bytes when it was planned.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from memd.errors import MemdError
from memd.tree import Place


@dataclass(frozen=True)
class Change:
    """One file a write changes, planned and not yet done: exactly the bytes it will hold.

    `base` is the sha256 of the file's bytes when the change was planned (None: no file);
    a change is only ever applied onto that base (`apply_changes` re-checks it).
    """

    scope: str  # "global" | "project"
    key: str | None  # the project's key; None for the drawer
    file: str  # file name inside the scope's memory directory
    action: str  # "add" | "update" | "delete"
    name: str
    text: str | None  # the new content; None for a delete
    base: str | None
    label: str = ""

    @property
    def place(self) -> Place:
        return Place.memory(None if self.scope == "global" else self.key)


class StaleChange(MemdError):
    """A planned change whose file changed since it was planned: re-checked, not applied (exit 1)."""


def sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def current_sha(path: Path) -> str | None:
    """The hash of a memory file's bytes now; None when there is no regular file."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        return sha(path.read_bytes())
    except OSError:
        return None
