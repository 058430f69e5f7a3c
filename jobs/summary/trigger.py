"""When a summary is due (SPEC §4): the ledger's facts, the last summary's cursor, the thresholds.

Pure: `summary_due` decides from numbers alone, so the decision is testable
without a ledger. `NAME` lives here because it keys the cursor the decision reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memd.settings import Settings

NAME = "summary"


@dataclass(frozen=True)
class Facts:
    """The ledger's numbers for one session, at its safe offset (never mid tool call)."""

    offset: int
    tokens: int
    tool_calls: int
    natural_break: bool
    tool_pending: int = 0


@dataclass(frozen=True)
class Cursor:
    """Where the last summary stopped: the transcript offset and the counts there."""

    offset: int
    tokens: int
    tool_calls: int
    sha256: str = ""
    paused: bool = False  # memory paused at `offset` (SPEC §3.4): nothing said while paused is summarised
    pause_uuid: str | None = None  # the record that last said a pause command (memd.ledger.pause.Follow)

    @classmethod
    def of(cls, value: dict[str, Any] | None) -> Cursor | None:
        """A stored cursor, or None when absent or malformed (then the next run starts over)."""
        if not isinstance(value, dict):
            return None
        try:
            nums = [value["offset"], value["tokens"], value["tool_calls"]]
        except KeyError:
            return None
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in nums):
            return None
        sha = value.get("sha256")
        uid = value.get("pause_uuid")
        return cls(nums[0], nums[1], nums[2], sha if isinstance(sha, str) else "", value.get("paused") is True,
                   uid if isinstance(uid, str) else None)  # fmt: skip

    def as_value(self) -> dict[str, Any]:
        return {"offset": self.offset, "tokens": self.tokens, "tool_calls": self.tool_calls, "sha256": self.sha256,
                "paused": self.paused, "pause_uuid": self.pause_uuid}  # fmt: skip


@dataclass(frozen=True)
class Thresholds:
    """The §4 settings, read once so the decision needs no Settings object."""

    enabled: bool = True
    min_init_tokens: int = 10_000
    min_update_tokens: int = 5_000
    tool_calls_between: int = 3

    @classmethod
    def of(cls, settings: Settings) -> Thresholds:
        # The master switch turns summaries off too; a pause (§3.4) keeps what it covers out (runner).
        return cls(
            enabled=bool(settings.memory.enabled) and bool(settings.memory.session_memory.enabled),
            min_init_tokens=int(settings.memory.session_memory.min_init_tokens),
            min_update_tokens=int(settings.memory.session_memory.min_update_tokens),
            tool_calls_between=int(settings.memory.session_memory.tool_calls_between),
        )


def summary_due(facts: Facts, cursor: Cursor | None, th: Thresholds) -> tuple[bool, str]:
    """Whether a summary (first or update) is due, and why or why not.

    Follows Claude Code's session memory: nothing before `minInitTokens`; then
    once `minUpdateTokens` more tokens than at the last summary have come, an
    update when `toolCallsBetween` tool calls were made since, or when the
    session is at a natural break (its last assistant turn called no tool).
    The first summary counts from zero. The facts are taken at the safe offset,
    so the decision never lands inside an unanswered tool call.
    """
    if not th.enabled:
        return False, "session memory is disabled (memory.sessionMemory.enabled)"
    if cursor is not None and facts.offset < cursor.offset:
        cursor = None  # the transcript was rewritten: start over
    if cursor is None and facts.tokens < th.min_init_tokens:
        return False, f"{facts.tokens} tokens, first summary at {th.min_init_tokens}"
    base_tokens, base_calls = (0, 0) if cursor is None else (cursor.tokens, cursor.tool_calls)
    grown = facts.tokens - base_tokens
    if grown < th.min_update_tokens:
        return False, f"{grown} new tokens, update at {th.min_update_tokens}"
    calls = facts.tool_calls - base_calls
    what = "first summary" if cursor is None else "update"
    if calls >= th.tool_calls_between:
        return True, f"{what}: {grown} new tokens and {calls} tool calls"
    if facts.natural_break and facts.tool_pending == 0:
        return True, f"{what}: {grown} new tokens at a natural break"
    return False, f"{calls} tool calls since the last summary (need {th.tool_calls_between}) and no natural break"
