"""What an agent loads at the start of a session: `memd context` (SPEC §11).

Memory is only worth what reaches the model. One block, for one working
directory and one agent, holds:

* the **instruction files** the agent does not load itself (`DEEPCODE.md`,
  `MEWCODE.md`), most specific first (local, project, then user-level), joined
  by `\\n---\\n` as the seeds join them; an `@include <path>` line pulls in
  another file from within the project root (see `expand`, `resolve_include`); the text is
  redacted;
* the **global drawer** as memd pre-renders it (`$HOME/memory.md`, §6.2),
  within `memory.global.maxBytes`;
* the project's **`MEMORY.md`**, for agents that do not read it;
* the **staleness rule** (§7b.2) and **today's date**.

What is left out depends on the agent (`AGENTS`): Claude Code loads `CLAUDE.md`
and the project's `MEMORY.md` itself and never the drawer, so it gets the
drawer, the rule and the date, and nothing twice.

This module is on the SessionStart hook's path (p95 ≤ 150 ms with process
start): the fast case reads a few small files and imports nothing heavy. The
drawer is rendered here (through `memd.index.render`, which costs more) only when the
pre-rendered file is missing, from an earlier day, or over the budget.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from memd.keys import canonical_root, key_for_root
from memd.memory.names import is_candidate_name
from memd.memory.reading import FULL_TEXT_RULE
from memd.settings import Settings
from memd.tree import Home

MAX_DEPTH = 5  # @include nesting: a top-level file is depth 0
MAX_FILE_BYTES = 64 * 1024  # one instruction file, or one included file
MAX_INDEX_BYTES = 25_000  # a project's MEMORY.md, as agents read it (§2.3)

INSTRUCTIONS_INTRO = (
    "Codebase and user instructions are shown below. Be sure to adhere to these instructions. "
    "IMPORTANT: These instructions OVERRIDE any default behavior and you MUST follow them exactly as written."
)
STALENESS_RULE = (
    "Memories (the global memory, the project's MEMORY.md, and memories recalled for a prompt) are "
    "point-in-time observations, not live state. A memory more than a day old is shown with its age: "
    "claims about code behavior or file:line citations in it may be outdated, so verify them against "
    "the current code before asserting them as fact. Search memory with memd's `search_memory` tool "
    "(or `memd search`). " + FULL_TEXT_RULE
)
WRAP_HEAD = "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
WRAP_TAIL = "\n\n      IMPORTANT: this context may or may not be relevant to your tasks.\n</system-reminder>\n"
_INCLUDE = re.compile(r"^[ \t]*@include[ \t]+(\S.*?)[ \t]*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")
_DRAWER_FULL_FILE = re.compile(r"· (memory/[^/\s]+\.md)_$", re.MULTILINE)


@dataclass(frozen=True)
class Agent:
    """What one agent loads by itself, hence what `memd context` adds for it."""

    name: str
    instruction_file: str | None  # DEEPCODE.md, MEWCODE.md; None: the agent loads its own (CLAUDE.md)
    local_file: str | None  # the personal, uncommitted variant in the project root
    config_dir: str | None  # the agent's directory in a project and in the user's home (.deepcode)
    reads_memory_index: bool  # loads the project's MEMORY.md itself

    @property
    def section(self) -> str:
        return f"{self.name}Md"

    def instruction_paths(self, root: Path, home: Path) -> list[tuple[str, Path]]:
        """(level, path) of every instruction file this agent may have, most specific first.

        The user-level file is looked for in the memd home and in the agent's own
        directory of the user's home (the same file when the home is the default).
        """
        if self.instruction_file is None:
            return []
        name = self.instruction_file
        out: list[tuple[str, Path]] = []
        if self.local_file:
            out.append(("local", root / self.local_file))
        out.append(("project", root / name))
        if self.config_dir:
            out.append(("project", root / self.config_dir / name))
        out.append(("user", home / name))
        if self.config_dir:
            out.append(("user", Path.home() / self.config_dir / name))
        return out


AGENTS: dict[str, Agent] = {
    "claude": Agent("claude", None, None, None, reads_memory_index=True),
    "deepcode": Agent("deepcode", "DEEPCODE.md", "DEEPCODE.local.md", ".deepcode", reads_memory_index=False),
    "mewcode": Agent("mewcode", "MEWCODE.md", None, ".mewcode", reads_memory_index=False),
}


@dataclass
class Include:
    """One `@include` line and what became of it."""

    file: str  # the file holding the line
    target: str  # the path as written
    included: str | None = None  # the resolved file, when it was included
    reason: str = ""  # why not, when it was not


@dataclass
class Section:
    """One named part of the injected context, with the files it came from."""

    name: str  # deepcodeMd, globalMemory, projectMemory, memoryStaleness, currentDate
    text: str
    sources: list[str] = field(default_factory=list)


@dataclass
class Context:
    """The session-start block and how it was made (`memd context --json`)."""

    agent: str
    today: date
    cwd: str
    project_root: str
    project_key: str
    sections: list[Section] = field(default_factory=list)
    includes: list[Include] = field(default_factory=list)
    drawer_files: list[str] = field(default_factory=list)  # drawer memories shown in full (home-relative)

    def body(self) -> str:
        return "\n\n".join(f"# {s.name}\n{s.text.strip()}" for s in self.sections)

    def text(self) -> str:
        """The block wrapped as the seeds inject it, for agents that paste it in as is."""
        return WRAP_HEAD + self.body() + WRAP_TAIL

    def as_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent, "date": self.today.isoformat(), "cwd": self.cwd,
            "project_root": self.project_root, "project_key": self.project_key,
            "sections": [{"name": s.name, "sources": s.sources, "chars": len(s.text)} for s in self.sections],
            "includes": [vars(i) for i in self.includes], "drawer_files": self.drawer_files, "text": self.text(),
        }  # fmt: skip


# --------------------------------------------------------------------------- instruction files


def _within(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _read_text(path: Path) -> str:
    from memd.fsutil import open_regular  # noqa: PLC0415 - start-up
    with os.fdopen(open_regular(path), "rb") as fh:  # a FIFO in a file's place is refused, never waited on
        data = fh.read(MAX_FILE_BYTES + 1)
    text = data[:MAX_FILE_BYTES].decode("utf-8", errors="replace").lstrip("\ufeff")
    if len(data) > MAX_FILE_BYTES:
        text += f"\n[memd: {path} is over {MAX_FILE_BYTES // 1024} KB; the rest is not included]\n"
    return text


def resolve_include(raw: str, including: Path, root: str) -> tuple[Path | None, str]:
    """The file an `@include` names, or None and why not (pure but for reading the file system).

    Confined as the MewCode seed confines it (§5): a path relative to the including file, inside
    `root` (the project root; for a user-level file, its own directory). Refused: absolute and
    `~/` paths, `..` out of the root, a symbolic link anywhere on the way (the path as written
    must be the real path), anything but a regular file. The file's own checks (hard links,
    owner) are `read_include`'s, on the descriptor it reads.
    """
    target = raw.strip().strip("\"'`<>").strip()
    if not target:
        return None, "no path"
    if target.startswith(("/", "~")) or re.match(r"^[A-Za-z]:[\\/]", target):
        return None, "only paths relative to the including file are included"
    joined = os.path.normpath(os.path.join(os.path.realpath(including.parent), target))
    if not _within(joined, [root]):
        return None, "outside the project root"
    real = os.path.realpath(joined)
    if real != joined:
        return None, "a symbolic link"
    if not os.path.isfile(real):
        return None, "not a file"
    return Path(real), ""


def read_include(path: Path) -> str:
    """An included file's text; OSError (with the reason as its message) when it is not one memd
    puts before a model: a link, a file with other hard links (its other name may lie anywhere:
    `/etc/passwd` linked into the project), or a file the user does not own."""
    from memd.fsutil import open_regular  # noqa: PLC0415 - start-up

    fd = open_regular(path, follow=False)
    try:
        st = os.fstat(fd)
        if st.st_nlink > 1:
            raise OSError(f"a hard link ({st.st_nlink} names)")
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise OSError("not owned by the user")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
    text = data[:MAX_FILE_BYTES].decode("utf-8", errors="replace").lstrip("\ufeff")
    if len(data) > MAX_FILE_BYTES:
        text += f"\n[memd: {path} is over {MAX_FILE_BYTES // 1024} KB; the rest is not included]\n"
    return text


def expand(path: Path, text: str, root: str, includes: list[Include], stack: tuple[str, ...] = (),
           depth: int = 0) -> str:  # fmt: skip
    """`text` (the content of `path`) with each `@include <path>` line replaced by that file, expanded.

    Depth ≤ `MAX_DEPTH`; a file that includes itself, directly or not, is refused
    (the line becomes a one-line note, as does any other refusal); lines inside
    fenced code blocks are left alone. Every include stays within `root`.
    """
    stack = (*stack, os.path.realpath(path))
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        m = None if fenced else _INCLUDE.match(line)
        if m is None:
            out.append(line)
            continue
        inc = Include(str(path), m.group(1))
        includes.append(inc)
        target, why = resolve_include(m.group(1), path, root)
        if target is not None and str(target) in stack:
            target, why = None, "a cycle"
        elif target is not None and depth + 1 > MAX_DEPTH:
            target, why = None, f"deeper than {MAX_DEPTH} levels"
        if target is None:
            inc.reason = why
            out.append(f"<!-- memd: @include {m.group(1)} not included: {why} -->")
            continue
        try:
            child = read_include(target)
        except OSError as exc:
            inc.reason = str(exc) if not exc.strerror else f"unreadable ({exc.strerror})"
            out.append(f"<!-- memd: @include {m.group(1)} not included: {inc.reason} -->")
            continue
        inc.included = str(target)
        out.append(expand(target, child, root, includes, stack, depth + 1).rstrip("\n"))
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def instructions(agent: Agent, root: Path, home: Path, includes: list[Include]) -> tuple[str, list[str]]:
    """The agent's instruction files, expanded and joined, most specific first; and their paths."""
    parts: list[str] = []
    sources: list[str] = []
    seen: set[str] = set()
    for level, path in agent.instruction_paths(root, home):
        real = os.path.realpath(path)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        try:
            text = _read_text(Path(real))
        except OSError:
            continue
        confine = os.path.realpath(root) if level != "user" else os.path.dirname(real)
        body = expand(path, text, confine, includes).strip()
        if body:
            parts.append(f"Contents of {path} ({level} instructions):\n\n{body}")
            sources.append(str(path))
    joined = "\n---\n".join(parts)
    if joined:  # redacted like everything memd puts before a model (a key pasted or included)
        from memd.redact.redactor import redact  # noqa: PLC0415 - start-up

        joined = redact(joined)
    return joined, sources


# --------------------------------------------------------------------------- memory


def _has_drawer_memories(directory: Path) -> bool:
    try:
        return any(is_candidate_name(e.name) for e in os.scandir(directory))
    except OSError:
        return False


def drawer_text(home: Home, max_bytes: int, today_utc: date, max_chars: int | None = None) -> str | None:
    """The drawer as memd rendered it, or rendered now; None when the drawer is empty.

    The pre-rendered `memory.md` is used as is when it is today's (its ages count
    from its day) and within both budgets; otherwise the drawer is rendered from
    its files (nothing is written: the index job owns the file).
    """
    if not _has_drawer_memories(home.global_memory):
        return None
    path = home.drawer_render
    try:
        st = path.stat()
        fresh = datetime.fromtimestamp(st.st_mtime, UTC).date() == today_utc and st.st_size <= max_bytes
        text = _read_regular_text(path) if fresh else None
    except (OSError, UnicodeDecodeError):
        text = None
    if text is not None and (max_chars is None or len(text) <= max_chars):
        return text

    budget = max_bytes if max_chars is None else min(max_bytes, max_chars)
    from memd.memory.scan import scan_dir  # noqa: PLC0415 - start-up
    memories = scan_dir(home.global_memory, "global", None).memories
    from memd.index.render import render_drawer  # noqa: PLC0415 - start-up
    return render_drawer(memories, max_bytes=budget, today=today_utc).text if memories else None


def _read_regular_text(path: Path) -> str:
    from memd.fsutil import read_regular  # noqa: PLC0415 - start-up
    return read_regular(path).decode("utf-8")


def drawer_full_files(render: str) -> list[str]:
    """The drawer files whose full text a render holds (home-relative): empty for the index form."""
    return _DRAWER_FULL_FILE.findall(render)


def memory_index(home: Home, key: str) -> str | None:
    path = home.project_memory(key) / "MEMORY.md"
    try:
        from memd.fsutil import open_regular  # noqa: PLC0415 - start-up
        with os.fdopen(open_regular(path), "rb") as fh:  # a FIFO planted as MEMORY.md: skipped, never waited on
            data = fh.read(MAX_INDEX_BYTES + 1)
    except OSError:
        return None
    text = data[:MAX_INDEX_BYTES].decode("utf-8", errors="replace")
    if len(data) > MAX_INDEX_BYTES:
        text = text.rsplit("\n", 1)[0] + f"\n[memd: {path} is over {MAX_INDEX_BYTES // 1000} KB; search memory for the rest]\n"
    return text if text.strip() else None


# --------------------------------------------------------------------------- the block


def build(
    home: Home,
    settings: Settings,
    cwd: str,
    agent: Agent,
    *,
    now: Callable[[], datetime] = lambda: datetime.now().astimezone(),
    max_chars: int | None = None,
) -> Context:
    """The session-start block for `cwd` (§11). `max_chars` bounds the body (a hook's limit).

    `memory.enabled: false` leaves every memory section out (instructions and the
    date stay); `memory.global.enabled: false` leaves out the drawer.
    """
    moment = now()
    root = canonical_root(cwd)
    key = key_for_root(root)
    ctx = Context(agent.name, moment.date(), cwd, str(root), key)
    text, sources = instructions(agent, root, home.root, ctx.includes)
    if text:
        ctx.sections.append(Section(agent.section, f"{INSTRUCTIONS_INTRO}\n\n{text}", sources))
    memory_on = bool(settings.memory.enabled)
    index = memory_index(home, key) if memory_on and not agent.reads_memory_index else None
    if index:
        ctx.sections.append(Section("projectMemory", index, [str(home.project_memory(key) / "MEMORY.md")]))
    ctx.sections.append(Section("memoryStaleness", STALENESS_RULE))
    ctx.sections.append(Section("currentDate", f"Today's date is {moment.date().isoformat()}."))
    if memory_on and settings.memory.global_.enabled:
        room = None if max_chars is None else max_chars - len(ctx.body()) - len("\n\n# globalMemory\n")
        if room is None or room > 200:
            drawer = drawer_text(home, int(settings.memory.global_.max_bytes), moment.astimezone(UTC).date(), room)
            if drawer:
                at = 1 if text else 0
                ctx.sections.insert(at, Section("globalMemory", drawer, [str(home.drawer_render)]))
                ctx.drawer_files = drawer_full_files(drawer)
    if not memory_on:
        ctx.sections = [s for s in ctx.sections if s.name != "memoryStaleness"]
    return ctx
