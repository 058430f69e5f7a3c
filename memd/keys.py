"""Project keys (SPEC §1.1): the directory name Claude Code gives a path, computed as it does.

`key_for_root` spells a path as the agent does (its UTF-16 units, `djb2` past 200);
`canonical_root` finds the directory whose key names a project's memory (§1.1a: the
git root, a worktree's main repository); `cwd_key`, `project_key` and
`memory_key_for_session` put the two together. Only files are read, never a `git`
process, so a hook can afford it.
"""

from __future__ import annotations

import os
from pathlib import Path

KEY_MAX = 200


def canonical_root(path: str | os.PathLike[str]) -> Path:
    """The directory whose key names a project's memory (SPEC §1.1a).

    The realpath's nearest ancestor holding `.git`; for a `git worktree` (a `.git`
    file whose git directory has a `commondir`) the main repository's root; outside
    git, the path itself. A submodule's `.git` file has no `commondir`: it is its own
    root. Only files are read: no `git` process, so a hook can afford it.
    """
    start = Path(os.path.realpath(Path(path).expanduser()))
    for candidate in (start, *start.parents):
        dot_git = candidate / ".git"
        if dot_git.is_dir():
            return candidate
        if dot_git.is_file():
            return _worktree_main(candidate, dot_git) or candidate
    return start


def _worktree_main(root: Path, dot_git: Path) -> Path | None:
    """The main repository of a linked worktree whose `.git` file is `dot_git`, else None.

    As Claude Code checks it: the git directory sits in `<common>/worktrees/` and its
    `gitdir` file points back at this `.git`; a submodule (no `commondir`) is its own root.
    """
    try:
        text = dot_git.read_text(encoding="utf-8", errors="replace")[:4096].strip()
        if not text.startswith("gitdir:"):
            return None
        gitdir = Path(os.path.normpath(root / text[len("gitdir:"):].strip()))
        common = Path(os.path.normpath(gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()))
        if gitdir.parent != common / "worktrees":
            return None
        back = (gitdir / "gitdir").read_text(encoding="utf-8").strip()
        if os.path.realpath(back) != os.path.join(os.path.realpath(root), ".git"):
            return None
    except (OSError, UnicodeDecodeError):
        return None  # a submodule (no commondir), or an unreadable git directory
    return common.parent if common.name == ".git" else common


# Kept for callers that only need "the repository this path belongs to".
find_repo_root = canonical_root


def key_for_root(root: str | os.PathLike[str]) -> str:
    """The agent's directory name for an absolute path (SPEC §1.1), exactly as Claude Code spells it.

    Every UTF-16 code unit outside `[A-Za-z0-9]` becomes `-` (so an emoji becomes two);
    past 200 units the first 200 are kept, then `-` and base 36 of |djb2| over the units.
    """
    text = os.fspath(root)
    units = _utf16_units(text)
    key = "".join(chr(u) if _ALNUM_UNIT[u] else "-" for u in units) if units else ""
    if len(key) > KEY_MAX:
        key = f"{key[:KEY_MAX]}-{_base36(abs(djb2(units)))}"
    return key


def _utf16_units(text: str) -> list[int]:
    """UTF-16 code units of `text`; undecodable bytes (surrogateescape) count as one unit each."""
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2)]


_ALNUM_UNIT = bytearray(0x10000)
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789":
    _ALNUM_UNIT[_c] = 1


def djb2(units: list[int]) -> int:
    """JavaScript's `h = (h << 5) - h + unit | 0` over UTF-16 units: a signed 32-bit result."""
    h = 0
    for u in units:
        h = (h * 31 + u) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def cwd_key(path: str | os.PathLike[str]) -> str:
    """The transcript directory an agent started in `path` writes to: the key of its realpath."""
    return key_for_root(os.path.realpath(Path(path).expanduser()))


def project_key(path: str | os.PathLike[str]) -> str:
    """The key of the memory directory for a working directory: its canonical git root's (§1.1a)."""
    return key_for_root(canonical_root(path))


def memory_key_for_session(cwd: str | None, transcript_key: str) -> str:
    """Where a session's memories go (§1.1a): its cwd's canonical root, else its transcript directory.

    The cwd comes from the session's records; a relative, missing or vanished one
    falls back to the directory the transcript lives in, which is what the agent
    keyed it by.
    """
    if not cwd or not os.path.isabs(cwd) or not os.path.isdir(cwd):
        return transcript_key
    return project_key(cwd)
