"""The nothing-changed index check (`memd.index.fingerprint`): a refresh that found nothing to change
leaves a record, the next one compares stats and search rows instead of reading files, and every
change a full refresh would see still makes it run whole."""

from __future__ import annotations

import os
import sqlite3
from datetime import date
from pathlib import Path

from memd.index import fingerprint
from memd.index.refresh import RefreshResult, refresh_dir
from memd.index.schema import RECORD_TRIGGERS
from memd.index.writer import SearchIndex
from memd.memory.file import Memory, render_memory
from memd.tree import Home

TODAY = date(2026, 11, 20)


def _home(tmp_path: Path) -> tuple[Home, Path]:
    home = Home(tmp_path / "h")
    d = home.project_memory("-p")
    d.mkdir(parents=True)
    for i, kind in enumerate(("user", "feedback", "project")):
        (d / f"m{i}.md").write_text(render_memory(f"m{i}", f"about m{i}", kind, f"body {i}", {"source": "memd"}))
    (d / "bare.md").write_text("# Debugging notes\n\nrun the tests twice\n")  # no front matter: a note each time
    (d / "broken.md").write_text("---\nname: [unclosed\n---\nx\n")  # a problem each time
    return home, d


def _refresh(home: Home, d: Path) -> RefreshResult:
    return refresh_dir(home, "project", "-p", d, today=TODAY)


def _record(home: Home) -> str | None:
    with SearchIndex.for_home(home) as db:
        return db.meta(fingerprint.record_key("project", "-p"))


def _same(a: RefreshResult, b: RefreshResult) -> None:
    assert [(str(p.path), p.reason) for p in a.problems] == [(str(p.path), p.reason) for p in b.problems]
    assert [(str(p.path), p.reason) for p in a.notes] == [(str(p.path), p.reason) for p in b.notes]
    assert (a.index_warning, a.memories, a.drawer_mode) == (b.index_warning, b.memories, b.drawer_mode)


def test_a_second_unchanged_refresh_leaves_a_record_and_the_third_returns_the_same_outcome(tmp_path: Path) -> None:
    home, d = _home(tmp_path)
    first = _refresh(home, d)
    assert first.changed and _record(home) is None  # a refresh that wrote leaves no record
    second = _refresh(home, d)
    assert not second.changed and _record(home) is not None
    third = _refresh(home, d)
    assert not third.changed and third.memories == 4 and len(third.notes) == 1 and len(third.problems) == 1
    _same(second, third)


def _rows(home: Home) -> dict[str, tuple[str, float, int]]:
    conn = sqlite3.connect(home.search_db)
    try:
        return {f: (desc, mtime, size) for f, desc, mtime, size in conn.execute("SELECT file, description, mtime, size FROM memories")}
    finally:
        conn.close()


def _steady(tmp_path: Path) -> tuple[Home, Path]:
    home, d = _home(tmp_path)
    for _ in range(2):
        _refresh(home, d)
    assert _record(home) is not None
    return home, d


def test_a_touched_file_is_seen(tmp_path: Path) -> None:
    home, d = _steady(tmp_path)
    st = (d / "m0.md").stat()
    os.utime(d / "m0.md", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    r = _refresh(home, d)
    assert r.changed and r.search is not None and r.search.updated == 1


def test_new_bytes_under_the_same_mtime_are_seen_by_their_size(tmp_path: Path) -> None:
    home, d = _steady(tmp_path)
    st = (d / "m1.md").stat()
    with open(d / "m1.md", "r+") as fh:  # in place: same inode, as an editor may write
        fh.write(render_memory("m1", "a longer description now", "feedback", "body 1", {"source": "memd"}))
    os.utime(d / "m1.md", ns=(st.st_atime_ns, st.st_mtime_ns))
    r = _refresh(home, d)
    assert r.changed
    assert _rows(home)["projects/-p/memory/m1.md"][0] == "a longer description now"
    assert "a longer description now" in (d / "MEMORY.md").read_text()


def test_a_removed_file_leaves_search_and_the_index(tmp_path: Path) -> None:
    home, d = _steady(tmp_path)
    (d / "m2.md").unlink()
    r = _refresh(home, d)
    assert r.changed and "projects/-p/memory/m2.md" not in _rows(home) and "m2.md" not in (d / "MEMORY.md").read_text()


def test_memory_md_edited_or_removed_is_seen(tmp_path: Path) -> None:
    home, d = _steady(tmp_path)
    index = d / "MEMORY.md"
    index.write_text(index.read_text().replace("about m0", "about m0, edited inside memd's block"))
    r = _refresh(home, d)
    assert r.index_written and "edited inside" not in index.read_text().split("<!-- end of memd's index")[0]
    _refresh(home, d)
    index.unlink()
    assert _refresh(home, d).index_written and index.exists()


def test_rows_changed_behind_the_record_make_it_run_whole(tmp_path: Path) -> None:
    home, d = _steady(tmp_path)
    conn = sqlite3.connect(home.search_db)
    conn.execute("DELETE FROM memories WHERE file = 'projects/-p/memory/m0.md'")
    conn.commit()
    conn.close()
    r = _refresh(home, d)
    assert r.search is not None and r.search.added == 1 and "projects/-p/memory/m0.md" in _rows(home)


def test_a_damaged_database_is_still_found_on_the_unchanged_path(tmp_path: Path) -> None:
    home, d = _steady(tmp_path)
    # a damaged page in the rows' table: the record itself (in `meta`) still reads
    conn = sqlite3.connect(home.search_db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'memories'").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(home.search_db.read_bytes())
    data[(root - 1) * size : (root - 1) * size + 8] = b"\xff" * 8  # the table's root page header
    home.search_db.write_bytes(data)
    r = _refresh(home, d)
    assert list(home.search_db.parent.glob("search.sqlite.corrupt-*")), "the damaged database was not set aside"
    assert r.memories == 4 and set(_rows(home)) >= {f"projects/-p/memory/m{i}.md" for i in range(3)}


def test_a_changed_search_only_memory_is_seen(tmp_path: Path) -> None:
    """`also` (a MewCode project's own memories, in search only) is part of what the record covers."""
    home, d = _home(tmp_path)
    other = home.root / "elsewhere.md"

    def also(desc: str, mtime: float) -> list[Memory]:
        return [Memory(other, "elsewhere", desc, "project", "b", mtime, 10, "project", "-p")]

    for _ in range(2):
        refresh_dir(home, "project", "-p", d, today=TODAY, also=also("first", 1.0))
    assert _record(home) is not None
    r = refresh_dir(home, "project", "-p", d, today=TODAY, also=also("second", 2.0))
    assert r.search is not None and r.search.updated == 1 and _rows(home)["elsewhere.md"][0] == "second"


def test_a_row_written_behind_the_record_drops_it(tmp_path: Path) -> None:
    """Any write to a directory's rows (even one that keeps file, size and mtime) drops its record
    in the same transaction (`schema.RECORD_TRIGGERS`): the check trusts a record without reading rows."""
    home, d = _steady(tmp_path)
    conn = sqlite3.connect(home.search_db)
    conn.execute("UPDATE memories SET description = 'changed by hand' WHERE file = 'projects/-p/memory/m0.md'")
    conn.commit()
    conn.close()
    assert _record(home) is None
    _refresh(home, d)  # runs whole (MEMORY.md follows the rows, whose file's size and mtime still match)
    assert not _refresh(home, d).changed and _record(home) is not None  # then a record again


def test_a_database_made_before_the_triggers_gets_them_and_loses_its_records(tmp_path: Path) -> None:
    home, d = _steady(tmp_path)
    conn = sqlite3.connect(home.search_db)
    for name in RECORD_TRIGGERS:
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("DELETE FROM memories WHERE file = 'projects/-p/memory/m0.md'")  # unseen: no trigger
    conn.commit()
    conn.close()
    assert _record(home) is None  # the writer's open put the triggers back and dropped every record
    conn = sqlite3.connect(home.search_db)
    assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")} >= set(RECORD_TRIGGERS)
    conn.close()
    r = _refresh(home, d)
    assert r.search is not None and r.search.added == 1 and "projects/-p/memory/m0.md" in _rows(home)


def test_a_row_added_behind_the_record_changes_its_count(tmp_path: Path) -> None:
    """A stray row (a file the directory does not hold) inserted by another writer: the record's
    row count no longer matches, the refresh runs whole and its sync removes the row."""
    home, d = _steady(tmp_path)
    conn = sqlite3.connect(home.search_db)
    conn.execute("INSERT INTO memories (scope, project_key, file, name, description, type, body, mtime, size) "
                 "VALUES ('project', '-p', 'projects/-p/memory/ghost.md', 'ghost', 'no file', 'user', 'b', 1.0, 1)")  # fmt: skip
    conn.commit()
    conn.close()
    r = _refresh(home, d)
    assert r.search is not None and r.search.removed == 1 and "projects/-p/memory/ghost.md" not in _rows(home)


def test_a_row_replaced_behind_the_record_changes_its_ids(tmp_path: Path) -> None:
    """The reviewer's case: `INSERT OR REPLACE` over a row (same file: `file` is UNIQUE) deletes it without
    firing the delete trigger (recursive_triggers is off) and keeps the count, so the record said
    "unchanged" without running whole. The replaced row has a new id, which the record's sum of ids
    catches: the refresh runs whole (as after an UPDATE, above), then records the rows it saw."""
    home, d = _steady(tmp_path)
    before = _record(home)
    conn = sqlite3.connect(home.search_db)
    conn.execute("INSERT OR REPLACE INTO memories (scope, project_key, file, name, description, type, body, mtime, size) "
                 "SELECT scope, project_key, file, name, 'EDITED BY HAND', type, body, mtime, size FROM memories "
                 "WHERE file = 'projects/-p/memory/m0.md'")  # fmt: skip
    conn.commit()
    conn.close()
    assert _record(home) == before  # no trigger saw it
    assert _refresh(home, d).changed  # run whole: MEMORY.md follows the rows (as after an UPDATE); on main, the record
    assert not _refresh(home, d).changed
    after = _record(home)
    assert after is not None and after != before  # recorded again with the ids' new sum


def test_a_record_made_before_the_ids_sum_is_not_trusted() -> None:
    assert fingerprint.read_record('{"state": "s", "rows": 3, "outcome": {}}') is None
    assert fingerprint.read_record('{"state": "s", "rows": [3, 6], "outcome": {}}') is not None
