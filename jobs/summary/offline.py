"""The offline provider: deterministic sections from the transcript, no network, no model (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from jobs.summary.document import Summary, one_line
from memd.transcripts.spans import Piece

# What a summary is about; slash commands and compaction markers alone are not.
TALK = frozenset({"human", "assistant", "tool_call", "tool_result"})
_CORRECTION = re.compile(
    r"^(no\b|nope\b|don'?t\b|do not\b|stop\b|wrong\b|that'?s (?:not|wrong)\b|actually\b|instead\b|not like that\b)",
    re.IGNORECASE,
)
SHELL_TOOLS = frozenset({"bash", "shell", "run_shell_command", "run_command", "execute_command", "terminal", "exec"})
PATH_KEYS = ("file_path", "notebook_path", "path", "pattern")
# User records an agent writes itself (background task notices, reminders): not requests.
MACHINE_PREFIXES = ("<task-notification>", "<system-reminder>", "[Request interrupted")


def _bullets(body: str) -> list[str]:
    return [x for x in (body or "").splitlines() if x.startswith("- ")]


def _merge_bullets(old: Iterable[str], new: Iterable[str], keep: int) -> list[str]:
    """Unique bullets, most recently mentioned last, the newest `keep` of them."""
    out: dict[str, None] = {}
    for b in [*old, *new]:
        out.pop(b, None)
        out[b] = None
    items = list(out)
    return items[-keep:]


def _stamp(ts: str | None) -> str:
    """`2025-10-05T12:34:56.789Z` → `2025-10-05 12:34 `: enough to place a worklog line."""
    if not ts or len(ts) < 16 or ts[10] != "T":
        return ""
    return f"{ts[:10]} {ts[11:16]} "


def _paths_of(tool: str | None, inp: Any) -> list[str]:
    """Paths a tool call names. A `pattern` is a path only for glob tools (Grep's is a regex)."""
    if not isinstance(inp, dict):
        return []
    out = []
    keys = PATH_KEYS if "glob" in (tool or "").lower() else tuple(k for k in PATH_KEYS if k != "pattern")
    for k in keys:
        v = inp.get(k)
        if isinstance(v, str) and v.strip():
            out.append(v.strip())
    edits = inp.get("edits")
    if isinstance(edits, list):
        for e in edits:
            if isinstance(e, dict) and isinstance(e.get("file_path"), str):
                out.append(e["file_path"])
    return out


def _command_of(p: Piece) -> str | None:
    if p.kind != "tool_call" or (p.name or "").lower() not in SHELL_TOOLS or not isinstance(p.tool_input, dict):
        return None
    cmd = p.tool_input.get("command", p.tool_input.get("cmd"))
    if isinstance(cmd, list):
        cmd = " ".join(str(c) for c in cmd)
    return cmd.strip() if isinstance(cmd, str) and cmd.strip() else None


def _code(text: str) -> str:
    """Inline code that survives backticks inside it."""
    tick = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{tick}{pad}{text}{pad}{tick}"


def _worklog_lines(pieces: Sequence[Piece]) -> list[str]:
    """One terse line per human turn: when, what was asked, how many tool calls it took."""
    lines: list[str] = []
    head: tuple[str, str] | None = None
    calls = 0
    errors = 0

    def close() -> None:
        if head is None and calls == 0:
            return
        stamp, what = head if head is not None else ("", "(continued)")
        extra = [f"{calls} tool call{'s' if calls != 1 else ''}"] if calls else []
        if errors:
            extra.append(f"{errors} failed")
        lines.append(f"- {stamp}{what}" + (f" ({', '.join(extra)})" if extra else ""))

    for p in pieces:
        if p.kind == "human":
            close()
            head, calls, errors = (_stamp(p.ts), one_line(p.text, 120)), 0, 0
        elif p.kind == "tool_call":
            calls += 1
        elif p.kind == "tool_result" and p.is_error:
            errors += 1
    close()
    return lines


def conversation_of(pieces: Sequence[Piece]) -> list[Piece]:
    """What a summary is about: the talk, with slash commands that carry a request made requests.

    `/skill do X` is how a user asks for X through a skill; `/clear` alone says nothing.
    """
    out = []
    for p in pieces:
        if p.kind in TALK:
            out.append(p)
        elif p.kind == "command":
            args = _command_args(p.text)
            if args:
                out.append(Piece("human", f"{p.name or ''} {args}".strip(), p.end, p.ts))
    return out


def _command_args(text: str) -> str:
    m = re.search(r"<command-args>(.*?)(?:</command-args>|$)", text, flags=re.DOTALL)
    if m:
        return m.group(1).strip()
    if text.startswith("/") and " " in text.strip():  # MewCode: a plain `/name args`
        return text.strip().split(None, 1)[1]
    return ""


def requests(pieces: Sequence[Piece]) -> list[Piece]:
    """Human turns that state something: not the agent's own notices delivered as user records."""
    return [p for p in pieces if p.kind == "human" and not p.text.lstrip().startswith(MACHINE_PREFIXES)]


def offline_sections(pieces: Sequence[Piece]) -> dict[str, list[str] | str]:
    """What the transcript itself says, section by section, without a model."""
    humans = requests(pieces)
    replies = [p for p in pieces if p.kind == "assistant"]
    files: list[str] = []
    commands: list[str] = []
    errors: list[str] = []
    for p in pieces:
        if p.kind == "tool_call":
            files.extend(f"- {_code(one_line(x, 200))}" for x in _paths_of(p.name, p.tool_input))
            cmd = _command_of(p)
            if cmd:
                commands.append(f"- {_code(one_line(cmd, 200))}")
        elif p.kind == "tool_result" and p.is_error:
            errors.append(f"- {_stamp(p.ts)}tool error: {one_line(p.text, 200)}")
        elif p.kind == "human" and _CORRECTION.match(p.text.strip()):
            errors.append(f"- {_stamp(p.ts)}user correction: {one_line(p.text, 200)}")
    state = ""
    if humans or replies:
        parts = []
        if humans:
            parts.append(f"- Last request: {one_line(humans[-1].text, 600)}")
        if replies:
            parts.append(f"- Last reply: {one_line(replies[-1].text, 1200)}")
        state = "\n".join(parts)
    return {
        "state": state,
        "task": [f"- {one_line(p.text, 600)}" for p in humans],
        "files": files,
        "commands": commands,
        "errors": errors,
        "worklog": _worklog_lines(pieces),
    }


def offline_summary(previous: Summary | None, pieces: Sequence[Piece], session_id: str) -> Summary:
    """Deterministic sections merged with the previous summary: no network, no model.

    Title from the first human request; files from tool inputs; commands from
    shell calls; errors from failed tool results and the user's corrections;
    a worklog line per human turn; the current state from the last request and
    reply. Learnings and key results need judgement, so they are carried over.
    """
    prev = previous or Summary()
    got = offline_sections(pieces)
    humans = requests(pieces)
    title = prev.title or (one_line(humans[0].text, 80) if humans else f"Session {session_id[:8]}")
    s: dict[str, str] = {}
    s["state"] = str(got["state"]) or prev.body("state")
    old_task = _bullets(prev.body("task"))
    new_task = list(got["task"])
    # The first request is the task as specified; later ones refine it. Keep the first and the latest.
    task = _merge_bullets(old_task, new_task, 10_000)
    s["task"] = "\n".join(task[:1] + task[1:][-15:])
    s["files"] = "\n".join(_merge_bullets(_bullets(prev.body("files")), got["files"], 60))
    s["commands"] = "\n".join(_merge_bullets(_bullets(prev.body("commands")), got["commands"], 40))
    s["errors"] = "\n".join(_merge_bullets(_bullets(prev.body("errors")), got["errors"], 30))
    s["learnings"] = prev.body("learnings")
    s["results"] = prev.body("results")
    old_log = [x for x in prev.body("worklog").splitlines() if x.strip()]
    s["worklog"] = "\n".join([*old_log, *got["worklog"]])
    return Summary(title=title, sections=s)

