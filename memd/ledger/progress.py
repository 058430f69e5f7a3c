"""The first scan's progress bar and its time-left estimate.

A first scan reads in bursts (a batch of sessions commits at once, workers finish batches
out of order), so the raw rate swings wildly at the start: click's own ETA divided the
bytes left by the first burst's rate and counted down from days during a four-second
scan. `Eta` says nothing until the estimate can mean something — `MIN_FRACTION` of the
bytes read and `MIN_SECONDS` elapsed — and then smooths the rate (an exponential moving
average over the bursts), so the figure moves steadily. Pure: the caller passes the time.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

MIN_FRACTION = 0.05
MIN_SECONDS = 2.0
SMOOTHING = 0.3  # weight of the newest burst's rate


@dataclass
class Eta:
    """Bytes done out of `total`, since `start` (seconds, any monotonic clock)."""

    total: int
    start: float
    done: int = 0
    rate: float | None = None  # bytes a second, smoothed
    _last_t: float | None = None
    _last_done: int = 0

    def advance(self, n: int, now: float) -> None:
        self.done = min(self.total, self.done + n)
        t0 = self.start if self._last_t is None else self._last_t
        if now > t0:
            burst = (self.done - self._last_done) / (now - t0)
            self.rate = burst if self.rate is None else SMOOTHING * burst + (1 - SMOOTHING) * self.rate
            self._last_t, self._last_done = now, self.done

    def seconds_left(self, now: float) -> float | None:
        """Time left, or None while too little is known (and once everything is read)."""
        if self.total <= 0 or self.done < MIN_FRACTION * self.total or self.done >= self.total or now - self.start < MIN_SECONDS:
            return None
        overall = self.done / (now - self.start)  # never more hopeful or gloomier than twice the average
        rate = min(max(self.rate or overall, overall / 2), overall * 2)
        return (self.total - self.done) / rate if rate > 0 else None


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds + 0.5)
    return f"about {s // 60} min {s % 60:02d} s left" if s >= 60 else f"about {s} s left"


class ScanBar:
    """click's bar on stderr with `Eta`'s estimate in place of click's."""

    def __init__(self, total: int, clock: Any = time.monotonic) -> None:
        import click  # noqa: PLC0415 - start-up: click's progress bar only for a long first scan

        self._clock = clock
        self.eta = Eta(total, clock())
        self._bar: Any = click.progressbar(length=total, label="reading transcripts", file=sys.stderr,
                                           show_eta=False, item_show_func=lambda text: text)  # fmt: skip
        self._bar.__enter__()

    def update(self, n: int) -> None:
        now = self._clock()
        self.eta.advance(n, now)
        self._bar.update(n, eta_text(self.eta.seconds_left(now)))

    def finish(self) -> None:
        self._bar.render_finish()
