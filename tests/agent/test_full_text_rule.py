"""Issue 26 pt 6: what memd renders before the model — the drawer render, the session-start block,
recall's output — says to read a memory's file before answering from it; one sentence, one constant."""

from __future__ import annotations

import json
from pathlib import Path

from memd.memory.reading import FULL_TEXT_RULE
from memd.tree import Home
from tests.agent.test_hook_commands import context_of, event, hook, world  # noqa: F401 - the fixture

assert "never conclude from a snippet" in FULL_TEXT_RULE


def test_the_drawer_render_the_context_block_and_recall_carry_the_rule(world: tuple[Home, Path]) -> None:  # noqa: F811
    home, proj = world
    assert FULL_TEXT_RULE in home.drawer_render.read_text(encoding="utf-8")
    rc, out, err = hook(home, "context", "--hook", stdin=json.dumps(event(proj, home, "SessionStart", source="startup")))
    assert rc == 0, err
    assert context_of(out, "SessionStart").count(FULL_TEXT_RULE) >= 1
    prompt = event(proj, home, "UserPromptSubmit", prompt="How do we deploy the shop?")
    rc, out, err = hook(home, "recall", "--hook", stdin=json.dumps(prompt))
    assert rc == 0, err
    recalled = context_of(out, "UserPromptSubmit")
    assert "deploy-fridays" in recalled and FULL_TEXT_RULE in recalled


def test_the_drawer_over_its_budget_still_carries_the_rule(world: tuple[Home, Path]) -> None:  # noqa: F811
    from memd.index.refresh import refresh_all  # noqa: PLC0415

    home, _proj = world
    refresh_all(home, max_bytes_drawer=200)
    text = home.drawer_render.read_text(encoding="utf-8")
    assert "only its index is shown" in text and FULL_TEXT_RULE in text
