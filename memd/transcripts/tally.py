"""Per-session counters (`Tally`) and API usage by message id (`UsageBook`), what `memd.transcripts.fold` fills
and the ledger keeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memd.transcripts.formats import UNKNOWN_TYPES_CAP


@dataclass
class Tally:
    """Per-session counters, folded record by record (main thread) plus usage (all threads).

    `carry` fields (pending tool ids and since when, the open assistant message,
    where the scan of an over-long unterminated line got to) are what must
    survive a restart to continue exactly where the last read stopped.
    """

    records: int = 0
    human_turns: int = 0
    assistant_turns: int = 0
    tool_calls: int = 0
    conv_chars: int = 0
    compactions: int = 0
    last_compaction_offset: int | None = None
    paused: bool = False
    pause_toggled_ts: str | None = None
    pause_offset: int | None = None
    pause_resumes: int = 0  # `/resume-memory` words counted: a CLI word before the last one is overruled
    first_ts: str | None = None
    last_ts: str | None = None
    safe_offset: int = 0
    safe_human_turns: int = 0
    safe_conv_chars: int = 0
    safe_tool_calls: int = 0
    natural_break: bool = False
    pending: list[str] = field(default_factory=list)
    pending_ts: str | None = None  # timestamp of the record whose call holds the safe offset back
    last_msg_id: str | None = None
    is_subagent: bool = False
    kind_decided: bool = False
    last_pause_uuid: str | None = None
    cost_state: tuple[int, int, int, int] | None = None
    unknown_types: dict[str, int] = field(default_factory=dict)
    # file (path under the home) -> [start of its over-long unterminated last line, scanned up to, fingerprint]
    long_tails: dict[str, list[Any]] = field(default_factory=dict)

    def to_carry(self) -> dict[str, Any]:
        carry: dict[str, Any] = {"pending": self.pending, "last_msg_id": self.last_msg_id, "last_pause_uuid": self.last_pause_uuid,
                 "cost_state": self.cost_state, "unknown_types": self.unknown_types}  # fmt: skip
        if self.pending and self.pending_ts is not None:
            carry["pending_ts"] = self.pending_ts
        if self.long_tails:
            carry["long_tails"] = self.long_tails
        return carry

    def note_unknown(self, name: str) -> None:
        if name in self.unknown_types or len(self.unknown_types) < UNKNOWN_TYPES_CAP:
            self.unknown_types[name] = self.unknown_types.get(name, 0) + 1


class UsageBook:
    """Last usage per `message.id` with source priority, plus running totals.

    `lookup` fetches an id seen in an earlier read (from state) so that an
    increment is applied as a delta and never double-counted.
    """

    def __init__(self, lookup: Any = None) -> None:
        self.entries: dict[str, tuple[int, tuple[int, int, int, int]]] = {}
        self.dirty: set[str] = set()
        self.total = [0, 0, 0, 0]
        self._lookup = lookup

    def _current(self, msg_id: str) -> tuple[int, tuple[int, int, int, int]] | None:
        got = self.entries.get(msg_id)
        if got is None and self._lookup is not None:
            got = self._lookup(msg_id)
            if got is not None:
                self.entries[msg_id] = got
        return got

    def put(self, msg_id: str, prio: int, new: tuple[int, int, int, int]) -> None:
        """Record the usage of a response; a later line of the same id replaces the earlier one."""
        old = self.entries.get(msg_id)
        if old is None and self._lookup is not None:
            old = self._current(msg_id)
        total = self.total
        if old is not None:
            if old[0] > prio or (old[0] == prio and old[1] == new):  # the usage each line of a response repeats
                return
            o = old[1]
            total[0] -= o[0]
            total[1] -= o[1]
            total[2] -= o[2]
            total[3] -= o[3]
        total[0] += new[0]
        total[1] += new[1]
        total[2] += new[2]
        total[3] += new[3]
        self.entries[msg_id] = (prio, new)
        self.dirty.add(msg_id)

    def add_anonymous(self, new: tuple[int, int, int, int]) -> None:
        """A usage without a message id cannot be deduplicated: it counts once as it is."""
        for i, v in enumerate(new):
            self.total[i] += v
