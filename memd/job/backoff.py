"""The one retry policy after failures: exponential backoff from a base, capped.

Every retry in memd waits by this rule, with its own base and cap: a failed job run
(`memd.daemon.dispatch`: `memd.retrySeconds`, capped at an hour) and a failed sync
(`memd.sync.run`: 15 s, capped at the sync interval). Pure; `failures` counts the
consecutive failures so far (1 after the first).
"""

from __future__ import annotations

MAX_BACKOFF_SECONDS = 3600.0


def backoff_seconds(failures: int, base: float = 30.0, cap: float = MAX_BACKOFF_SECONDS) -> float:
    """base, 2×base, 4×base … after `failures` consecutive failures, never past `cap`."""
    return float(min(cap, base * 2 ** max(0, min(failures - 1, 32))))
