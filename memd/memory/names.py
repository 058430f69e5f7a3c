"""Where a memory file's name comes from and where it may live: the one home of the naming rules.

Every writer and reader of memory directories asks this module whether a name is a
memory file, turns a model's or user's words into a file name, and confines a name to
its directory. Invariants: a memory file name is one path component, ends in `.md`,
is not `MEMORY.md`, does not start with a dot, and fits in 255 bytes.
"""

from __future__ import annotations

from pathlib import Path


def child(directory: Path, file: str) -> Path:
    """`directory/file` for a memory file name (from a scan or a confined slug): never a path, never the index."""
    if (not isinstance(file, str) or "/" in file or "\\" in file or "\x00" in file or file.startswith(".")
            or not file.endswith(".md") or file == "MEMORY.md" or len(file.encode("utf-8", "surrogatepass")) > 255):
        raise ValueError(f"not a memory file name: {file!r}")
    return directory / file
