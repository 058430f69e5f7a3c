"""The drawer refresh's whole-file check of search.sqlite (`PRAGMA quick_check`, jobs/index.py): run
while the database is not the one the last passing check saw within a day, skipped otherwise; a
database changed since (written, garbage in a page) is checked, and set aside when damaged."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import jobs.index as index_job
from memd.index import schema
from memd.index.search import open_readonly
from memd.job.runner import run_job
from memd.memory.file import render_memory
from memd.tree import Place
from tests.jobkit import context, make_settings

IDENT = [[1, 2, 3, 4, 5], None]


def test_quick_check_due_only_for_another_file_or_after_a_day() -> None:
    rec = json.dumps({"ident": IDENT, "at": 1000.0})
    assert not index_job.quick_check_due(rec, IDENT, 1000.0 + 3600)
    assert index_job.quick_check_due(rec, [[1, 2, 3, 4, 6], None], 1001.0)  # written since
    assert index_job.quick_check_due(rec, [[1, 2, 3, 4, 5], [1, 9, 0, 4, 4]], 1001.0)  # a WAL now
    assert index_job.quick_check_due(rec, IDENT, 1000.0 + index_job.QUICK_CHECK_EVERY_SECONDS)
    assert index_job.quick_check_due(rec, IDENT, 999.0)  # a clock set back: check
    assert index_job.quick_check_due(None, IDENT, 1000.0) and index_job.quick_check_due(rec, None, 1000.0)
    assert index_job.quick_check_due("not json", IDENT, 1000.0) and index_job.quick_check_due("{}", IDENT, 1000.0)


def test_settled_wants_every_file_older_than_a_clock_tick() -> None:
    ns = 1_000_000_000
    assert index_job.settled([[0, 0, 0, 10 * ns, 10 * ns], None], 13.0)
    assert not index_job.settled([[0, 0, 0, 10 * ns, 12 * ns], None], 13.0)  # its ctime: changed just now
    assert not index_job.settled([[0, 0, 0, 1 * ns, 1 * ns], [0, 0, 0, 12 * ns, 12 * ns]], 13.0)


def test_the_drawer_refresh_checks_an_unchanged_search_db_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "h"
    (home / "memory").mkdir(parents=True)
    (home / "memory" / "tabs.md").write_text(render_memory("tabs", "Tabs", "user", "Tabs."))
    checked: list[str] = []
    real = schema.problem

    def problem(path: Path | str) -> str | None:
        checked.append(str(path))
        return real(path)

    monkeypatch.setattr(schema, "problem", problem)

    def run(later: float) -> None:  # the clock well past the database's last write: its stat is settled
        ctx = context(home, make_settings(), now=datetime.now(UTC) + timedelta(seconds=later))
        try:
            assert run_job(ctx, index_job, Place("global")).outcome == "ok"
        finally:
            ctx.conn.close()

    for _ in range(3):  # builds search.sqlite; finds nothing changed and records so (a write: checked again)
        run(10)
    n = len(checked)
    run(10)  # the file the last check saw, unchanged by the nothing-changed refresh
    run(20)
    assert len(checked) == n and n >= 2  # not checked again
    reader = open_readonly(home / "memd" / "search.sqlite")  # as `memd list` and the hooks read it
    assert reader.execute("SELECT count(*) FROM memories").fetchone() == (1,)
    reader.close()
    wal = home / "memd" / "search.sqlite-wal"
    assert wal.exists() and wal.stat().st_size == 0  # the reader's empty WAL: no page in it
    run(25)
    assert len(checked) == n  # the same database
    db = home / "memd" / "search.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the file itself (this process may hold the WAL open)
    conn.close()
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    for page in range(1, len(data) // size):  # garbage in the header of every page but the first
        data[page * size : page * size + 8] = b"\xff" * 8
    db.write_bytes(data)
    run(30)
    assert len(checked) == n + 1 and list(db.parent.glob("search.sqlite.corrupt-*")), "the damaged database was not set aside"
    run(40 + index_job.QUICK_CHECK_EVERY_SECONDS)  # a day on: checked again, whatever its stat
    assert len(checked) >= n + 2
