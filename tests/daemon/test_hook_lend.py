"""The daemon's kept connections and a SessionStart's `prepare` (memd/daemon/hook_server.py, issue 27 point 3): the
prompt that comes while the SessionStart's answer makes its project's scope ready waits for that set, made ready
for it, instead of opening a cold one (scope table, counts and scores taken again: tens of ms at 20,000
memories), and the preparing stops at its next step; without a preparing, a prompt never waits.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from memd.agent import candidates as cands
from memd.agent.hooks import Kept
from memd.daemon import hook_server
from memd.daemon.hook_server import HookServer
from memd.index.refresh import refresh_all
from memd.memory.file import render_memory, write_memory
from memd.tree import Home
from tests.procs import wait_for

KEY = "-work-shop"


class _Quiet:
    def __getattr__(self, _name: str) -> Any:
        return lambda *a, **k: None


def test_a_prompt_waits_for_the_set_a_sessionstart_prepares_and_stops_the_preparing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(hook_server, "PREPARED_WAIT_S", 60.0)  # the wait's bound is not what is tested: no timing here
    home = Home(tmp_path / "home")
    home.root.mkdir(parents=True)
    srv = HookServer(home, _Quiet())
    preparing = srv._lend()
    with srv._spare_lock:
        srv._preparing += 1  # as `_prepare` counts the set it holds
    got: list[Any] = []
    prompt = threading.Thread(target=lambda: got.append(srv._lend()))
    prompt.start()
    try:
        wait_for(lambda: srv._wanted == 1)  # the prompt waits, and says so (`prepare`'s stop)
        assert not got
        srv._give_back(preparing, prepared=True)
        prompt.join(30)
        assert got == [preparing] and srv._preparing == 0 and srv._wanted == 0
        assert srv._lend() is not preparing  # lent already: nothing prepares, a new set at once
    finally:
        srv.stop()


def test_preparing_scores_common_phrases_until_told_to_stop(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    for i in range(8):
        name = f"n-{i}"
        write_memory(home.project_memory(KEY), name, render_memory(name, f"{'deploy' if i % 3 == 0 else 'parser'} {i}",
                                                                  "project", "deploy now" if i % 2 else "later"))  # fmt: skip
    refresh_all(home)
    kept = Kept(home)
    try:
        kept._common = {'"deploy"': None}
        kept.warm(KEY, stop=lambda: True)
        kept.done()
        assert kept.scope(KEY).scores == {}
        kept.done()
        kept.warm(KEY)
        kept.done()
        scores = kept.scope(KEY).scores
        assert scores is not None and set(scores) == {'"deploy"'} and len(scores['"deploy"']) == 6
        assert cands.bm25_adds_up()
    finally:
        kept.close()
