"""When the daemon's main loop handles what the watcher reported: at once in a quiet moment, in
windows under a burst (issue 27: an append is seen at once).

The decision is a pure function of monotonic times so that a test can drive it; the loop
(memd.daemon.loop) feeds it `time.monotonic()` and the end of the last batch that held file events.

Invariants:
* The first event of a quiet moment (no file batch ended within the last `window` seconds, or
  none yet) is handled at once: gathering time 0. Whatever is already queued at that instant is
  taken along, nothing more is waited for, so a lone append reaches the ledger in the time the
  ingest takes.
* While events keep coming, a batch starts no earlier than `window` after the previous one ended,
  so a burst is read in at most one batch per `window` plus the handling time, as it was when every
  batch waited a fixed window: a burst's CPU per byte does not grow.
* The gathering time is never negative and never longer than `window`.
"""

from __future__ import annotations

import queue
import time
from typing import TypeVar

BURST_WINDOW_SECONDS = 0.05

T = TypeVar("T")


def gather_seconds(now: float, last_batch_end: float | None, window: float = BURST_WINDOW_SECONDS) -> float:
    """How long to keep gathering events after the first of a batch was taken at `now`.

    0 in a quiet moment (`last_batch_end` is None or at least `window` ago); otherwise the rest of
    the window that began when the last batch ended. Clock steps are harmless: monotonic times
    only, and the result is clamped to [0, window].
    """
    if last_batch_end is None:
        return 0.0
    return min(window, max(0.0, last_batch_end + window - now))


def take_batch(events: queue.Queue[T], first: T, gather: float) -> list[T]:
    """`first`, everything already queued behind it, and what arrives within `gather` seconds.

    With `gather` 0 nothing is waited for: the events that came in while the previous batch was
    being handled are coalesced into this one, and the batch is handled at once.
    """
    batch = [first]
    deadline = time.monotonic() + gather
    while True:
        left = deadline - time.monotonic()
        try:
            batch.append(events.get(timeout=left) if left > 0 else events.get_nowait())
        except queue.Empty:
            return batch
