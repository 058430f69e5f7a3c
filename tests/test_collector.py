"""`memd.collector.paused` from several threads at once (the daemon's jobs run on a thread pool: an
offline dream, a ledger scan and the index check's stats each pause the collector): the collector is
off while any pause is open, and on again after the last one when it was on before the first."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import pytest

import memd.collector as collector


class _Collector:
    """Stands for the `gc` module: its switch only, and a step run once between a caller's read of
    the switch and what it does next (where a thread switch can fall)."""

    def __init__(self) -> None:
        self.enabled = True
        self.between: list[Any] = []
        self.reads = 0

    def isenabled(self) -> bool:
        was = self.enabled
        self.reads += 1
        if self.reads == 2 and self.between:
            self.between.pop()()
        return was

    def disable(self) -> None:
        self.enabled = False

    def enable(self) -> None:
        self.enabled = True


def test_a_pause_that_ends_while_another_begins_leaves_the_collector_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread A pauses; thread B reads the switch (off: A's), A's pause ends (on), then B turns it off. B's
    pause must still end with the collector on, and it must be off while B's pause is open."""
    gc = _Collector()
    monkeypatch.setattr(collector, "gc", gc)
    first: AbstractContextManager[None] = collector.paused()
    first.__enter__()
    ended: list[bool] = []

    def end_first() -> None:
        first.__exit__(None, None, None)
        ended.append(True)

    gc.between.append(end_first)  # runs inside the second pause's start, if it reads the switch there
    with collector.paused():
        if not ended:
            end_first()
        assert not gc.enabled  # the second pause is still open
    assert gc.enabled  # the last pause ended: on again, as it was before the first


def test_nested_pauses_and_a_collector_off_before(monkeypatch: pytest.MonkeyPatch) -> None:
    gc = _Collector()
    monkeypatch.setattr(collector, "gc", gc)
    with collector.paused():
        with collector.paused():
            assert not gc.enabled
        assert not gc.enabled
    assert gc.enabled
    gc.enabled = False  # off before: stays off
    with collector.paused():
        assert not gc.enabled
    assert not gc.enabled


def test_a_pause_ends_on_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    gc = _Collector()
    monkeypatch.setattr(collector, "gc", gc)
    with pytest.raises(RuntimeError), collector.paused():
        raise RuntimeError("boom")
    assert gc.enabled
    with collector.paused():  # the next pause works as the first
        assert not gc.enabled
    assert gc.enabled
