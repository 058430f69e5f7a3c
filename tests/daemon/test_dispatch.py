"""The retry and deferral policy on a fake clock (pure: no daemon, no sleeping)."""

from __future__ import annotations

from memd.daemon.dispatch import Dispatch, deferral_seconds
from memd.job.backoff import MAX_BACKOFF_SECONDS, backoff_seconds

JID = "extract:session:k:s1"


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff_seconds(n, 30) for n in (1, 2, 3, 4)] == [30, 60, 120, 240]
    assert backoff_seconds(10_000, 30) == MAX_BACKOFF_SECONDS  # no overflow on a long outage


def test_deferral_depends_on_why() -> None:
    assert deferral_seconds("lock busy: project:k") < deferral_seconds("no API key") == 300


def test_one_run_at_a_time_and_a_request_meanwhile_is_remembered() -> None:
    d = Dispatch()
    assert d.admit(JID, now=0.0)
    assert not d.admit(JID, now=0.1)  # running: remembered, not run twice
    nxt = d.finished(JID, "ok", "", now=1.0, retry_base=30)
    assert nxt.again and nxt.retry_in is None
    assert d.admit(JID, now=1.0)
    assert not d.finished(JID, "ok", "", now=2.0, retry_base=30).again


def test_failures_back_off_until_their_time_then_reset_on_success() -> None:
    d = Dispatch()
    now = 0.0
    waits = []
    for _ in range(3):
        assert d.admit(JID, now)
        nxt = d.finished(JID, "failed", "boom", now, retry_base=30)
        waits.append(nxt.retry_in)
        assert not d.admit(JID, now + nxt.retry_in - 0.001)  # type: ignore[operator]
        now += nxt.retry_in  # type: ignore[operator]
    assert waits == [30, 60, 120]
    assert d.admit(JID, now)
    assert d.finished(JID, "ok", "", now, retry_base=30).failures == 0
    assert d.admit(JID, now) and d.finished(JID, "failed", "x", now, 30).retry_in == 30  # counting starts over


def test_a_crash_outside_the_runner_counts_as_a_failure_and_deferral_does_not() -> None:
    d = Dispatch()
    d.admit(JID, 0.0)
    assert d.finished(JID, None, "", 0.0, retry_base=10).failures == 1
    d.admit(JID, 100.0)
    nxt = d.finished(JID, "deferred", "lock busy: global", 100.0, retry_base=10)
    assert nxt.retry_in == 5.0 and nxt.failures == 1
    assert not d.admit(JID, 104.9) and d.admit(JID, 105.0)
