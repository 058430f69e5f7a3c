"""When extraction is due (SPEC §3.1): every `extractEveryTurns` human turns (pure).

`NAME` lives here because it keys the cursor the decision reads.
"""

from __future__ import annotations

NAME = "extract"


def extract_due(new_turns: int, every: int, new_bytes: int, enabled: bool) -> tuple[bool, str]:
    """Pure: due once `every` human turns have come since the cursor (§3.1)."""
    if not enabled:
        return False, "memory disabled"
    if new_bytes <= 0:
        return False, "nothing new"
    if new_turns < every:
        return False, f"{new_turns}/{every} human turns since the last run"
    return True, f"{new_turns} new human turns"
