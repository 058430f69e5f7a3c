"""Transcript formats and their counting rules (SPEC §7, §7.1–7.3): the public surface.

Reading is split over modules so each part is testable alone: `memd.transcripts.lines` yields complete
lines from a byte offset; `memd.transcripts.records` decodes Claude Code lines into typed records (or
normalises orjson's dicts into the same); `memd.transcripts.fold` folds them into a `memd.transcripts.tally.Tally`. This
module holds what they share and what the rest of memd reads: the formats' record types, slash
commands, and token arithmetic.

Counting rules (one place, documented in the README under `memd sessions`):

* human turn: a main-thread `user` record that is not a tool result, not
  `isMeta`, not `isCompactSummary`, and not a `<command-…>`/`<local-command-…>`
  wrapper (MewCode: a `user` record with text that is not a slash command);
* assistant turn: one API response of the main thread (distinct `message.id`;
  MewCode: one `assistant` record);
* tool call: a distinct main-thread `tool_use.id`; unanswered until a
  `tool_result` with that id arrives; an unanswered call is abandoned (no longer
  pending) once the conversation moves on past it: a later human turn, or a
  later assistant turn (a different `message.id`: parallel calls of one response
  share theirs, and their results may come after all of them); a call at the
  tail keeps waiting;
* safe offset (§7.2): the start of the line whose call is the oldest still
  pending, or the end of what was read when no call is pending;
* conversation tokens: characters of text, tool calls (name + JSON input) and
  tool results of the main thread, divided by four (§7.3); thinking, images and
  compaction summaries are not the conversation's own content;
* API usage: the last usage per `message.id`, sub-agents included; a copy in an
  `agent_progress` record counts only when no direct record of that id exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PAUSE_COMMANDS = frozenset({"/pause-memory", "/memory-pause", "/toggle-memory"})  # each toggles (the seed's)
RESUME_COMMAND = "/resume-memory"  # resumes, whatever the state: typing it twice never pauses
MEMORY_COMMANDS = PAUSE_COMMANDS | {RESUME_COMMAND}
CLAUDE_ONLY_TYPES = frozenset(
    {"summary", "file-history-snapshot", "progress", "queue-operation", "last-prompt", "system"}
)
# Every record type Claude Code is known to write (SPEC §7.0); others are counted as unrecognised.
CLAUDE_TYPES = CLAUDE_ONLY_TYPES | {
    "user", "assistant", "attachment", "api-request", "api-request-blob", "api-request-shape", "cost-state",
    "atis-latch", "tools-used", "mode", "custom-title", "agent-name", "pr-link",
}  # fmt: skip
# Known types the fold reads nothing from but the record itself (counted, with its timestamp).
NOTHING_TO_FOLD = CLAUDE_TYPES - {"user", "assistant", "progress", "system", "cost-state"}
SYSTEM_SUBTYPES = frozenset(
    {"compact_boundary", "local_command", "api_error", "stop_hook_summary", "turn_duration", "informational"}
)
UNKNOWN_TYPES_CAP = 50  # distinct unrecognised names kept per session: a hostile file cannot grow state
MEWCODE_ONLY_TYPES = frozenset({"system_prompt", "tool_result", "compression", "compact_boundary"})
MEWCODE_TYPES = MEWCODE_ONLY_TYPES | {"user", "assistant"}
COMMAND_PREFIXES = ("<command-", "<local-command-")
PRIO_DIRECT = 1
PRIO_COPY = 0


def detect_format(rec: dict[str, Any]) -> str | None:
    """'claude', 'mewcode', or None while a record does not tell."""
    if "message" in rec or "uuid" in rec or "sessionId" in rec:
        return "claude"
    t = rec.get("type")
    if not isinstance(t, str):  # a list or an object here would not even be hashable
        return None
    if t in MEWCODE_ONLY_TYPES or (t in ("user", "assistant") and "content" in rec):
        return "mewcode"
    if t in CLAUDE_ONLY_TYPES:
        return "claude"
    return None


def text_of(content: Any) -> str:
    """The plain text of a message content (a string, or `text` blocks of a list)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def slash_command(text: str) -> str | None:
    """The slash command a user record carries, if any (`<command-name>/x</command-name>` or `/x`)."""
    i = text.find("<command-name>")
    if i >= 0:
        j = text.find("</command-name>", i)
        if j > i:
            name = text[i + len("<command-name>") : j].strip()
            return name if name.startswith("/") else "/" + name
    stripped = text.strip()
    if stripped.startswith("/") and stripped[1:2].isalpha():
        return stripped.split(None, 1)[0]
    return None


def unknown_command(text: str) -> str | None:
    """`/x` from the line an agent without the command writes: "Unknown command: /x" (maybe wrapped
    in `<local-command-stdout>`), so a pause typed into such an agent is still honoured."""
    body = text.strip()
    if body.startswith("<local-command-stdout>"):
        body = body[len("<local-command-stdout>") :].removesuffix("</local-command-stdout>").strip()
    if body.startswith("Unknown command: /"):
        rest = body[len("Unknown command: ") :].split()
        return rest[0] if rest else None
    return None


@dataclass(frozen=True)
class PauseWord:
    """A pause or resume command as an agent recorded it (SPEC §3.4, §3.4a).

    `echo` marks "Unknown command: /x", the answer an agent without the command writes: when it
    answers the record that already said the command (its `parentUuid`), it is the same word."""

    command: str
    echo: bool = False

    @property
    def resume(self) -> bool:
        return self.command == RESUME_COMMAND


def pause_word(text: str) -> PauseWord | None:
    """The one parser of the pause (pure): the command a record's text says, or None.

    Every reader decides the pause from this (the ledger's fold, extraction's and the summary's
    spans, so `memd status` and `memd sessions` too), for every form the agents write:
    a `user` record with `<command-name>/pause-memory</command-name>` (a command the agent
    defines), the `system/local_command` record of Claude Code 2.1 whose content is
    `/pause-memory` — or `/pause-memory` followed by text, which the command swallows —,
    "Unknown command: /pause-memory" (Claude Code 2.1.112, maybe in `<local-command-stdout>`),
    MewCode's plain line, the aliases and `/resume-memory`. The child record that answers
    `<local-command-stdout>/pause-memory isn't available …` is no second command.
    """
    s = text.strip()
    if not s:
        return None
    echoed = unknown_command(s)
    if echoed is not None:
        return PauseWord(echoed, echo=True) if echoed in MEMORY_COMMANDS else None
    if s.startswith("<command-"):
        cmd = slash_command(s)
    elif s.startswith("/"):
        cmd = s.split(None, 1)[0]
    else:  # `<local-command-stdout>…` answers, prose that merely mentions a command
        return None
    return PauseWord(cmd) if cmd in MEMORY_COMMANDS else None


def follow_pause(paused: bool, last_uuid: str | None, word: PauseWord, uuid: Any, parent: Any) -> tuple[bool, str | None, bool]:
    """The state after `word` (pure): (paused, the uuid of the record that last said a command,
    whether the word counted). An echo answering the record that already counted is not counted
    again; `/resume-memory` resumes, the others toggle."""
    if word.echo and last_uuid is not None and parent == last_uuid:
        return paused, last_uuid, False
    paused = False if word.resume else not paused
    return paused, uuid if isinstance(uuid, str) else None, True


def tokens_of(chars: int) -> int:
    """About four characters a token (§7.3), rounded up."""
    return (chars + 3) // 4
