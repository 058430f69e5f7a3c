"""Time, injected: code that decides takes a `now`; only the edges read the clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, tzinfo

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


def process_started(monotonic_now: float | None = None, pid: int | None = None) -> float:
    """When this process (or process `pid`: a hook the daemon answers) started, on `time.monotonic()`'s clock: a
    hook's budget counts from there.

    Linux gives the start in clock ticks since boot (`/proc/self/stat`, field 22, on the boot-time
    clock, so suspend is counted on both sides); elsewhere, or when that cannot be read, it is now
    (the budget then starts at this call, which is later, never earlier). At most a minute back.
    """
    import os  # noqa: PLC0415 - the shared nouns stay import-free
    import time  # noqa: PLC0415

    now = time.monotonic() if monotonic_now is None else monotonic_now
    try:
        with open(f"/proc/{'self' if pid is None else int(pid)}/stat", "rb") as f:
            raw = f.read()
        start_ticks = int(raw[raw.rindex(b")") + 2 :].split()[19])
        elapsed = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - min(max(elapsed, 0.0), 60.0)


def local_text(value: str | datetime | None, tz: tzinfo | None = None, *, seconds: bool = False) -> str:
    """A time for people: local (or `tz`), to the minute, with the zone's name ("2026-12-02 01:02 CET").

    `seconds` adds them (log lines). Text output only; JSON keeps the UTC ISO form. `value` is an ISO string or an aware
    datetime; anything unparsable comes back as it was (or "-" for none), never an error.
    """
    if value is None or value == "":
        return "-"
    dt = value if isinstance(value, datetime) else parse_iso(value)
    if dt is None:
        return str(value)
    loc = dt.astimezone(tz) if tz is not None else dt.astimezone()
    stamp = loc.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")
    return f"{stamp} {loc.tzname() or loc.strftime('%z')}"


_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def duration_text(seconds: float) -> str:
    """A duration in words, its two largest units ("9 d 6 h", "3 min 5 s", "40 s", "850 ms").

    Under a second it is milliseconds; never a bare count of minutes in the hundred thousands.
    """
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))} ms"
    left = int(seconds)
    i = next(i for i, (_, size) in enumerate(_UNITS) if left >= size)
    big, size = _UNITS[i]
    parts = [f"{left // size} {big}"]
    if i + 1 < len(_UNITS) and (rest := (left % size) // _UNITS[i + 1][1]):
        parts.append(f"{rest} {_UNITS[i + 1][0]}")
    return " ".join(parts)
