"""The transcript folder: MewCode, pause commands, format detection, line reading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from memd import state
from memd.discovery import discover_sessions
from memd.ledger import pause
from memd.ledger import store as ledger
from memd.ledger.sessions import session_json
from memd.transcripts.formats import detect_format, slash_command
from memd.transcripts.lines import read_lines
from memd.tree import Home

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mewcode"
NOW = "2026-11-30T00:00:00.000Z"


def _one(home: Path) -> dict:
    h = Home(home)
    conn = state.connect(h.state_db)
    for sf in discover_sessions(h):
        ledger.ingest(conn, sf, NOW)
    rows = [session_json(r) for r in ledger.session_rows(conn)]
    conn.close()
    assert len(rows) == 1
    return rows[0]


def test_mewcode_session(home: Path) -> None:
    d = home / "projects" / "k" / ".mewcode" / "sessions"
    d.mkdir(parents=True)
    shutil.copy(FIXTURES / "mew-0001.jsonl", d)
    shutil.copy(FIXTURES / "mew-0001.meta", d)
    row = _one(home)
    assert row["format"] == "mewcode"
    assert row["records"] == 14
    assert row["human_turns"] == 3  # two /pause-memory commands are not turns
    assert row["assistant_turns"] == 4
    assert row["tool_calls"] == 3 and row["tool_calls_pending"] == 1
    assert row["compactions"] == 2  # the legacy `compression` marker and a compact_boundary
    assert row["paused"] is False  # paused, then resumed by the second toggle
    assert row["first_ts"] == "2026-10-01T09:00:00Z" and row["last_ts"] == "2026-10-01T09:04:12Z"
    lines = (FIXTURES / "mew-0001.jsonl").read_bytes().splitlines(keepends=True)
    assert row["safe_offset"] == sum(len(x) for x in lines[:-1])  # the last tool call waits for its result
    # text + tool calls + tool results, not thinking nor compaction summaries
    recs = [json.loads(x) for x in lines]
    chars = 0
    for r in recs:
        c = r["content"]
        if r["type"] in ("user", "tool_result"):
            chars += len(c)
        elif r["type"] == "assistant":
            if isinstance(c, str):
                chars += len(c)
            else:
                for b in c:
                    if b["type"] == "text":
                        chars += len(b["text"])
                    if b["type"] == "tool_use":
                        chars += len(b["name"]) + len(json.dumps(b["input"], separators=(",", ":")))
    assert row["tokens"] == (chars + 3) // 4


def test_mewcode_format_detected_from_content_not_path(home: Path) -> None:
    d = home / "projects" / "k"
    d.mkdir(parents=True)
    shutil.copy(FIXTURES / "mew-0001.jsonl", d / "anything.jsonl")
    assert _one(home)["format"] == "mewcode"


def test_claude_pause_command_toggles(home: Path) -> None:
    d = home / "projects" / "k"
    d.mkdir(parents=True)

    def cmd(name: str) -> dict:
        return {"type": "user", "uuid": name, "timestamp": "2026-01-01T00:00:00Z",
                "message": {"role": "user", "content": f"<command-name>{name}</command-name>\n<command-message>x</command-message>"}}  # fmt: skip

    p = d / "s.jsonl"
    p.write_text(json.dumps(cmd("/pause-memory")) + "\n")
    assert _one(home)["paused"] is True
    with open(p, "a") as fh:
        fh.write(json.dumps(cmd("/toggle-memory")) + "\n")
    assert _one(home)["paused"] is False
    with open(p, "a") as fh:
        fh.write(json.dumps(cmd("/memory-pause")) + "\n")
    row = _one(home)
    assert row["paused"] is True and row["human_turns"] == 0


def test_cli_pause_and_later_transcript_toggle(home: Path) -> None:
    d = home / "projects" / "k"
    d.mkdir(parents=True)
    p = d / "s.jsonl"
    p.write_text(json.dumps({"type": "user", "uuid": "a", "timestamp": "2026-01-01T00:00:00Z",
                             "message": {"role": "user", "content": "hello"}}) + "\n")  # fmt: skip
    h = Home(home)
    conn = state.connect(h.state_db)
    for sf in discover_sessions(h):
        ledger.ingest(conn, sf, NOW)
    assert pause.say(conn, None, "s", True, "2026-06-01T00:00:00.000Z") == 1
    assert session_json(ledger.session_rows(conn)[0])["paused"] is True
    with open(p, "a") as fh:  # more talk, no toggle: still paused, and the transcript's parity is untouched
        fh.write(json.dumps({"type": "user", "uuid": "c", "timestamp": "2026-06-02T00:00:00Z",
                             "message": {"role": "user", "content": "more"}}) + "\n")  # fmt: skip
    for sf in discover_sessions(h):
        ledger.ingest(conn, sf, NOW)
    assert session_json(ledger.session_rows(conn)[0])["paused"] is True
    assert conn.execute("SELECT paused_transcript FROM sessions").fetchone()[0] == 0
    with open(p, "a") as fh:  # the user toggles back in the agent, after the CLI pause
        fh.write(json.dumps({"type": "user", "uuid": "b", "timestamp": "2026-07-01T00:00:00Z",
                             "message": {"role": "user", "content": "<command-name>/toggle-memory</command-name>"}}) + "\n")  # fmt: skip
    for sf in discover_sessions(h):
        ledger.ingest(conn, sf, NOW)
    assert session_json(ledger.session_rows(conn)[0])["paused"] is False
    assert pause.say(conn, None, "nope", True, NOW) == 0


def test_detect_format() -> None:
    assert detect_format({"type": "summary", "summary": "t", "leafUuid": "x"}) == "claude"
    assert detect_format({"type": "user", "uuid": "u", "message": {}}) == "claude"
    assert detect_format({"type": "system_prompt", "content": "s"}) == "mewcode"
    assert detect_format({"type": "user", "content": "hi"}) == "mewcode"
    assert detect_format({"type": "mystery"}) is None


def test_slash_command() -> None:
    assert slash_command("<command-message>m</command-message>\n<command-name>/pause-memory</command-name>") == "/pause-memory"
    assert slash_command("/toggle-memory now") == "/toggle-memory"
    assert slash_command("plain text") is None


def test_read_lines_keeps_long_lines_and_leaves_the_tail(tmp_path: Path) -> None:
    p = tmp_path / "f"
    long = b"x" * (3 << 20)
    p.write_bytes(b"a\n" + long + b"\nb\nunfinished")
    lines = list(read_lines(p, 0, 1))
    assert [len(x.data) for x in lines] == [1, len(long), 1]
    assert [x.number for x in lines] == [1, 2, 3]
    assert lines[-1].end == p.stat().st_size - len(b"unfinished")
    again = list(read_lines(p, lines[0].end, 2))
    assert [x.number for x in again] == [2, 3]


def test_subagent_files_are_attached_not_sessions(home: Path) -> None:
    d = home / "projects" / "k"
    (d / "s1" / "subagents").mkdir(parents=True)
    rec = {"type": "user", "uuid": "u", "sessionId": "s1", "message": {"role": "user", "content": "hi"}}
    (d / "s1.jsonl").write_text(json.dumps(rec) + "\n")
    (d / "s1" / "subagents" / "agent-a1.jsonl").write_text(json.dumps({**rec, "isSidechain": True}) + "\n")
    (d / "agent-b2.jsonl").write_text(json.dumps({**rec, "isSidechain": True}) + "\n")  # 2.0.x layout
    (sf,) = discover_sessions(Home(home))
    assert sf.session_id == "s1"
    assert [p.name for p in sf.subagents] == ["agent-a1.jsonl", "agent-b2.jsonl"]
