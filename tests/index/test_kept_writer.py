"""`memd run-now index` keeps one search index writer for all its scopes (issue 27 point 4, i27l3):
search.sqlite is opened once, not once a scope; a database set aside by the drawer's whole-file check
is not written through the writer kept on it (the next scope opens the new one)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import jobs.index as index_job
from memd.index import writer
from memd.job.runner import run_job
from memd.memory.file import render_memory
from memd.tree import Home, Place
from tests.jobkit import context, make_settings
from tests.procs import invoke


def _home(root: Path) -> Home:
    home = Home(root)
    for d, names in ((home.global_memory, ("tabs",)), (home.project_memory("-a"), ("a1", "a2")),
                     (home.project_memory("-b"), ("b1",))):  # fmt: skip
        d.mkdir(parents=True)
        for n in names:
            (d / f"{n}.md").write_text(render_memory(n, f"about {n}", "user", f"body of {n}"))
    return home


def _rows(db: Path) -> list[tuple[str, str | None, str]]:
    conn = sqlite3.connect(db)
    try:
        return sorted(conn.execute("SELECT scope, project_key, name FROM memories").fetchall())
    finally:
        conn.close()


WANT = [("global", None, "tabs"), ("project", "-a", "a1"), ("project", "-a", "a2"), ("project", "-b", "b1")]


def test_run_now_index_opens_the_search_db_once_for_all_scopes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _home(tmp_path / "h")
    opened: list[str] = []
    real = writer.SearchIndex.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        opened.append(str(args[0]))
        real(self, *args, **kwargs)

    monkeypatch.setattr(writer.SearchIndex, "__init__", counted)
    for _ in range(2):  # built, then nothing changed
        opened.clear()
        r = invoke(["--home", str(home.root), "run-now", "index"])
        assert r.returncode == 0, r.stderr
        assert [line for line in r.stdout.splitlines() if line.startswith("index ")] == [
            "index global: ok", "index project:-a: ok", "index project:-b: ok"]  # fmt: skip
        assert opened == [str(home.search_db)]
    assert _rows(home.search_db) == WANT


def test_a_search_db_set_aside_is_not_written_through_the_kept_writer(tmp_path: Path) -> None:
    home = _home(tmp_path / "h")
    ctx = context(home.root, make_settings(), now=datetime.now(UTC) + timedelta(seconds=10))
    ctx.keep_search = True
    try:
        for place in (Place.project("-a"), Place("global"), Place.project("-b")):
            assert run_job(ctx, index_job, place).outcome == "ok"
        assert _rows(home.search_db) == WANT
        kept = ctx.search_index()
        assert kept is not None
        kept._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the file itself, the WAL empty
        data = bytearray(home.search_db.read_bytes())
        size = int.from_bytes(data[16:18], "big")
        for page in range(1, len(data) // size):  # the kept writer's file damaged: garbage in every page but the first
            data[page * size : page * size + 8] = b"\xff" * 8
        home.search_db.write_bytes(data)
        for place in (Place("global"), Place.project("-a"), Place.project("-b")):
            assert run_job(ctx, index_job, place).outcome == "ok"
    finally:
        ctx.drop_search()
        ctx.conn.close()
    assert list(home.memd_dir.glob("search.sqlite.corrupt-*")), "the damaged database was not set aside"
    assert _rows(home.search_db) == WANT  # the new database, filled by the scopes after the check
