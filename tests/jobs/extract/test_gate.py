"""The pure pieces of the decision: due-ness, pause, pre-gate, what the gate reads and its answer."""

from __future__ import annotations

import pytest

from jobs.extract.gate import gate_text, parse_gate, pre_gate
from jobs.extract.trigger import extract_due
from memd.ledger.pause import unpaused
from memd.transcripts.spans import Piece, render


@pytest.mark.parametrize("answer,expect", [("yes", True), ("No", False), ("YES.", True), (" no\n", False),
                                           ("maybe", None), ("Yes, because the user said", None),
                                           ("I think the answer could be yes", None), ("", None)])  # fmt: skip
def test_parse_gate(answer: str, expect: bool | None) -> None:
    assert parse_gate(answer) is expect


def test_pre_gate() -> None:
    tool_only = [Piece("tool_call", "{}", 1, name="Bash"), Piece("tool_result", "ok", 2)]
    assert pre_gate(tool_only) == (False, "no user text in the span (tool output only)")
    assert not pre_gate([Piece("human", "ok", 1)])[0]
    assert pre_gate([Piece("human", "Please always use tabs here", 1)])[0]


def test_unpaused_drops_what_was_said_while_paused() -> None:
    ps = [Piece("human", "a", 1), Piece("command", "", 2, name="/pause-memory"), Piece("human", "secret", 3),
          Piece("command", "", 4, name="/toggle-memory"), Piece("human", "b", 5)]  # fmt: skip
    kept, paused = unpaused(ps, False)
    assert [p.text for p in kept] == ["a", "b"] and paused is False
    kept, paused = unpaused(ps[:3], False)
    assert [p.text for p in kept] == ["a"] and paused is True


def test_extract_due_table() -> None:
    assert extract_due(1, 1, 10, True)[0]
    assert not extract_due(1, 2, 10, True)[0]
    assert not extract_due(5, 1, 0, True)[0]
    assert not extract_due(5, 1, 10, False)[0]


def test_gate_reads_people_not_tools_and_interruptions_are_not_user_text() -> None:
    ps = [Piece("human", "Please always squash merge.", 1), Piece("tool_call", '{"command": "git log"}', 2, name="Bash"),
          Piece("tool_result", "x" * 5000, 3), Piece("assistant", "y" * 1000, 4),
          Piece("human", "[Request interrupted by user for tool use]", 5)]  # fmt: skip
    text = gate_text(ps)
    assert "squash merge" in text and "git log" not in text and "x" * 100 not in text
    assert "y" * 300 in text and "y" * 301 not in text and "interrupted" not in text
    assert not pre_gate([Piece("human", "[Request interrupted by user for tool use]", 1)])[0]


def test_render_drops_tool_output_before_what_people_said() -> None:
    ps = [Piece("human", "first request about the parser", 1), Piece("tool_result", "z" * 3000, 2),
          Piece("assistant", "done", 3), Piece("human", "second request", 4)]  # fmt: skip
    out = render(ps, 200)
    assert "first request" in out and "second request" in out and "z" * 10 not in out
    assert out.startswith("[… 1 earlier messages omitted …]")


def test_a_chinese_statement_is_text_of_substance() -> None:
    """Issue 26: written without spaces, a Chinese statement counted as one word and never reached the gate."""
    assert pre_gate([Piece("human", "以后提交信息请用中文写。", 10, None)])[0]
    assert not pre_gate([Piece("human", "好的", 10, None)])[0]
