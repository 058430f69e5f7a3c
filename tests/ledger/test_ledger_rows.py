"""A read's tool ids and usage entries in the ledger: the tool ids in one statement
(`memd.ledger.commit`), both stored as the transcript gives them and recognised by the next read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memd import state
from memd.discovery import discover_sessions
from memd.ledger import store as ledger
from memd.tree import Home

NOW = "2026-11-30T00:00:00.000Z"
# ids the ledger must keep as they are: NUL (which SQLite's JSON cuts short), quotes, backslashes,
# control characters, text that looks like an escape, characters beyond the BMP
ODD_IDS = ["a\x00b", 'q"uote', "back\\slash", "ctl\x01\n\t", "\\u0000", "é\U0001f600", "\u2028"]


def _assistant(mid: str, tid: str, output: int) -> dict[str, Any]:
    return {"type": "assistant", "uuid": f"a-{mid}-{output}", "timestamp": NOW,
            "message": {"id": mid, "role": "assistant",
                        "content": [{"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": "ls"}}],
                        "usage": {"input_tokens": 10, "output_tokens": output, "cache_creation_input_tokens": 0,
                                  "cache_read_input_tokens": 0}}}  # fmt: skip


def _result(tid: str) -> dict[str, Any]:
    return {"type": "user", "uuid": f"r-{tid}", "timestamp": NOW,
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid, "content": "ok"}]}}  # fmt: skip


def _home(tmp_path: Path, records: list[dict[str, Any]]) -> tuple[Home, Path]:
    proj = tmp_path / "home" / "projects" / "-p"
    proj.mkdir(parents=True)
    path = proj / "s1.jsonl"
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records))
    return Home(tmp_path / "home"), path


def _ingest(h: Home, trace: list[str] | None = None) -> dict[str, Any]:
    conn = state.connect(h.state_db)
    try:
        if trace is not None:
            conn.set_trace_callback(trace.append)
        for sf in discover_sessions(h):
            ledger.ingest(conn, sf, NOW)
        conn.set_trace_callback(None)
        row = conn.execute("SELECT tool_calls, usage_output FROM sessions").fetchone()
        return {
            "tool_calls": row[0], "usage_output": row[1],
            "tools": sorted(r[0] for r in conn.execute("SELECT tool_id FROM seen_tools")),
            "usage": sorted(tuple(r) for r in conn.execute(
                "SELECT msg_id, prio, input, output, cache_creation, cache_read FROM usage_msgs")),
        }  # fmt: skip
    finally:
        conn.close()


def test_a_reads_tool_ids_go_in_one_statement(tmp_path: Path) -> None:
    """Thirty responses, each with its usage and one call: one insert of tool ids, not one a row (a
    500 MB first scan writes about 33,000 of them)."""
    records: list[dict[str, Any]] = []
    for i in range(30):
        records += [_assistant(f"msg_{i}", f"toolu_{i}", i + 1), _result(f"toolu_{i}")]
    h, _path = _home(tmp_path, records)
    trace: list[str] = []
    got = _ingest(h, trace)
    assert got["tool_calls"] == 30 and len(got["tools"]) == 30 and len(got["usage"]) == 30
    assert got["usage_output"] == sum(range(1, 31))
    assert sum("INTO seen_tools" in s for s in trace) == 1, trace


def test_odd_ids_are_kept_as_read_and_known_to_the_next_read(tmp_path: Path) -> None:
    """Every id is stored as the transcript has it (one holding U+0000 too: it goes row by row); an
    append that repeats a response and its call counts neither again, and a later line of the same
    response replaces its usage instead of adding to it."""
    h, path = _home(tmp_path, [r for i, x in enumerate(ODD_IDS) for r in (_assistant(x, x, 1 + i), _result(x))])
    first = _ingest(h)
    assert first["tools"] == sorted(ODD_IDS)
    assert first["usage"] == sorted((x, 1, 10, 1 + i, 0, 0) for i, x in enumerate(ODD_IDS))
    assert first["tool_calls"] == len(ODD_IDS)
    with path.open("ab") as f:  # each response again, its output grown by 100: the call is the same one
        for i, x in enumerate(ODD_IDS):
            f.write(json.dumps(_assistant(x, x, 101 + i)).encode() + b"\n")
    again = _ingest(h)
    assert again["tool_calls"] == len(ODD_IDS)
    assert again["tools"] == first["tools"]
    assert again["usage"] == sorted((x, 1, 10, 101 + i, 0, 0) for i, x in enumerate(ODD_IDS))
    assert again["usage_output"] == sum(101 + i for i in range(len(ODD_IDS)))
