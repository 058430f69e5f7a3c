"""A big first scan: the heap it frees stays mapped (no page faults per chunk read), sizes come from
discovery's stats, and the workers' batches.

Page faults are counted by the kernel (`ru_minflt`), not timed: the same reads make the same faults.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from memd import state
from memd.discovery import discover_sessions
from memd.ledger import files as ledgerfiles
from memd.ledger import outside, scan, store
from memd.tree import Home
from tests.jobkit import write_session
from tests.ledger.test_mewcode_projects import mew_project

# In a fresh interpreter: `scan_home` over the home argv[1] with `scan.ROOMY_HEAP_BYTES` set to
# argv[2]; prints the page faults the scan itself cost (its modules imported and the ledger made first).
_FAULTS_OF_SCAN = """
import os, resource, sys
os.environ["MEMD_SCAN_WORKERS"] = "1"
from pathlib import Path
from typing import Any
from memd import state
from memd.ledger import outside, scan, store
from memd.tree import Home
home = Home(Path(sys.argv[1]))
scan.ROOMY_HEAP_BYTES = int(sys.argv[2])
state.connect(home.state_db).close()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
scan.scan_home(home)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the dynamic mmap threshold is glibc's")
def test_a_big_scan_keeps_the_heap_it_frees(tmp_path: Path) -> None:
    """Over a big read, the chunks and batches freed and taken again are not given back to the kernel
    to be faulted in again page by page: 18 MB of transcripts read as a big scan cost less than 0.75 of
    the page faults they cost read as a small one (0.28 where measured: 294 against 1,061).

    The transcripts are made here, each line ~5 KB: a line over glibc's mmap threshold (128 KiB), as the
    corpus has, raises the thresholds by itself when its objects are freed, so a small scan of the corpus
    kept its heap too in some runs (552 against 570 faults) and the comparison said nothing."""
    home = tmp_path / "home"
    for p in range(2):
        for s in range(4):
            turns = [("user" if i % 2 else "assistant", f"word{i} " * 700) for i in range(400)]
            write_session(home / "projects" / f"-p{p}" / f"s{p}{s}.jsonl", turns)

    def faults(threshold: int) -> int:
        shutil.rmtree(home / "memd", ignore_errors=True)
        r = subprocess.run([sys.executable, "-c", _FAULTS_OF_SCAN, str(home), str(threshold)],
                           capture_output=True, text=True, check=True)  # fmt: skip
        return int(r.stdout)

    small, big = faults(1 << 40), faults(1 << 20)  # the scan below / over the threshold
    assert big < 0.75 * small, (big, small)


def test_sizes_come_from_discovery_stats(tmp_path: Path) -> None:
    """What decides workers, batches and the bar is the size discovery saw; a file it did not stat is
    asked, and a file gone counts nothing."""
    home = tmp_path / "home"
    proj = home / "projects" / "-p"
    (proj / "a" / "subagents").mkdir(parents=True)
    (proj / "a.jsonl").write_bytes(b"x" * 100)
    (proj / "a" / "subagents" / "agent-1.jsonl").write_bytes(b"y" * 30)
    (sf,) = discover_sessions(Home(home))
    assert scan._size(sf) == 130
    (proj / "a.jsonl").write_bytes(b"x" * 500)  # grew after discovery: the stat discovery took counts
    assert scan._size(sf) == 130
    sf.stats.clear()
    assert scan._size(sf) == 530
    os.unlink(proj / "a.jsonl")
    assert scan._size(sf) == 30


def test_batches_cover_every_session_once_biggest_first() -> None:
    sizes = [5, 900, 40, 40 << 20, 7, 3 << 20, 0]
    batches = scan._batches(sizes, 2)
    assert sorted(i for b in batches for i in b) == list(range(len(sizes)))
    flat = [i for b in batches for i in b]
    assert [sizes[i] for i in flat] == sorted(sizes, reverse=True)


def test_a_first_scan_with_workers_reports_what_one_core_does(corpus_home: Path, tmp_path: Path) -> None:
    """The sizes now decide the workers without a stat each: the totals of `memd scan` with two
    workers are those with one."""
    out = {}
    for n in ("1", "2"):
        h = tmp_path / n
        shutil.copytree(corpus_home, h, ignore=shutil.ignore_patterns("memd"))
        env = {**os.environ, "MEMD_SCAN_WORKERS": n}
        r = subprocess.run([sys.executable, "-m", "memd", "--home", str(h), "scan", "--json"], capture_output=True,
                           text=True, env=env, check=True)  # fmt: skip
        out[n] = json.loads(r.stdout)
    assert out["1"] == out["2"] and out["1"]["records"] > 0


def test_batches_shrink_to_the_end_so_workers_finish_together() -> None:
    """Each batch costs at most its share of what was left when it began (1/(2·workers), and no less
    than the minimum) plus one session: the last batches are small, however many small sessions
    come last."""
    sizes = [8 << 20] * 10 + [2_000] * 3_000
    workers = 2
    cost = [n + scan.SESSION_COST_BYTES for n in sizes]
    left = sum(cost)
    batches = scan._batches(sizes, workers)
    for b in batches:
        share = min(scan.WORKER_BATCH_BYTES, max(scan.MIN_BATCH_BYTES, left // (2 * workers)))
        assert sum(cost[i] for i in b) < share + max(cost[i] for i in b)
        left -= sum(cost[i] for i in b)
    last = batches[-1]
    assert sum(cost[i] for i in last) <= scan.MIN_BATCH_BYTES + scan.SESSION_COST_BYTES


def test_a_parallel_first_scan_forks_without_multiprocessing(corpus_home: Path, tmp_path: Path) -> None:
    """The workers are forked by `memd.ledger.workers`: a parallel first scan loads neither
    multiprocessing nor pickle (40–80 ms before the first session was read), and reads every
    session."""
    home = tmp_path / "h"
    shutil.copytree(corpus_home, home, ignore=shutil.ignore_patterns("memd"))
    code = (
        "import json, os, sys\n"
        "os.environ['MEMD_SCAN_WORKERS'] = '2'\n"
        "from pathlib import Path\n"
        "from memd.ledger.scan import scan_home\n"
        "from memd.tree import Home\n"
        "t = scan_home(Home(Path(sys.argv[1])))\n"
        "print(json.dumps([t, sorted(m for m in ('multiprocessing', 'pickle') if m in sys.modules)]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(home)], capture_output=True, text=True, check=True)
    totals, loaded = json.loads(r.stdout)
    assert loaded == []
    assert totals["read"] >= totals["sessions"] > 0 and totals["problems"] == 0


def test_a_parallel_first_scan_finds_the_projects_its_sessions_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the workers read, the parent reads each key's first transcript for its working directory
    (`outside.learn_cwds`); the pass after the read finds that project's own MewCode sessions as a
    scan on one core does."""
    project = mew_project(tmp_path / "code" / "shop")
    got = {}
    for n in ("1", "2"):
        home = tmp_path / f"home{n}"
        proj = home / "projects" / "-code-shop"
        proj.mkdir(parents=True)
        for i in range(3):
            line = {"type": "user", "uuid": f"u{i}", "cwd": str(project), "sessionId": f"s{i}",
                    "timestamp": "2026-11-30T00:00:00.000Z", "message": {"role": "user", "content": "hello"}}  # fmt: skip
            (proj / f"s{i}.jsonl").write_text(json.dumps(line) + "\n")
        monkeypatch.setenv("MEMD_SCAN_WORKERS", n)
        monkeypatch.setattr(outside, "_CWD_BY_PATH", {})
        totals = scan.scan_home(Home(home))
        got[n] = (totals["sessions"], totals["read"])
        assert outside._CWD_BY_PATH[str(proj / "s0.jsonl")] == str(project)
    assert got["1"] == got["2"] == (4, 4)


def test_a_first_stat_pass_lists_each_directory_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing read yet every transcript is new: the stat pass lists each directory once (no
    "anything changed here?" pass before discovery's own) and finds what discovery finds."""
    home = tmp_path / "home"
    for key, sids in (("-a", ["s1", "s2"]), ("-b", ["s3"]), ("-empty", [])):
        proj = home / "projects" / key
        proj.mkdir(parents=True)
        for sid in sids:
            (proj / f"{sid}.jsonl").write_text("{}\n")
    (home / "projects" / "-a" / "s1" / "subagents").mkdir(parents=True)
    (home / "projects" / "-a" / "s1" / "subagents" / "agent-x.jsonl").write_text("{}\n")
    h = Home(home)
    conn = state.connect(h.state_db)
    listed: Counter[str] = Counter()
    real = os.scandir

    def counting(path: Any = ".") -> Any:
        listed[str(path)] += 1
        return real(path)

    monkeypatch.setattr(os, "scandir", counting)
    try:
        stale = ledgerfiles.stale_sessions(conn, h)
    finally:
        monkeypatch.undo()
        conn.close()
    assert [(sf.key, sf.session_id, len(sf.subagents)) for sf in stale] == [("-a", "s1", 1), ("-a", "s2", 0),
                                                                            ("-b", "s3", 0)]  # fmt: skip
    assert listed and max(listed.values()) == 1, listed


def test_ingest_many_holds_its_turn_around_each_write_transaction(corpus_home: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """`turn()` is entered once per batch's transaction, outside any transaction, and held while it
    commits."""
    home = tmp_path / "h"
    shutil.copytree(corpus_home, home, ignore=shutil.ignore_patterns("memd"))
    monkeypatch.setattr(store, "BATCH_SESSIONS", 3)
    h = Home(home)
    conn = state.connect(h.state_db)
    seen: list[tuple[bool, bool]] = []

    @contextlib.contextmanager
    def turn() -> Any:
        before = conn.in_transaction
        yield
        seen.append((before, conn.in_transaction))

    todo = ledgerfiles.stale_sessions(conn, h)
    try:
        results = list(store.ingest_many(conn, todo, "2026-11-30T00:00:00.000Z", turn=turn))
    finally:
        conn.close()
    assert len(results) == len(todo) > 3
    assert seen == [(False, False)] * -(-len(todo) // 3)


def test_a_parallel_scan_asks_for_the_known_sessions_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent asks which sessions have a row once, before it forks, and every batch of every
    worker goes by that answer (each worker asked again for each of its batches); every session is
    still read and counted once."""
    home = tmp_path / "home"
    proj = home / "projects" / "-p"
    proj.mkdir(parents=True)
    for i in range(6):
        line = {"type": "user", "uuid": f"u{i}", "sessionId": f"s{i}", "timestamp": "2026-11-30T00:00:00.000Z",
                "message": {"role": "user", "content": "hello"}}  # fmt: skip
        (proj / f"s{i}.jsonl").write_text(json.dumps(line) + "\n")
    asked = tmp_path / "asked"
    real = store.known_sessions

    def counting(conn: Any) -> Any:  # forked workers append to the same file
        fd = os.open(asked, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        return real(conn)

    monkeypatch.setattr(store, "known_sessions", counting)
    monkeypatch.setattr(scan, "MIN_BATCH_BYTES", 1)  # a batch a session
    monkeypatch.setenv("MEMD_SCAN_WORKERS", "2")
    totals = scan.scan_home(Home(home))
    assert (totals["sessions"], totals["read"], totals["records"]) == (6, 6, 6)
    assert asked.read_text().split() == [str(os.getpid())]


def _small_home(home: Path, sessions: int) -> Home:
    proj = home / "projects" / "-p"
    proj.mkdir(parents=True)
    for i in range(sessions):
        line = {"type": "user", "uuid": f"u{i}", "sessionId": f"s{i}", "timestamp": "2026-11-30T00:00:00.000Z",
                "message": {"role": "user", "content": "hello"}}  # fmt: skip
        (proj / f"s{i}.jsonl").write_text(json.dumps(line) + "\n")
    return Home(home)


def test_a_workers_connection_leaves_checkpoints_to_the_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's commits never checkpoint the write-ahead log (SQLite's automatic checkpoint ran in
    the committing worker while it held the turn the other waited for)."""
    h = _small_home(tmp_path / "home", 2)
    monkeypatch.setattr(scan, "_WORKER_CONN", {})
    results = scan._ingest_batch(h, list(discover_sessions(h)))
    conn = scan._WORKER_CONN[str(h.state_db)]
    try:
        assert [r.records for r in results] == [1, 1]
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    finally:
        conn.close()


def test_the_parent_of_a_parallel_scan_checkpoints_as_results_come_in(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The parent, idle while its workers read, checkpoints (PASSIVE) after each CHECKPOINT_BYTES of
    results on its own connection: the log stays as short as when the workers checkpointed."""
    h = _small_home(tmp_path / "home", 6)
    statements: list[str] = []
    real = state.connect
    parent = os.getpid()

    def connect(path: Path, **kw: Any) -> Any:
        conn = real(path, **kw)
        if os.getpid() == parent:
            conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(scan.state, "connect", connect)
    monkeypatch.setattr(scan, "MIN_BATCH_BYTES", 1)  # a batch a session
    monkeypatch.setattr(scan, "CHECKPOINT_BYTES", 1)
    monkeypatch.setenv("MEMD_SCAN_WORKERS", "2")
    totals = scan.scan_home(h)
    assert (totals["sessions"], totals["records"]) == (6, 6)
    batches = scan._batches([p.stat().st_size for p in (h.projects / "-p").glob("*.jsonl")], 2)
    assert len(batches) > 1
    assert sum(s == "PRAGMA wal_checkpoint(PASSIVE)" for s in statements) == len(batches), statements


def test_a_checkpoint_that_fails_does_not_fail_the_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent's checkpoints only keep the log short: one that SQLite refuses leaves it longer and
    the scan goes on, every session read and kept (as SQLite's automatic checkpoint never failed a
    commit)."""
    h = _small_home(tmp_path / "home", 4)
    real = state.connect
    parent = os.getpid()
    refused: list[str] = []

    class Refusing:
        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

        def execute(self, sql: str, *args: Any) -> Any:
            if sql.startswith("PRAGMA wal_checkpoint"):
                refused.append(sql)
                raise sqlite3.OperationalError("disk I/O error")
            return self._conn.execute(sql, *args)

    def connect(path: Path, **kw: Any) -> Any:
        conn = real(path, **kw)
        return Refusing(conn) if os.getpid() == parent else conn

    monkeypatch.setattr(scan.state, "connect", connect)
    monkeypatch.setattr(scan, "MIN_BATCH_BYTES", 1)
    monkeypatch.setattr(scan, "CHECKPOINT_BYTES", 1)
    monkeypatch.setenv("MEMD_SCAN_WORKERS", "2")
    totals = scan.scan_home(h)
    assert refused and (totals["sessions"], totals["records"]) == (4, 4)
    conn = real(h.state_db)
    try:
        assert conn.execute("SELECT COUNT(*), SUM(records) FROM sessions").fetchone()[:] == (4, 4)
    finally:
        conn.close()
