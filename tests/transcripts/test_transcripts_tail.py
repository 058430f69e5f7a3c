"""A tool call that never gets its result (issue 16): it holds the safe offset back only while
it is the tail; once the conversation moves on past it, it is abandoned."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from memd import state
from memd.discovery import discover_sessions
from memd.ledger import query as ledgerquery
from memd.ledger import store as ledger
from memd.ledger.sessions import session_json
from memd.tree import Home

NOW = "2026-11-30T00:00:00.000Z"


def ts(i: int) -> str:
    return f"2026-11-29T10:{i // 60:02d}:{i % 60:02d}.000Z"


def human(i: int, text: str = "please go on") -> dict[str, Any]:
    return {"type": "user", "uuid": f"u{i}", "timestamp": ts(i), "message": {"role": "user", "content": text}}


def call(i: int, mid: str, *tids: str) -> dict[str, Any]:
    blocks = [{"type": "tool_use", "id": t, "name": "Bash", "input": {"command": f"sleep {t}"}} for t in tids]
    return {"type": "assistant", "uuid": f"a{i}", "timestamp": ts(i),
            "message": {"id": mid, "role": "assistant", "content": blocks,
                        "usage": {"input_tokens": 5, "output_tokens": 1}}}  # fmt: skip


def say(i: int, mid: str, text: str = "done") -> dict[str, Any]:
    return {"type": "assistant", "uuid": f"a{i}", "timestamp": ts(i),
            "message": {"id": mid, "role": "assistant", "content": [{"type": "text", "text": text}]}}  # fmt: skip


def result(i: int, *tids: str) -> dict[str, Any]:
    return {"type": "user", "uuid": f"r{i}", "timestamp": ts(i), "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": t, "content": "ok"} for t in tids]}}  # fmt: skip


def lines(recs: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in recs)


def offsets(data: bytes) -> list[int]:
    """Offset of the start of each line, and the end."""
    out = [0]
    for line in data.splitlines(keepends=True):
        out.append(out[-1] + len(line))
    return out


def ingest(home: Path) -> dict[str, Any]:
    h = Home(home)
    conn = state.connect(h.state_db)
    try:
        for sf in discover_sessions(h):
            ledger.ingest(conn, sf, NOW)
        (row,) = ledger.session_rows(conn)
        return {**session_json(row), "safe_human_turns": row["safe_human_turns"], "safe_tool_calls": row["safe_tool_calls"]}
    finally:
        conn.close()


def write(home: Path, data: bytes, rel: str = "projects/k/s.jsonl") -> Path:
    p = home / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


def test_a_call_killed_mid_tool_is_abandoned_by_the_next_human_turn(home: Path) -> None:
    data = lines([human(0), call(1, "m1", "toolu_a"), human(2, "I restarted you, carry on"), say(3, "m2")])
    write(home, data)
    row = ingest(home)
    assert row["tool_calls"] == 1 and row["tool_calls_pending"] == 0
    assert row["safe_offset"] == len(data)
    assert row["human_turns"] == 2 and row["assistant_turns"] == 2


def test_a_call_is_abandoned_by_a_later_different_response(home: Path) -> None:
    data = lines([human(0), call(1, "m1", "toolu_a"), say(2, "m2", "the session resumed")])
    write(home, data)
    row = ingest(home)
    assert row["tool_calls_pending"] == 0 and row["safe_offset"] == len(data)


def test_parallel_calls_of_one_response_wait_for_all_their_results(home: Path) -> None:
    recs = [human(0), call(1, "m1", "toolu_a"), call(2, "m1", "toolu_b"), result(3, "toolu_a")]
    data = lines(recs)
    p = write(home, data)
    row = ingest(home)
    starts = offsets(data)
    assert row["tool_calls"] == 2 and row["tool_calls_pending"] == 1  # the sibling is not abandoned
    assert row["safe_offset"] == starts[1]  # held at the line that made the first call
    with open(p, "ab") as fh:
        fh.write(lines([result(4, "toolu_b"), say(5, "m2")]))
    row = ingest(home)
    assert row["tool_calls_pending"] == 0 and row["safe_offset"] == p.stat().st_size


def test_a_long_running_tool_at_the_tail_still_waits(home: Path) -> None:
    data = lines([human(0), say(1, "m0", "let me look"), human(2), call(3, "m1", "toolu_slow")])
    write(home, data)
    row = ingest(home)
    assert row["tool_calls_pending"] == 1
    assert row["safe_offset"] == offsets(data)[3]
    assert row["safe_human_turns"] == 2 and row["safe_tool_calls"] == 0


def test_abandonment_holds_across_restarts(home: Path) -> None:
    first = lines([human(0), call(1, "m1", "toolu_a")])
    p = write(home, first)
    assert ingest(home)["tool_calls_pending"] == 1
    with open(p, "ab") as fh:  # a later run of the agent, read by a later memd
        fh.write(lines([human(2, "back again"), call(3, "m2", "toolu_b")]))
    row = ingest(home)
    assert row["tool_calls_pending"] == 1  # only the new call waits
    assert row["safe_offset"] == len(first) + len(lines([human(2, "back again")]))
    with open(p, "ab") as fh:  # the abandoned call's result arrives after all: nothing to undo
        fh.write(lines([result(4, "toolu_a"), result(5, "toolu_b")]))
    row = ingest(home)
    assert row["tool_calls"] == 2 and row["tool_calls_pending"] == 0 and row["safe_offset"] == p.stat().st_size


def test_an_abandoned_id_seen_again_is_not_a_new_call(home: Path) -> None:
    data = lines([call(0, "m1", "toolu_a"), human(1), call(2, "m2", "toolu_a"), result(3, "toolu_a")])
    write(home, data)
    assert ingest(home)["tool_calls"] == 1


def test_mewcode_calls_are_abandoned_the_same_way(home: Path) -> None:
    def rec(t: str, content: Any, **kw: Any) -> dict[str, Any]:
        return {"type": t, "content": content, "timestamp": "2026-10-01T09:00:00Z", **kw}

    tool = {"type": "tool_use", "id": "call_1", "name": "bash", "input": {"command": "make"}}
    recs = [rec("user", "build it"), rec("assistant", [tool]), rec("user", "never mind, it hung"),
            rec("assistant", "ok"), rec("assistant", [{**tool, "id": "call_2"}])]  # fmt: skip
    data = lines(recs)
    write(home, data, "projects/k/.mewcode/sessions/m.jsonl")
    row = ingest(home)
    assert row["format"] == "mewcode" and row["tool_calls"] == 2
    assert row["tool_calls_pending"] == 1 and row["safe_offset"] == offsets(data)[4]  # the tail waits


def test_held_back_lists_sessions_waiting_on_a_call_with_its_time(home: Path) -> None:
    waiting = lines([human(0), call(7, "m1", "toolu_a")])
    write(home, waiting, "projects/k/a.jsonl")
    write(home, lines([human(0), call(1, "m1", "toolu_b"), human(2)]), "projects/k/b.jsonl")
    h = Home(home)
    conn = state.connect(h.state_db)
    try:
        for sf in discover_sessions(h):
            ledger.ingest(conn, sf, NOW)
        held = ledgerquery.held_back(conn)
    finally:
        conn.close()
    assert held == [{"key": "k", "session_id": "a", "safe_offset": offsets(waiting)[1], "read_offset": len(waiting),
                     "held_bytes": len(waiting) - offsets(waiting)[1], "pending": 1, "since": ts(7)}]  # fmt: skip


@pytest.mark.parametrize("seed", range(6))
def test_any_chunking_gives_the_same_ledger(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    recs: list[dict[str, Any]] = []
    open_calls: list[str] = []
    n = 0
    for i in range(40):
        k = rng.random()
        if k < 0.2:
            recs.append(human(i, rng.choice(["go", "stop that", "/pause-memory", "<command-name>/clear</command-name>"])))
        elif k < 0.5:
            mid = f"m{n // rng.choice([1, 2])}"
            n += 1
            tids = [f"toolu_{i}_{j}" for j in range(rng.randint(1, 3))]
            recs.append(call(i, mid, *tids))
            open_calls.extend(tids)
        elif k < 0.75 and open_calls:
            done = rng.sample(open_calls, rng.randint(1, len(open_calls)))
            open_calls = [c for c in open_calls if c not in done]
            recs.append(result(i, *done))
        else:
            recs.append(say(i, f"m{n}"))
            n += 1 if rng.random() < 0.7 else 0
    data = lines(recs)
    one, pieces = tmp_path / "one", tmp_path / "pieces"
    write(one, data)
    expect = ingest(one)
    target = write(pieces, b"")
    cuts = sorted(rng.sample(range(1, len(data)), 12))
    for a, b in zip([0, *cuts], [*cuts, len(data)]):
        with open(target, "ab") as fh:
            fh.write(data[a:b])
        ingest(pieces)
    got = ingest(pieces)
    assert {**got, "path": ""} == {**expect, "path": ""}


def test_an_answered_id_seen_again_is_not_a_new_call_in_one_read_either(home: Path) -> None:
    """Distinct ids, in one read as across reads (the one-shot read used to count this call twice)."""
    data = lines([call(0, "m1", "toolu_a"), result(1, "toolu_a"), call(2, "m2", "toolu_a"), result(3, "toolu_a")])
    write(home, data)
    assert ingest(home)["tool_calls"] == 1
