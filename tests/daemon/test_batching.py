"""The main loop's batching decision (issue 27 point 2), driven with made-up monotonic times: the
first event of a quiet moment is handled at once, a burst is read in windows. No wall-time bound:
the latency itself is the bench's (bench/bench_daemon.py --issue27)."""

from __future__ import annotations

import queue
from typing import Any

from memd.daemon.batching import BURST_WINDOW_SECONDS as W
from memd.daemon.batching import gather_seconds, take_batch


def test_the_first_event_ever_is_handled_at_once() -> None:
    assert gather_seconds(now=12.0, last_batch_end=None) == 0.0


def test_the_first_event_of_a_quiet_moment_is_handled_at_once() -> None:
    assert gather_seconds(now=100.0, last_batch_end=100.0 - W) == 0.0
    assert gather_seconds(now=100.0, last_batch_end=40.0) == 0.0


def test_under_a_burst_a_batch_waits_for_the_rest_of_the_window() -> None:
    assert abs(gather_seconds(now=10.0 + 0.01, last_batch_end=10.0) - (W - 0.01)) < 1e-9
    assert gather_seconds(now=10.0, last_batch_end=10.0) == W


def test_the_wait_stays_within_zero_and_one_window() -> None:
    for last in (-5.0, 0.0, 9.99, 10.0, 10.5, 1e9):  # 10.5 and 1e9: an end after `now` (never on a monotonic clock)
        assert 0.0 <= gather_seconds(now=10.0, last_batch_end=last) <= W


def _simulate(arrivals: list[float], handle_seconds: float) -> list[tuple[float, list[float]]]:
    """The loop's schedule on a made-up clock: (start time, events) of each batch, as `_loop` does it."""
    batches: list[tuple[float, list[float]]] = []
    last_end: float | None = None
    i = 0
    now = 0.0
    while i < len(arrivals):
        now = max(now, arrivals[i])
        start = now + gather_seconds(now, last_end)
        taken = [t for t in arrivals[i:] if t <= start]
        i += len(taken)
        batches.append((start, taken))
        now = last_end = start + handle_seconds
    return batches


def test_lone_appends_are_each_handled_when_they_arrive() -> None:
    arrivals = [1.0, 2.5, 2.5 + 2 * W, 7.0]  # a human's pace: more than a window apart
    batches = _simulate(arrivals, handle_seconds=0.0002)
    assert batches == [(t, [t]) for t in arrivals]


def test_a_burst_is_read_in_one_batch_per_window_as_with_a_fixed_window() -> None:
    arrivals = [5.0 + i * 0.001 for i in range(2000)]  # 2,000 appends, one a millisecond
    handle = 0.0005
    batches = _simulate(arrivals, handle)
    assert batches[0] == (5.0, [5.0])  # the first at once
    assert sum(len(b) for _, b in batches) == 2000  # nothing dropped
    fixed_window_batches = 2.0 / (W + handle)  # what the old fixed 50 ms window did
    assert len(batches) <= fixed_window_batches + 2


class _RecordingQueue(queue.Queue[Any]):
    """A real queue that notes how each `get` was asked (blocking or not, and for how long)."""

    def __init__(self) -> None:
        super().__init__()
        self.gets: list[tuple[bool, float | None]] = []

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        self.gets.append((block, timeout))
        return super().get(block, timeout)


def test_a_batch_handled_at_once_takes_what_is_queued_and_waits_for_nothing() -> None:
    q = _RecordingQueue()
    for e in ("b", "c"):
        q.put(e)
    assert take_batch(q, "a", 0.0) == ["a", "b", "c"]
    assert q.gets and all(block is False for block, _ in q.gets)  # never a blocking wait


def test_a_batch_in_a_burst_gathers_until_its_window_ends() -> None:
    q = _RecordingQueue()
    q.put("b")
    assert take_batch(q, "a", 0.02) == ["a", "b"]
    blocking = [t for block, t in q.gets if block]
    assert blocking and all(t is not None and 0 < t <= 0.02 for t in blocking)
