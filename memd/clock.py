"""Time, injected: code that decides takes a `now`; only the edges read the clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


def iso(dt: datetime) -> str:
    """ISO 8601 UTC with milliseconds and `Z`, the form transcripts use, so strings compare."""
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> datetime | None:
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def process_started(monotonic_now: float | None = None) -> float:
    """When this process started, on `time.monotonic()`'s clock: a hook's budget counts from there.

    Linux gives the start in clock ticks since boot (`/proc/self/stat`, field 22, on the boot-time
    clock, so suspend is counted on both sides); elsewhere, or when that cannot be read, it is now
    (the budget then starts at this call, which is later, never earlier). At most a minute back.
    """
    import os  # noqa: PLC0415 - the shared nouns stay import-free
    import time  # noqa: PLC0415

    now = time.monotonic() if monotonic_now is None else monotonic_now
    try:
        with open("/proc/self/stat", "rb") as f:
            raw = f.read()
        start_ticks = int(raw[raw.rindex(b")") + 2 :].split()[19])
        elapsed = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - min(max(elapsed, 0.0), 60.0)
