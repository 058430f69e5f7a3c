"""search.sqlite's `memories_listing` index (`memd.index.schema.EXTRA_INDEXES`): `memd list` reads a
directory's rows from it alone, in file order; a database made without it gets it at the writer's
next open and keeps its nothing-changed records; the listing is the same with and without it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from datetime import date
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from memd.index import fingerprint
from memd.index.listing import ROWS_SQL
from memd.index.refresh import refresh_dir
from memd.index.schema import EXTRA_INDEXES
from memd.index.writer import SearchIndex
from memd.memory.file import render_memory
from memd.tree import Home
from tests.procs import memd_env

TODAY = date(2026, 11, 20)
NAMES = ("zeta", "Alpha", "ébène", "b b", "m-1", "M_2", "日本")


def _home(tmp_path: Path) -> tuple[Home, Path]:
    home = Home(tmp_path / "h")
    d = home.project_memory("-p")
    d.mkdir(parents=True)
    for i, name in enumerate(NAMES):
        (d / f"{name}.md").write_text(render_memory(name, f"about {name}", ("user", "project")[i % 2], f"body {i}",
                                                    {"source": "memd"}))  # fmt: skip
    refresh_dir(home, "project", "-p", d, today=TODAY)
    refresh_dir(home, "project", "-p", d, today=TODAY)  # nothing changed: a record
    return home, d


def _plan(db: Path, scope: tuple[str, str | None] = ("project", "-p")) -> str:
    conn = sqlite3.connect(db)
    try:
        return " ".join(r[-1] for r in conn.execute(f"EXPLAIN QUERY PLAN {ROWS_SQL}", scope))
    finally:
        conn.close()


def _indexes(db: Path) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    finally:
        conn.close()


def _list(home: Home) -> object:
    r = subprocess.run([sys.executable, "-m", "memd", "--home", str(home.root), "list", "--all", "--json"],
                       capture_output=True, text=True, check=True, env=memd_env())  # fmt: skip
    return json.loads(r.stdout)


def test_the_listing_reads_the_index_alone_in_file_order(tmp_path: Path) -> None:
    home, _d = _home(tmp_path)
    for scope in (("project", "-p"), ("global", None)):
        plan = _plan(home.search_db, scope)
        assert "COVERING INDEX memories_listing" in plan and "TEMP B-TREE" not in plan, plan


def test_a_database_made_without_it_gets_it_and_keeps_its_records(tmp_path: Path) -> None:
    home, d = _home(tmp_path)
    key = fingerprint.record_key("project", "-p")
    with SearchIndex.for_home(home) as db:
        record = db.meta(key)
    assert record is not None
    conn = sqlite3.connect(home.search_db)
    for name in EXTRA_INDEXES:
        conn.execute(f"DROP INDEX {name}")
    conn.commit()
    conn.close()
    assert "memories_listing" not in _plan(home.search_db)
    without = _list(home)  # a reader never adds it (read-only), and lists the same from the table
    assert not _indexes(home.search_db) >= EXTRA_INDEXES.keys()
    with SearchIndex.for_home(home) as db:  # the writer's open puts it back: an index changes no row
        assert db.meta(key) == record
    assert _indexes(home.search_db) >= EXTRA_INDEXES.keys()
    assert not refresh_dir(home, "project", "-p", d, today=TODAY).changed
    assert _list(home) == without
    names = [m["name"] for m in without["memories"]] if isinstance(without, dict) else None
    assert names is not None and sorted(names) == sorted(NAMES)


def test_a_database_too_full_for_it_still_serves_and_gets_it_later(tmp_path: Path) -> None:
    """A full disk (SQLite's own cap, `max_page_count`, makes the same SQLITE_FULL) keeps the index from
    being made: the writer's open says so in one line and goes on, the rows unchanged; the next open makes it."""
    from memd.index.schema import ensure_schema  # noqa: PLC0415 - the function under test

    home, _d = _home(tmp_path)
    conn = sqlite3.connect(home.search_db, isolation_level=None)
    for name in EXTRA_INDEXES:
        conn.execute(f"DROP INDEX {name}")
    conn.execute("VACUUM")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    rows = conn.execute(ROWS_SQL, ("project", "-p")).fetchall()
    with capture_logs() as logs:
        assert ensure_schema(conn, home.search_db) is False  # not made afresh, and no error
    assert [(x["event"], x["index"]) for x in logs] == [("search_db.index_not_made", "memories_listing")]
    assert "full" in logs[0]["error"] and not conn.in_transaction
    assert not _indexes(home.search_db) >= EXTRA_INDEXES.keys()
    assert conn.execute(ROWS_SQL, ("project", "-p")).fetchall() == rows
    conn.close()
    with SearchIndex.for_home(home):
        pass
    assert _indexes(home.search_db) >= EXTRA_INDEXES.keys()


def test_a_busy_database_does_not_hold_the_open_for_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer holds the database: the missing index is not waited for (it is made at a later open),
    where a current database's open takes no write lock at all; the connection keeps its own busy timeout."""
    import memd.index.schema as schema  # noqa: PLC0415 - the module under test

    home, _d = _home(tmp_path)
    conn = sqlite3.connect(home.search_db, isolation_level=None)
    for name in EXTRA_INDEXES:
        conn.execute(f"DROP INDEX {name}")
    conn.execute("BEGIN IMMEDIATE")  # the other writer
    monkeypatch.setattr(schema, "BUSY_TIMEOUT_S", 120.0)  # a wait for the lock would outlast the join below
    got: list[tuple[int, list[dict[str, object]]]] = []

    def open_it() -> None:
        with capture_logs() as logs:
            db, _made = schema.open_db(home.search_db)
        got.append((db.execute("PRAGMA busy_timeout").fetchone()[0], logs))
        db.close()

    opener = threading.Thread(target=open_it, daemon=True)
    opener.start()
    try:
        opener.join(30)
        assert not opener.is_alive(), "the open waited for the other writer's lock"
    finally:
        conn.execute("ROLLBACK")
        opener.join(130)
        conn.close()
    (waits, logs), = got
    assert waits == 120_000
    assert [(x["event"], "locked" in str(x["error"])) for x in logs] == [("search_db.index_not_made", True)]
    with SearchIndex.for_home(home):
        pass
    assert _indexes(home.search_db) >= EXTRA_INDEXES.keys()


def test_a_sync_of_one_directory_still_finds_a_damaged_page_of_another(tmp_path: Path) -> None:
    """The writer's sync reads the table itself (`NOT INDEXED`), every page, not the covering index: damage
    in another directory's rows is found there and the database set aside and rebuilt, as before the index."""
    home = Home(tmp_path / "h")
    for key in ("-p", "-q"):
        d = home.project_memory(key)
        d.mkdir(parents=True)
        for i in range(40):
            (d / f"{key[1]}{i}.md").write_text(render_memory(f"{key[1]}{i}", f"about {key[1]}{i}", "user",
                                                             f"body {i} " + "words " * 80, {"source": "memd"}))  # fmt: skip
    for key in ("-p", "-q"):
        refresh_dir(home, "project", key, home.project_memory(key), today=TODAY)
    conn = sqlite3.connect(home.search_db, isolation_level=None)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(home.search_db.read_bytes())
    leaf = [n for n in range(1, len(data) // size) if data[n * size] == 0x0D
            and b"projects/-q/memory/q39.md" in data[n * size:(n + 1) * size]
            and b"projects/-p/" not in data[n * size:(n + 1) * size]]  # fmt: skip
    assert leaf, "no table page of -q's rows alone"
    data[leaf[0] * size:leaf[0] * size + 8] = b"\xff" * 8  # its page header: SQLite refuses the page
    home.search_db.write_bytes(bytes(data))
    d = home.project_memory("-p")
    (d / "p1.md").write_text((d / "p1.md").read_text() + "changed\n")
    from memd.memory.scan import scan_dir  # noqa: PLC0415 - only here

    with SearchIndex.for_home(home) as db:
        db.sync({("project", "-p"): scan_dir(d, "project", "-p").memories})
        assert db.repaired == 1
