"""A transcript's identity in the ledger (issue 11 §2, issue 16): a home that moves goes on where
it stopped; a transcript rewritten under memd is read again from the start; Claude Code 2.1's
record types and pause forms are honoured; unrecognised types are counted."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from memd import state
from memd.discovery import discover_sessions
from memd.ledger import query as ledgerquery
from memd.ledger import store as ledger
from memd.tree import Home
from tests.procs import memd_cmd

NOW = "2026-12-01T10:00:00.000Z"


def user(text: str, uuid: str, parent: str | None = None, **extra: object) -> dict[str, object]:
    return {"type": "user", "uuid": uuid, "parentUuid": parent, "sessionId": "s1", "timestamp": NOW,
            "message": {"role": "user", "content": text}, **extra}  # fmt: skip


def assistant(text: str, mid: str, uuid: str) -> dict[str, object]:
    return {"type": "assistant", "uuid": uuid, "sessionId": "s1", "timestamp": NOW,
            "message": {"id": mid, "role": "assistant", "content": [{"type": "text", "text": text}],
                        "usage": {"input_tokens": 10, "output_tokens": 5}}}  # fmt: skip


def write(path: Path, records: list[dict[str, object]], mode: str = "w") -> None:
    with open(path, mode) as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")


def make_home(root: Path, turns: int = 3) -> Path:
    d = root / "projects" / "-repo"
    d.mkdir(parents=True)
    recs: list[dict[str, object]] = []
    for i in range(turns):
        recs += [user(f"question {i}", f"u{i}"), assistant(f"answer {i}", f"m{i}", f"a{i}")]
    write(d / "s1.jsonl", recs)
    return d / "s1.jsonl"


def ingest_all(home: Path) -> tuple[sqlite3.Connection, list[ledger.IngestResult]]:
    conn = state.connect(Home(home).state_db)
    return conn, [ledger.ingest(conn, sf, NOW) for sf in discover_sessions(Home(home))]


def row(conn: sqlite3.Connection) -> sqlite3.Row:
    return conn.execute("SELECT * FROM sessions WHERE session_id='s1'").fetchone()


@pytest.mark.parametrize("how", ["copy", "move", "symlink"])
def test_a_moved_home_goes_on_where_it_stopped(tmp_path: Path, how: str) -> None:
    a = tmp_path / "A"
    make_home(a)
    conn, _ = ingest_all(a)
    before = dict(row(conn))
    conn.close()
    b = tmp_path / "B"
    if how == "copy":
        subprocess.run(["cp", "-a", str(a), str(b)], check=True)
    elif how == "move":
        a.rename(b)
    else:
        b.symlink_to(a)
    conn, results = ingest_all(b)
    assert [r.reset for r in results] == [False]
    assert sum(r.bytes_read for r in results) == 0  # nothing re-counted
    after = dict(row(conn))
    for col in ("human_turns", "assistant_turns", "usage_input", "usage_output", "generation", "records"):
        assert after[col] == before[col], col
    assert after["path"].startswith(str(b)) and after["ingest_error"] is None
    write(b / "projects" / "-repo" / "s1.jsonl", [user("one more", "u9")], mode="a")
    conn2, results = ingest_all(b)
    assert results[0].bytes_read > 0 and not results[0].reset
    assert row(conn2)["human_turns"] == before["human_turns"] + 1


def test_cli_scan_after_cp_a(tmp_path: Path) -> None:
    """The reported failure: `memd --home A scan; cp -a A B; memd --home B scan`."""
    a = tmp_path / "A"
    make_home(a)
    assert subprocess.run([*memd_cmd(), "--home", str(a), "scan"], capture_output=True).returncode == 0
    b = tmp_path / "B"
    subprocess.run(["cp", "-a", str(a), str(b)], check=True)
    r = subprocess.run([*memd_cmd(), "--home", str(b), "scan"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = json.loads(subprocess.run([*memd_cmd(), "--home", str(b), "sessions", "--json"],
                                     capture_output=True, text=True, check=True).stdout)  # fmt: skip
    assert rows[0]["human_turns"] == 3 and rows[0]["path"].startswith(str(b))


def test_rewrites_are_detected_and_read_from_the_start(tmp_path: Path) -> None:
    path = make_home(tmp_path / "h", turns=4)
    conn, _ = ingest_all(tmp_path / "h")
    assert row(conn)["human_turns"] == 4 and row(conn)["generation"] == 0
    data = path.read_bytes()

    # Shorter, in place.
    lines = data.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:4]))
    _, [res] = ingest_all(tmp_path / "h")
    assert res.reset and row(conn)["human_turns"] == 2 and row(conn)["generation"] == 1

    # Same size, different bytes (question 0 -> QUESTION 0).
    path.write_bytes(data)
    ingest_all(tmp_path / "h")
    gen = row(conn)["generation"]
    same = data.replace(b"question 0", b"QUESTION 0")
    assert len(same) == len(data)
    path.write_bytes(same)
    os.utime(path, ns=(1, 1))
    _, [res] = ingest_all(tmp_path / "h")
    assert res.reset and row(conn)["generation"] == gen + 1 and row(conn)["human_turns"] == 4

    # Longer, in place, with different early bytes: never resumed mid-line at the old offset.
    longer = data.replace(b"question 0", b"a much longer first question 0") + json.dumps(user("new", "u7")).encode() + b"\n"
    path.write_bytes(longer)
    _, [res] = ingest_all(tmp_path / "h")
    assert res.reset and row(conn)["human_turns"] == 5 and row(conn)["bad_lines"] == 0

    # Replaced by a new file (a new inode) with other content.
    tmp = path.with_suffix(".new")
    write(tmp, [user("replaced", "r1")])
    tmp.replace(path)
    _, [res] = ingest_all(tmp_path / "h")
    assert res.reset and row(conn)["human_turns"] == 1


def test_pure_appends_never_reset(tmp_path: Path) -> None:
    path = make_home(tmp_path / "h", turns=1)
    conn, _ = ingest_all(tmp_path / "h")
    for i in range(20):
        write(path, [user(f"q{i}", f"x{i}")], mode="a")
        _, [res] = ingest_all(tmp_path / "h")
        assert not res.reset
    assert row(conn)["human_turns"] == 21 and row(conn)["generation"] == 0


def test_migration_makes_old_absolute_paths_relative(tmp_path: Path) -> None:
    home = tmp_path / "old home"
    make_home(home)
    conn, _ = ingest_all(home)
    rel = conn.execute("SELECT path FROM files").fetchone()[0]
    assert rel == "projects/-repo/s1.jsonl"
    # Simulate a ledger written by the previous schema: absolute paths, version 2.
    conn.execute("UPDATE files SET path=?, fp=NULL", (str(home / rel),))
    conn.execute("PRAGMA user_version=2")
    conn.execute("ALTER TABLE files DROP COLUMN fp")
    for col in ("generation", "ingest_error", "ingest_error_ts", "pause_cli_parity", "pause_resumes", "pause_cli_resumes"):
        conn.execute(f"ALTER TABLE sessions DROP COLUMN {col}")
    for table in ("record_types", "judged", "pause_events"):
        conn.execute(f"DROP TABLE {table}")
    conn.close()
    conn, results = ingest_all(home)
    assert conn.execute("SELECT path FROM files").fetchone()[0] == rel
    assert results[0].bytes_read == 0 and not results[0].reset
    assert row(conn)["human_turns"] == 3


PAUSE_FORMS = {
    "command-name user record": user("<command-name>/pause-memory</command-name>\n<command-args></command-args>", "p1"),
    "system local_command (2.1)": {"type": "system", "subtype": "local_command", "content": "/pause-memory",
                                   "uuid": "p1", "timestamp": NOW, "sessionId": "s1"},
    "system local_command wrapped": {"type": "system", "subtype": "local_command", "uuid": "p1", "timestamp": NOW,
                                     "content": "<command-name>/memory-pause</command-name>", "sessionId": "s1"},
    "unknown command line": user("Unknown command: /pause-memory", "p1"),
    "unknown command stdout": user("<local-command-stdout>Unknown command: /toggle-memory</local-command-stdout>", "p1"),
}  # fmt: skip


@pytest.mark.parametrize("form", list(PAUSE_FORMS))
def test_every_pause_form_pauses(tmp_path: Path, form: str) -> None:
    path = make_home(tmp_path / "h", turns=1)
    write(path, [PAUSE_FORMS[form], user("after the pause", "u5")], mode="a")
    conn, _ = ingest_all(tmp_path / "h")
    r = row(conn)
    assert r["paused_transcript"] == 1 and r["pause_offset"] is not None, form
    assert r["human_turns"] == 2  # the command is not a turn


def test_a_command_and_its_echo_toggle_once(tmp_path: Path) -> None:
    path = make_home(tmp_path / "h", turns=1)
    write(path, [
        user("<command-name>/toggle-memory</command-name>", "c1"),
        user("<local-command-stdout>Unknown command: /toggle-memory</local-command-stdout>", "c2", parent="c1"),
    ], mode="a")  # fmt: skip
    conn, _ = ingest_all(tmp_path / "h")
    assert row(conn)["paused_transcript"] == 1
    write(path, [user("<command-name>/toggle-memory</command-name>", "c3", parent="c2")], mode="a")
    ingest_all(tmp_path / "h")
    assert row(conn)["paused_transcript"] == 0  # a second command is a second toggle


def test_new_record_types_are_known_and_others_counted(tmp_path: Path) -> None:
    path = make_home(tmp_path / "h", turns=1)
    known = ["attachment", "api-request", "api-request-blob", "api-request-shape", "atis-latch", "tools-used", "mode"]
    recs: list[dict[str, object]] = [{"type": t, "uuid": f"k{i}", "sessionId": "s1"} for i, t in enumerate(known)]
    recs += [{"type": "system", "subtype": "api_error", "uuid": "e1", "sessionId": "s1"},
             {"type": "brand-new-type", "uuid": "n1", "sessionId": "s1"},
             {"type": "brand-new-type", "uuid": "n2", "sessionId": "s1"},
             {"type": "system", "subtype": "brand_new_subtype", "uuid": "n3", "sessionId": "s1"}]  # fmt: skip
    write(path, recs, mode="a")
    conn, _ = ingest_all(tmp_path / "h")
    assert ledgerquery.unknown_record_types(conn) == {"brand-new-type": 2, "system/brand_new_subtype": 1}
    assert row(conn)["human_turns"] == 1


def test_cost_state_is_the_sessions_usage(tmp_path: Path) -> None:
    """Compaction calls have no assistant record; Claude Code's running total counts them."""
    path = make_home(tmp_path / "h", turns=2)
    write(path, [{"type": "cost-state", "sessionId": "s1",
                  "usage": {"input_tokens": 500, "output_tokens": 70, "cache_creation_input_tokens": 3,
                            "cache_read_input_tokens": 4}}], mode="a")  # fmt: skip
    conn, _ = ingest_all(tmp_path / "h")
    r = row(conn)
    assert (r["usage_input"], r["usage_output"], r["usage_cache_creation"], r["usage_cache_read"]) == (500, 70, 3, 4)


def test_a_failing_session_is_recorded_not_green(tmp_path: Path) -> None:
    path = make_home(tmp_path / "h", turns=1)
    conn, _ = ingest_all(tmp_path / "h")
    write(path, [user("more", "u8")], mode="a")
    sf = discover_sessions(Home(tmp_path / "h"))[0]
    conn.execute("CREATE TRIGGER boom BEFORE UPDATE OF offset ON files BEGIN SELECT RAISE(ABORT, 'disk says no'); END")
    with pytest.raises(sqlite3.DatabaseError):
        ledger.ingest(conn, sf, NOW)
    assert [s["reason"] for s in ledgerquery.stuck_sessions(conn)] == ["disk says no"]
    conn.execute("DROP TRIGGER boom")
    ledger.ingest(conn, sf, NOW)
    assert ledgerquery.stuck_sessions(conn) == []


def test_shutil_copytree_of_a_home_with_state(tmp_path: Path) -> None:
    """A restore from a backup tool that does not keep mtimes: read again, counted once."""
    make_home(tmp_path / "A")
    conn, _ = ingest_all(tmp_path / "A")
    before = dict(row(conn))
    shutil.copytree(tmp_path / "A", tmp_path / "B", copy_function=shutil.copyfile)
    conn_b, results = ingest_all(tmp_path / "B")
    assert not results[0].reset and results[0].bytes_read == 0
    assert row(conn_b)["human_turns"] == before["human_turns"]


def test_status_shows_stuck_held_back_and_unknown(tmp_path: Path) -> None:
    """Health is progress: a session the ledger cannot advance fails `memd status`, in both forms."""
    home = tmp_path / "h"
    path = make_home(home, turns=1)
    write(path, [{"type": "brand-new-type", "uuid": "n1", "sessionId": "s1"},
                 {"type": "assistant", "uuid": "a9", "sessionId": "s1", "timestamp": NOW,
                  "message": {"id": "m9", "role": "assistant",
                              "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]}}],
          mode="a")  # fmt: skip
    conn, _ = ingest_all(home)
    ledger.record_error(conn, discover_sessions(Home(home))[0], "disk says no", NOW)
    conn.close()
    r = subprocess.run([*memd_cmd(), "--home", str(home), "status", "--json"], capture_output=True, text=True)
    lg = json.loads(r.stdout)["ledger"]
    assert lg["ok"] is False and lg["stuck"][0]["reason"] == "disk says no"
    assert lg["held_back_count"] == 1 and lg["held_back"][0]["pending"] == 1
    assert lg["unknown_record_types"] == {"brand-new-type": 1}
    text = subprocess.run([*memd_cmd(), "--home", str(home), "status"], capture_output=True, text=True).stdout
    assert "FAILING ledger" in text and "held back" in text and "brand-new-type" in text
    doc = json.loads(subprocess.run([*memd_cmd(), "--home", str(home), "doctor", "--json"], capture_output=True,
                                    text=True).stdout)  # fmt: skip
    [check] = [c for c in doc if c["name"] == "ledger"]
    assert check["ok"] is False and "disk says no" in check["detail"]


def test_cost_state_as_claude_code_2_1_332_writes_it(tmp_path: Path) -> None:
    """`modelUsage` per model, summed: the exact record shape the real binary wrote (tests/e2e/agents)."""
    path = make_home(tmp_path / "h", turns=1)
    write(path, [{"type": "cost-state", "sessionId": "s1", "totalCostUSD": 0.03,
                  "modelUsage": {"claude-opus-5-5": {"inputTokens": 5234, "outputTokens": 33,
                                                     "cacheReadInputTokens": 1883, "cacheCreationInputTokens": 1883},
                                 "claude-haiku-4-5": {"inputTokens": 100, "outputTokens": 7,
                                                      "cacheReadInputTokens": 0, "cacheCreationInputTokens": 0}}}],
          mode="a")  # fmt: skip
    conn, _ = ingest_all(tmp_path / "h")
    r = row(conn)
    assert (r["usage_input"], r["usage_output"], r["usage_cache_creation"], r["usage_cache_read"]) == (5334, 40, 1883, 1883)
