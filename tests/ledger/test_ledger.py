"""The ledger against the real corpus, incremental reads, and bad input."""

from __future__ import annotations

import gc
import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from memd import state
from memd.discovery import discover_sessions
from memd.ledger import files as ledgerfiles
from memd.ledger import query as ledgerquery
from memd.ledger import store as ledger
from memd.ledger.scan import scan_home
from memd.ledger.sessions import list_sessions, session_json, sessions_json_text
from memd.tree import Home
from tests.conftest import CORPUS, corpus_sessions, memd_cmd, require_corpus
from tests.reference import claude_counts

NOW = "2026-11-30T00:00:00.000Z"
COMPARED = ("records", "bad_lines", "human_turns", "assistant_turns", "tool_calls", "tool_calls_pending",
            "tokens", "usage", "compactions", "paused")  # fmt: skip


def ingest_all(home: Path) -> dict[tuple[str, str], dict]:
    h = Home(home)
    conn = state.connect(h.state_db)
    for sf in discover_sessions(h):
        ledger.ingest(conn, sf, NOW)
    out = {(r["key"], r["session_id"]): session_json(r) for r in ledger.session_rows(conn)}
    conn.close()
    return out


def subagent_files(main: Path) -> list[Path]:
    d = main.with_suffix("") / "subagents"
    return sorted(d.glob("*.jsonl")) if d.is_dir() else []


def test_corpus_counts_match_an_independent_count(corpus_home: Path, tmp_path: Path) -> None:
    home = tmp_path / "h"
    shutil.copytree(corpus_home, home)
    got = ingest_all(home)
    checked = 0
    for main in corpus_sessions():
        key = f"-corpus-{main.relative_to(CORPUS).parts[0]}"
        sid = main.stem
        if (key, sid) not in got:
            # Only the stray sidechain file may be missing: it is a sub-agent transcript.
            first = json.loads(main.read_bytes().split(b"\n", 1)[0])
            assert first.get("isSidechain") is True and first.get("agentId"), main
            continue
        expect = claude_counts(main, subagent_files(main))
        row = got[(key, sid)]
        assert {k: row[k] for k in COMPARED} == expect, main.name
        checked += 1
    assert checked == 15  # 16 main files, one of them a stray sub-agent transcript


def test_corpus_facts_named_in_the_spec(corpus_home: Path, tmp_path: Path) -> None:
    """Spot checks that do not depend on either implementation's rules."""
    home = tmp_path / "h"
    shutil.copytree(corpus_home, home)
    got = ingest_all(home)
    by_sid = {sid: row for (_k, sid), row in got.items()}
    assert by_sid["full-session"]["tool_calls_pending"] > 0  # ends mid-turn
    assert by_sid["06381696-0074-49f8-863e-6ad4fac507f9"]["tool_calls_pending"] > 0
    assert by_sid["sample_main_transcript"]["compactions"] == 1
    assert by_sid["4d5611e5-241a-462a-8d15-5122611a9569"]["compactions"] == 1
    assert "sample_agent_sidechain" not in by_sid  # a sub-agent file is not a session
    # Sub-agent usage is included: the session with sub-agent files spends more than its main file alone.
    main = CORPUS / "spotter" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    alone = claude_counts(main)["usage"]["output"]
    assert by_sid[main.stem]["usage"]["output"] > alone


def _chunks(data: bytes, rng: random.Random, n: int) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(n, len(data) - 1)))
    # Make sure some cuts land inside a multi-byte UTF-8 character.
    multi = [i for i in range(1, len(data)) if 0x80 <= data[i] < 0xC0]
    cuts = sorted(set(cuts) | set(rng.sample(multi, min(3, len(multi)))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


@pytest.mark.parametrize("seed", [1, 2])
def test_incremental_equals_one_shot(tmp_path: Path, seed: int) -> None:
    require_corpus()
    rng = random.Random(seed)
    mains = [p for p in corpus_sessions() if p.stat().st_size < 1_000_000]
    for main in rng.sample(mains, 4) + [CORPUS / "spotter" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"]:
        one = tmp_path / f"one-{seed}-{main.stem}"
        inc = tmp_path / f"inc-{seed}-{main.stem}"
        for h in (one, inc):
            (h / "projects" / "p").mkdir(parents=True)
        data = main.read_bytes()
        (one / "projects" / "p" / main.name).write_bytes(data)
        expect = ingest_all(one)
        target = inc / "projects" / "p" / main.name
        conn = state.connect(Home(inc).state_db)
        for i, chunk in enumerate(_chunks(data, rng, 25)):
            with open(target, "ab") as fh:
                fh.write(chunk)
            if i % 7 == 3:
                conn.close()  # a restart: nothing survives but the database
                conn = state.connect(Home(inc).state_db)
            for sf in discover_sessions(Home(inc)):
                ledger.ingest(conn, sf, NOW)
        conn.close()
        assert ingest_all(inc) == {k: {**v, "path": v["path"].replace(str(one), str(inc))} for k, v in expect.items()}


def test_incremental_across_real_processes(tmp_path: Path) -> None:
    """`memd scan` as a real process between appends gives the one-shot ledger."""
    require_corpus()
    main = CORPUS / "spotter" / "subagent.jsonl"
    data = main.read_bytes()
    home = tmp_path / "h"
    (home / "projects" / "p").mkdir(parents=True)
    target = home / "projects" / "p" / main.name
    rng = random.Random(7)
    for chunk in _chunks(data, rng, 4):
        with open(target, "ab") as fh:
            fh.write(chunk)
        subprocess.run([*memd_cmd(), "--home", str(home), "scan"], check=True, capture_output=True)
    row = ingest_all(home)[("p", "subagent")]
    assert {k: row[k] for k in COMPARED} == claude_counts(main)


def test_partial_line_is_not_consumed(home: Path) -> None:
    p = home / "projects" / "k" / "s.jsonl"
    p.parent.mkdir(parents=True)
    line = json.dumps({"type": "user", "uuid": "u1", "message": {"role": "user", "content": "hello there"}})
    p.write_text(line + "\n" + line[:20])
    row = ingest_all(home)[("k", "s")]
    assert row["records"] == 1 and row["bytes_read"] == len(line) + 1
    with open(p, "a") as fh:
        fh.write(line[20:] + "\n")
    row = ingest_all(home)[("k", "s")]
    assert row["records"] == 2 and row["human_turns"] == 2 and row["bad_lines"] == 0


def test_shrunk_or_replaced_file_is_reread(home: Path) -> None:
    p = home / "projects" / "k" / "s.jsonl"
    p.parent.mkdir(parents=True)
    rec = lambda text: json.dumps({"type": "user", "uuid": "u", "message": {"role": "user", "content": text}}) + "\n"  # noqa: E731
    p.write_text(rec("one") + rec("two") + rec("three"))
    assert ingest_all(home)[("k", "s")]["human_turns"] == 3
    p.write_text(rec("only"))  # shrank
    assert ingest_all(home)[("k", "s")]["human_turns"] == 1
    tmp = p.with_name("new.tmp")
    tmp.write_text(rec("a") + rec("b"))
    os.replace(tmp, p)  # new inode, larger than the old offset
    assert ingest_all(home)[("k", "s")]["human_turns"] == 2


def test_bad_lines_are_counted_with_their_number_and_skipped(home: Path) -> None:
    p = home / "projects" / "k" / "s.jsonl"
    p.parent.mkdir(parents=True)
    good = json.dumps({"type": "user", "uuid": "u", "message": {"role": "user", "content": "fine"}}).encode()
    p.write_bytes(
        good + b"\n{not json\n" + b"\xff\xfe\x00garbage\n" + json.dumps({"type": "brand-new-type", "uuid": "x"}).encode()
        + b"\n" + good + b"\n" + b'{"type":"user","message":{"content":"caf\xe9"}}\n'
    )  # fmt: skip
    h = Home(home)
    conn = state.connect(h.state_db)
    (sf,) = discover_sessions(h)
    r = ledger.ingest(conn, sf, NOW)
    assert [(pr.line, pr.reason) for pr in r.problems] == [(2, "unparseable line"), (3, "unparseable line"), (6, "unparseable line")]
    row = session_json(ledger.session_rows(conn)[0])
    assert row["bad_lines"] == 3 and row["human_turns"] == 2 and row["records"] == 3
    # Nothing counted twice on the next read.
    assert ledger.ingest(conn, sf, NOW).records == 0
    assert session_json(ledger.session_rows(conn)[0]) == row


def test_file_vanishing_or_unreadable_does_not_stop_the_scan(home: Path) -> None:
    good = json.dumps({"type": "user", "uuid": "u", "message": {"role": "user", "content": "fine"}}) + "\n"
    for name in ("a", "b", "c"):
        p = home / "projects" / "k" / f"{name}.jsonl"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(good)
    h = Home(home)
    sessions = discover_sessions(h)
    sessions[0].path.unlink()  # deleted between discovery and read
    sessions[1].path.unlink()
    sessions[1].path.mkdir()  # now unreadable as a file
    conn = state.connect(h.state_db)
    results = [ledger.ingest(conn, sf, NOW) for sf in sessions]
    assert results[0].problems and "cannot stat" in results[0].problems[0].reason
    assert results[1].problems and "read failed" in results[1].problems[0].reason
    assert results[2].records == 1


def test_usage_last_per_message_id_across_appends(home: Path) -> None:
    p = home / "projects" / "k" / "s.jsonl"
    p.parent.mkdir(parents=True)

    def asst(mid: str, out: int, block: dict) -> str:
        return json.dumps({"type": "assistant", "uuid": mid + str(out), "message": {
            "id": mid, "role": "assistant", "content": [block],
            "usage": {"input_tokens": 10, "output_tokens": out, "cache_read_input_tokens": 5}}}) + "\n"  # fmt: skip

    p.write_text(asst("m1", 1, {"type": "text", "text": "hi"}))
    assert ingest_all(home)[("k", "s")]["usage"]["output"] == 1
    with open(p, "a") as fh:
        fh.write(asst("m1", 7, {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}))
    row = ingest_all(home)[("k", "s")]
    assert row["usage"] == {"input": 10, "output": 7, "cache_creation": 0, "cache_read": 5}
    assert row["assistant_turns"] == 1 and row["tool_calls_pending"] == 1 and not row["natural_break"]
    with open(p, "a") as fh:
        fh.write(json.dumps({"type": "user", "uuid": "r", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "file"}]}}) + "\n")  # fmt: skip
        fh.write(asst("m2", 3, {"type": "text", "text": "done"}))
    row = ingest_all(home)[("k", "s")]
    assert row["usage"]["output"] == 10 and row["usage"]["input"] == 20
    assert row["tool_calls"] == 1 and row["tool_calls_pending"] == 0 and row["natural_break"]
    assert row["safe_offset"] == p.stat().st_size


def test_listing_query_equals_the_row_form(corpus_home: Path, tmp_path: Path) -> None:
    """`memd sessions` uses a one-pass query; it must say exactly what session_json says."""

    home = tmp_path / "h"
    shutil.copytree(corpus_home, home)
    ingest_all(home)
    conn = state.connect(Home(home).state_db)
    ledgerquery.set_cli_pause(conn, None, "short", True, NOW)
    assert list_sessions(conn) == [session_json(r) for r in ledger.session_rows(conn)]
    conn.close()


def test_json_listing_built_by_sqlite_equals_the_row_form(corpus_home: Path, tmp_path: Path) -> None:
    home = tmp_path / "h"
    shutil.copytree(corpus_home, home)
    ingest_all(home)
    conn = state.connect(Home(home).state_db)
    ledgerquery.set_cli_pause(conn, None, "short", True, NOW)
    assert json.loads(sessions_json_text(conn)) == list_sessions(conn)
    assert json.loads(sessions_json_text(conn, "-corpus-spotter")) == list_sessions(conn, "-corpus-spotter")
    conn.close()


def test_stale_sessions_sees_appends_in_main_sub_agent_and_mewcode_files(home: Path) -> None:
    rec = json.dumps({"type": "user", "uuid": "u", "sessionId": "s1", "message": {"role": "user", "content": "hi"}}) + "\n"
    d = home / "projects" / "k"
    (d / "s1" / "subagents").mkdir(parents=True)
    (d / ".mewcode" / "sessions").mkdir(parents=True)
    main, sub, mew = d / "s1.jsonl", d / "s1" / "subagents" / "agent-a.jsonl", d / ".mewcode" / "sessions" / "m1.jsonl"
    for p in (main, sub):
        p.write_text(rec)
    mew.write_text(json.dumps({"type": "user", "content": "hello"}) + "\n")
    h = Home(home)
    conn = state.connect(h.state_db)
    assert {s.session_id for s in ledgerfiles.stale_sessions(conn, h)} == {"s1", "m1"}
    for sf in ledgerfiles.stale_sessions(conn, h):
        ledger.ingest(conn, sf, NOW)
    assert ledgerfiles.stale_sessions(conn, h) == []
    for p in (sub, mew):
        with open(p, "a") as fh:
            fh.write(p.read_text().splitlines()[0] + "\n")
        assert [s.session_id for s in ledgerfiles.stale_sessions(conn, h)] == ["m1" if p == mew else "s1"]
        for sf in ledgerfiles.stale_sessions(conn, h):
            ledger.ingest(conn, sf, NOW)


def test_parallel_first_scan_equals_the_serial_ledger(corpus_home: Path, tmp_path: Path) -> None:
    """A big first read spreads sessions over processes; the ledger must be the one-process ledger."""
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    shutil.copytree(corpus_home, serial)
    shutil.copytree(corpus_home, parallel)
    env = {**os.environ, "MEMD_SCAN_WORKERS": "2"}
    r = subprocess.run([*memd_cmd(), "--home", str(parallel), "scan", "--json"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    want = ingest_all(serial)
    got = {k: {**v, "path": v["path"].replace(str(parallel), str(serial))} for k, v in ingest_all(parallel).items()}
    assert got == want


def _ledger_of(home: Path, serial: Path) -> dict[tuple[str, str], dict]:
    """The ledger's rows of `home`, paths written as under `serial`, to compare with its ledger."""
    conn = state.connect(Home(home).state_db)
    try:
        rows = {(r["key"], r["session_id"]): session_json(r) for r in ledger.session_rows(conn)}
    finally:
        conn.close()
    return {k: {**v, "path": v["path"].replace(str(home), str(serial))} for k, v in rows.items()}


@pytest.mark.parametrize("per_batch", [1, 3, 1000])
def test_batched_first_scan_equals_the_serial_ledger(
    corpus_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_batch: int
) -> None:
    """`memd scan` commits its reads a batch at a time; any batch size gives the one-by-one ledger,
    and one result per session in the order asked."""
    serial, home = tmp_path / "serial", tmp_path / "batched"
    shutil.copytree(corpus_home, serial)
    shutil.copytree(corpus_home, home)
    want = ingest_all(serial)
    monkeypatch.setattr(ledger, "BATCH_SESSIONS", per_batch)
    h = Home(home)
    todo = discover_sessions(h)
    conn = state.connect(h.state_db)
    results = list(ledger.ingest_many(conn, todo, NOW))
    again = list(ledger.ingest_many(conn, todo, NOW))
    conn.close()
    assert [(r.key, r.session_id) for r in results] == [(sf.key, sf.session_id) for sf in todo]
    assert sum(r.records for r in again) == 0  # idempotent: nothing is read twice
    assert _ledger_of(home, serial) == want


def test_a_batched_read_that_loses_the_race_is_read_again_alone(corpus_home: Path, tmp_path: Path) -> None:
    """Another ingester (the daemon) commits a session between a batch's read of it and the batch's
    commit, and the agent appends meanwhile: the batch's read is dropped and done again, so nothing
    is counted twice and nothing is lost."""
    serial, home = tmp_path / "serial", tmp_path / "batched"
    shutil.copytree(corpus_home, home)
    h = Home(home)
    todo = [sf for sf in discover_sessions(h) if Path(sf.main).read_bytes().endswith(b"\n")]
    first = todo[0]
    line = json.dumps({"type": "user", "uuid": "late-1", "timestamp": "2026-11-30T00:00:00.000Z",
                       "message": {"role": "user", "content": "one more durable thing"}}).encode() + b"\n"  # fmt: skip
    daemon = state.connect(h.state_db)

    def sessions() -> object:
        yield first
        with open(first.main, "ab") as fh:  # the batch has read `first`; it has not committed it
            fh.write(line)
        ledger.ingest(daemon, first, NOW)
        yield from todo[1:]

    conn = state.connect(h.state_db)
    results = list(ledger.ingest_many(conn, sessions(), NOW))  # type: ignore[arg-type]
    conn.close()
    daemon.close()
    assert results[0].records == 0  # read again after the daemon's commit: nothing left to read
    shutil.copytree(home, serial)
    shutil.rmtree(serial / "memd")
    assert _ledger_of(home, serial) == ingest_all(serial)


def test_a_first_scan_asks_nothing_per_new_session(corpus_home: Path, tmp_path: Path) -> None:
    """Which sessions the ledger has is one query at the start of `ingest_many`, and a row the batch
    makes itself needs no re-check of offsets: no statement per new session but its writes (each
    look-up was a read transaction of its own, a tenth of the ledger's part of a first scan). The
    race this leaves to the commit is `test_a_batched_read_that_loses_the_race_is_read_again_alone`."""
    home = tmp_path / "h"
    shutil.copytree(corpus_home, home)
    h = Home(home)
    todo = discover_sessions(h)
    conn = state.connect(h.state_db)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    results = list(ledger.ingest_many(conn, todo, NOW))
    conn.set_trace_callback(None)
    conn.close()
    assert len(results) == len(todo) > 10
    lookups = [s for s in statements if s.startswith(("SELECT * FROM sessions WHERE", "SELECT path, offset, inode FROM files"))]
    assert lookups == []
    assert sum(s.startswith("INSERT INTO sessions") for s in statements) == len(todo)
    # a new session's row is made with its counters (no UPDATE after it), and a batch's reads are
    # written without a savepoint each (a read that lost the race has written nothing)
    assert not [s for s in statements if s.startswith(("UPDATE sessions", "SAVEPOINT", "RELEASE"))]


def test_a_scan_folds_with_the_cycle_collector_paused_and_leaves_none_behind(
    corpus_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`scan_home` pauses the cyclic collector while it folds (it makes no cycles: nothing is left
    for the collector after a whole corpus) and turns it back on however the scan ends."""
    home = tmp_path / "h"
    shutil.copytree(corpus_home, home)
    enabled: list[bool] = []
    real = ledger.ingest_many

    def spy(*args: Any, **kwargs: Any) -> Any:
        enabled.append(gc.isenabled())
        yield from real(*args, **kwargs)

    monkeypatch.setattr(ledger, "ingest_many", spy)
    monkeypatch.setenv("MEMD_SCAN_WORKERS", "1")
    gc.collect()
    totals = scan_home(Home(home))
    assert totals["records"] > 1000 and enabled == [False] and gc.isenabled()
    # The fold makes no cycles: a cycle per record would leave thousands. Not `== 0`: in a long pytest
    # process other threads' garbage lands in the same collection (51 objects were seen once).
    assert gc.collect() < totals["records"] // 10

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk went away")
        yield

    monkeypatch.setattr(ledger, "ingest_many", broken)
    shutil.rmtree(home / "memd")
    with pytest.raises(OSError):
        scan_home(Home(home))
    assert gc.isenabled()
