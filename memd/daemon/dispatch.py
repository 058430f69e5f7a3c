"""Which job runs are in flight and when a failed or deferred one may run again.

Pure: the daemon passes the time in (a monotonic reading) and acts on the
answer, so the retry and deferral policy is tested in milliseconds on a fake
clock. One id per `<job>:<place>`: a second request while it runs is
remembered and re-evaluated after, never run twice at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memd.job.backoff import backoff_seconds

LOCK_DEFERRAL_SECONDS = 5.0
OTHER_DEFERRAL_SECONDS = 300.0


def deferral_seconds(reason: str) -> float:
    """A held lock clears soon; a missing key or a spent budget does not."""
    return LOCK_DEFERRAL_SECONDS if reason.startswith("lock busy") else OTHER_DEFERRAL_SECONDS


@dataclass
class Dispatch:
    """Run ids scheduled or running, ids asked for again meanwhile, and when waiting ones may run."""

    active: set[str] = field(default_factory=set)
    rerun: set[str] = field(default_factory=set)
    not_before: dict[str, float] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)

    def admit(self, jid: str, now: float) -> bool:
        """Whether `jid` may be scheduled now; a request for a running id is remembered instead."""
        if jid in self.active:
            self.rerun.add(jid)
            return False
        if now < self.not_before.get(jid, 0.0):
            return False
        self.active.add(jid)
        return True

    def finished(self, jid: str, outcome: str | None, reason: str, now: float, retry_base: float) -> Finished:
        """Record how a run ended (None: it crashed outside the runner) and say what comes next."""
        self.active.discard(jid)
        again = jid in self.rerun
        self.rerun.discard(jid)
        delay: float | None = None
        if outcome is None or outcome == "failed":
            n = self.failures.get(jid, 0) + 1
            self.failures[jid] = n
            delay = backoff_seconds(n, retry_base)
        elif outcome == "deferred":
            delay = deferral_seconds(reason)
        else:
            self.failures.pop(jid, None)
            self.not_before.pop(jid, None)
        if delay is not None:
            self.not_before[jid] = now + delay
        return Finished(again=again, retry_in=delay, failures=self.failures.get(jid, 0))


@dataclass(frozen=True)
class Finished:
    """What follows a run: ask again at once (`again`), or look again in `retry_in` seconds."""

    again: bool
    retry_in: float | None
    failures: int
