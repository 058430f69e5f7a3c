"""`memd init [PATH]`: drafts the project's instruction file (`DEEPCODE.md`, `CLAUDE.md`, `MEWCODE.md`)
from what memd knows of the project (issue 26 pt 1; the deepcode seed's `/init`).

Inputs: the project's memories, its session summaries, and the build and test commands its sessions
ran successfully (a Bash tool call whose result is not an error, paired in order with its result).
Offline the draft is structured from those inputs; with a model provider the strong model writes it
from the same inputs (job `init`, through the usual model layer and usage sink). Everything is
redacted before it is shown or written.

The draft lives between `<!-- memd:init start -->` and `<!-- memd:init end -->`: `--write` replaces
only that block (or appends it), so text a person wrote is never touched. The write is atomic and a
history run of the project's scope (`memd undo` reverts it). Without `--write` the draft is printed
as a unified diff against the file as it is.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from memd.cli import command, get_home, json_out
from memd.errors import UsageError

START = "<!-- memd:init start -->"
END = "<!-- memd:init end -->"
FILES = {"deepcode": "DEEPCODE.md", "claude": "CLAUDE.md", "mewcode": "MEWCODE.md"}
MAX_COMMANDS = 10
MAX_SUMMARIES = 20
MAX_SESSIONS = 200
# A command that builds, tests, lints or installs: what a newcomer needs first.
_BUILD_TEST = re.compile(
    r"^(?:\S+=\S+\s+)*(?:make|just|ninja|cmake|cargo|go|npm|pnpm|yarn|bun|npx|pytest|python3?\s+-m\s+(?:pytest|unittest|build|pip)"
    r"|uv|poetry|tox|nox|ruff|mypy|mvn|gradle|\./gradlew|dotnet|bazel|mix|bundle|rake|rspec|phpunit|composer|deno)\b"
)
INIT_SYSTEM = """You write a coding project's instruction file: the Markdown an agent and a new contributor read \
first. From the project's memories, its session summaries and the commands its sessions ran successfully, write: \
a first line saying what the project is; "## Build and test" with the exact commands in code blocks; \
"## Decisions and constraints"; "## References". Only what the inputs support; no secrets; be brief. \
Answer with the Markdown only, no preamble, no enclosing code fence."""


@dataclass
class Inputs:
    """What the draft is made from (all already redacted)."""

    name: str
    memories: list[tuple[str, str, str, str]] = field(default_factory=list)  # type, name, description, body
    summaries: list[str] = field(default_factory=list)  # one line per session: its summary's title, or its .meta's
    commands: list[tuple[str, int]] = field(default_factory=list)  # command, times run successfully


# --------------------------------------------------------------------------- pure decisions


def agent_of(home_root: Path, explicit: str | None) -> str:
    """Which agent's file: `--agent`, else the home's name (`.claude` → Claude Code, `.mewcode` → MewCode)."""
    if explicit:
        return explicit
    name = home_root.name.lower()
    return "claude" if "claude" in name else "mewcode" if "mewcode" in name else "deepcode"


def build_commands(calls: list[tuple[str, bool]]) -> list[tuple[str, int]]:
    """The build/test commands that succeeded, most frequent first (ties: first seen), at most MAX_COMMANDS.
    `calls` are (command, succeeded) in the order the sessions ran them."""
    counts: Counter[str] = Counter()
    order: dict[str, int] = {}
    for cmd, ok in calls:
        cmd = " ".join(cmd.split())
        if ok and cmd and len(cmd) <= 200 and "\n" not in cmd and _BUILD_TEST.match(cmd):
            counts[cmd] += 1
            order.setdefault(cmd, len(order))
    return sorted(counts.items(), key=lambda kv: (-kv[1], order[kv[0]]))[:MAX_COMMANDS]


def paired_bash(pieces: list[Any]) -> list[tuple[str, bool]]:
    """(command, succeeded) of each Bash call of a transcript: results answer calls in order."""
    pending: list[str] = []
    out: list[tuple[str, bool]] = []
    for p in pieces:
        if p.kind == "tool_call":
            cmd = p.tool_input.get("command") if isinstance(p.tool_input, dict) else None
            pending.append(cmd if p.name == "Bash" and isinstance(cmd, str) else "")
        elif p.kind == "tool_result" and pending:
            cmd = pending.pop(0)
            if cmd:
                out.append((cmd, not p.is_error))
    return out


def offline_draft(inp: Inputs) -> str:
    """The structured draft: what the project is, how to build and test it, decisions and constraints,
    references — each section only when the inputs have something for it."""
    by_type: dict[str, list[tuple[str, str, str, str]]] = {}
    for m in inp.memories:
        by_type.setdefault(m[0], []).append(m)
    lines = [f"# {inp.name}", ""]
    about = [d for t, _n, d, _b in by_type.get("project", [])[:3]]
    lines.append("; ".join(about) + "." if about else f"The {inp.name} project.")
    if inp.summaries:
        lines += ["", "Recent work: " + "; ".join(inp.summaries[:5]) + "."]
    if inp.commands:
        lines += ["", "## Build and test", "", "```sh", *[c for c, _n in inp.commands], "```"]
    rules = by_type.get("project", []) + by_type.get("feedback", [])
    if rules:
        lines += ["", "## Decisions and constraints", ""]
        lines += [f"- **{n}**: {d}" for _t, n, d, _b in rules]
    refs = by_type.get("reference", [])
    if refs:
        lines += ["", "## References", ""]
        lines += [f"- {d}" + (f" — {b.splitlines()[0]}" if b.strip() else "") for _t, _n, d, b in refs]
    return "\n".join(lines).rstrip() + "\n"


def model_prompt(inp: Inputs) -> str:
    parts = [f"Project: {inp.name}", "## Memories"]
    parts += [f"- [{t}] {n}: {d}\n  {' '.join(b.split())[:600]}" for t, n, d, b in inp.memories] or ["(none)"]
    parts += ["## Session summaries", *(f"- {s}" for s in inp.summaries)] if inp.summaries else []
    parts += ["## Commands run successfully (times)", *(f"- `{c}` ({n})" for c, n in inp.commands)] \
        if inp.commands else []  # fmt: skip
    return "\n".join(parts)


def merge_block(current: str, draft: str) -> str:
    """The file with memd's block replaced by `draft` (or appended): text outside the markers is kept
    byte for byte. A file with a start marker but no end marker is refused (it would be ambiguous)."""
    block = f"{START}\n{draft.strip()}\n{END}\n"
    i = current.find(START)
    if i < 0:
        if not current:
            return block
        return current + ("\n" if current.endswith("\n") else "\n\n") + block
    j = current.find(END, i)
    if j < 0:
        raise UsageError(f"the file has `{START}` but no `{END}`; fix the markers by hand")
    tail = current[j + len(END):]
    return current[:i] + block + tail.lstrip("\n")


# --------------------------------------------------------------------------- gathering (I/O)


def gather(ctx: Any, key: str, name: str) -> Inputs:
    """The project's memories, session titles and successful build/test commands, redacted."""
    from memd.discovery import session_cwd
    from memd.keys import memory_key_for_session
    from memd.memory.scan import scan_dir
    from memd.redact.redactor import redact
    from memd.transcripts.spans import read_span
    from memd.transcripts.titles import meta_title  # MewCode's `.meta` title, for a session without a summary

    inp = Inputs(name)
    directory = ctx.home.project_memory(key)
    if directory.is_dir() and not directory.is_symlink():
        for m in sorted(scan_dir(directory, "project", key).memories, key=lambda m: (m.type, m.name.casefold())):
            inp.memories.append((m.type, redact(m.name), redact(" ".join(m.description.split())), redact(m.body.strip())))
    rows = ctx.conn.execute(
        "SELECT key, session_id, path, format, safe_offset FROM sessions WHERE is_subagent=0 "
        "ORDER BY last_ts DESC LIMIT ?", (MAX_SESSIONS,)).fetchall()  # fmt: skip
    calls: list[tuple[str, bool]] = []
    for r in rows:
        if r["key"] != key and memory_key_for_session(session_cwd(r["path"]), r["key"]) != key:
            continue
        title = _summary_title(ctx.home.summary_file(r["key"], r["session_id"])) or meta_title(Path(r["path"]))
        if title and len(inp.summaries) < MAX_SUMMARIES:
            inp.summaries.append(redact(title))
        try:
            calls += paired_bash(read_span(r["path"], 0, int(r["safe_offset"] or 0), r["format"]).pieces)
        except OSError:
            continue
    inp.commands = [(redact(c), n) for c, n in build_commands(calls)]
    return inp


def _summary_title(path: Path) -> str | None:
    try:
        if path.is_symlink() or not path.is_file():
            return None
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("# "):
                return " ".join(line[2:].split())[:160] or None
    except OSError:
        return None
    return None


def draft(ctx: Any, inp: Inputs) -> tuple[str, str]:
    """(the draft, the provider that wrote it): the strong model when there is one, else the offline form."""
    from memd.redact.redactor import redact

    if ctx.provider == "offline":
        return offline_draft(inp), "offline"
    reply = ctx.llm.complete(job="init", tier="strong", system=INIT_SYSTEM, user=model_prompt(inp), max_tokens=4000)
    text = reply.text.strip()
    if text.startswith("```"):
        text = text.strip("`").split("\n", 1)[-1]
    if START in text or END in text or not text:
        return offline_draft(inp), "offline"  # an answer that would break the markers is not used
    return redact(text) + "\n", "anthropic"


def write(ctx: Any, key: str, path: Path, new: str, before: str) -> dict[str, Any] | None:
    """Replace `path` atomically under the project's lock, as a history run (`memd undo` reverts it).
    Refused when the file changed since it was read (a person editing it meanwhile)."""
    from memd.fsutil import atomic_write
    from memd.history.writes import Recorder
    from memd.locks import acquire
    from memd.tree import Place

    place = Place.project(key)
    with acquire(ctx.home, [place], timeout=float(ctx.settings.memd.lock_timeout_seconds)):
        if _read(path) != before:
            raise UsageError(f"{path} changed while the draft was made; run `memd init` again")
        rec = Recorder(ctx.home, place, job="init", reason=f"memd init: {path.name}", now=ctx.now(),
                       directory=path.parent)  # fmt: skip
        rec.before(path)
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        atomic_write(path, new, mode=mode)
        return rec.commit()


def _read(path: Path) -> str:
    if path.is_symlink():
        raise UsageError(f"{path} is a symbolic link; memd does not write through links")
    try:
        return path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it ({exc})") from None


# --------------------------------------------------------------------------- the command


@command("init")
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("--agent", type=click.Choice(sorted(FILES)), help="Whose file (default: from the home's name).")
@click.option("--write", "do_write", is_flag=True, help="Write the draft into memd's block of the file.")
@click.option("--json", "as_json", is_flag=True, help="The draft and its inputs as JSON.")
@click.pass_context
def init_cmd(ctx: click.Context, path: str | None, agent: str | None, do_write: bool, as_json: bool) -> None:
    """Draft the project's instruction file (DEEPCODE.md, CLAUDE.md or MEWCODE.md) from its memories,
    session summaries and the build/test commands its sessions ran; print it as a diff, or --write it
    between memd's markers (undo with `memd undo`)."""
    from memd import settings as st
    from memd.job.context import make_context
    from memd.keys import canonical_root, key_for_root
    from memd.logs.events import configure, get_logger

    home = get_home(ctx)
    if path is not None and not Path(path).is_dir():
        raise UsageError(f"{path}: not a directory")
    root = canonical_root(path or ".")
    key = key_for_root(root)
    target = Path(root) / FILES[agent_of(home.root, agent)]
    s = st.load(home.settings_file)
    configure(home, level=s.memd.log_level, stderr_level="warning")
    jctx = make_context(home, s, log=get_logger("memd.init"))
    try:
        inp = gather(jctx, key, Path(root).name)
        text, provider = draft(jctx, inp)
        before = _read(target)
        after = merge_block(before, text)
        info = write(jctx, key, target, after, before) if do_write and after != before else None
    finally:
        jctx.conn.close()
    diff = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{target.name}",
                                        f"b/{target.name}"))  # fmt: skip
    if as_json:
        json_out({"file": str(target), "project_key": key, "provider": provider, "draft": text, "diff": diff,
                  "written": info is not None, "run": info.get("run") if info else None,
                  "inputs": {"memories": len(inp.memories), "summaries": inp.summaries,
                             "commands": [{"command": c, "runs": n} for c, n in inp.commands]}})  # fmt: skip
        return
    if not do_write:
        click.echo(diff or f"{target}: memd's block is up to date", nl=not diff)
        return
    if info is None:
        click.echo(f"{target}: memd's block is up to date")
    else:
        click.echo(f"wrote memd's block of {target} (run {info['run']}; `memd undo {info['run']}` reverts it)")
