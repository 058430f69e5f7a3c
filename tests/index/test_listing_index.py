"""search.sqlite's `memories_listing` index (`memd.index.schema.EXTRA_INDEXES`): `memd list` reads a
directory's rows from it alone, in file order; a database made without it gets it at the writer's
next open and keeps its nothing-changed records; the listing is the same with and without it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import date
from pathlib import Path

from structlog.testing import capture_logs

from memd.index import fingerprint
from memd.index.listing import ROWS_SQL
from memd.index.refresh import refresh_dir
from memd.index.schema import EXTRA_INDEXES
from memd.index.writer import SearchIndex
from memd.memory.file import render_memory
from memd.tree import Home

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


def _plan(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return " ".join(r[-1] for r in conn.execute(f"EXPLAIN QUERY PLAN {ROWS_SQL}", ("project", "-p")))
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
                       capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(r.stdout)


def test_the_listing_reads_the_index_alone_in_file_order(tmp_path: Path) -> None:
    home, _d = _home(tmp_path)
    plan = _plan(home.search_db)
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
    assert "full" in logs[0]["error"]
    assert not _indexes(home.search_db) >= EXTRA_INDEXES.keys()
    assert conn.execute(ROWS_SQL, ("project", "-p")).fetchall() == rows
    conn.close()
    with SearchIndex.for_home(home):
        pass
    assert _indexes(home.search_db) >= EXTRA_INDEXES.keys()
