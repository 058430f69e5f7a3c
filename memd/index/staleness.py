"""How old a memory is, and the staleness warning that goes with it (SPEC §7b.2).

Its own module because the recall hook needs only these few lines: the rest of the renderer
(`memd.index.render`) brings the memory file parser and YAML with it, about 14 ms of a hook that
has 150 ms. Pure; imports only `math` and `datetime`.
"""

from __future__ import annotations

import math
from datetime import datetime

__all__ = ["DAY_SECONDS", "STALE_TEXT", "age_days", "days_note", "staleness_note"]

DAY_SECONDS = 86_400
STALE_TEXT = (
    "Memories are point-in-time observations, not live state — claims about code behavior "
    "or file:line citations may be outdated. Verify against current code before asserting as fact."
)


def age_days(mtime: float, now: float | datetime) -> int:
    """Whole days between `mtime` and `now` (never negative: clocks skew)."""
    now_ts = now.timestamp() if isinstance(now, datetime) else float(now)
    return max(0, math.floor((now_ts - mtime) / DAY_SECONDS))


def staleness_note(mtime: float, now: float | datetime) -> str | None:
    """The §7b.2 warning for a memory more than one day old, else None.

    Ages are whole days rounded down, as MewCode counts them, but the test is
    the literal "more than one day": 25 hours old is warned as "1 day old".
    """
    now_ts = now.timestamp() if isinstance(now, datetime) else float(now)
    if now_ts - mtime <= DAY_SECONDS:
        return None
    return days_note(max(1, age_days(mtime, now_ts)))


def days_note(days: int) -> str:
    """The warning of a memory `days` (≥ 1) whole days old, more than one day after it was written."""
    unit = "day" if days == 1 else "days"
    return f"This memory is {days} {unit} old. {STALE_TEXT}"
