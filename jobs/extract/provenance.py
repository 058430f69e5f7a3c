"""Where a memory came from (issue 13): the `metadata.sources` entries extraction passes to the
write path — the session, the uuids of the user's records (Claude Code), the byte offsets where
those records end in the transcript (every format; MewCode records have no uuid), and the time of
the first. `memd why` reads them back."""

from __future__ import annotations

from typing import Any

from jobs.extract.gate import INTERRUPTED
from memd.transcripts.spans import Piece


def typed(pieces: list[Piece]) -> list[Piece]:
    """What the user typed: human pieces, without Claude Code's "[Request interrupted…]" markers."""
    return [p for p in pieces if p.kind == "human" and not p.text.lstrip().startswith(INTERRUPTED)]


def sources(session_id: str, pieces: list[Piece]) -> list[dict[str, Any]]:
    """One `metadata.sources` entry for these pieces of one session (none for no pieces)."""
    if not pieces:
        return []
    first_ts = next((p.ts for p in pieces if p.ts), None)
    return [{"session": session_id, "uuids": [p.uuid for p in pieces if p.uuid],
             "offsets": [p.end for p in pieces], "ts": first_ts}]  # fmt: skip
