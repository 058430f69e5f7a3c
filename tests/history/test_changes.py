"""One history for every write (memd.history.writes): an extraction run is listed, undone byte for byte,
the undo is itself undoable, and a file changed since stops the undo with its name."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobs import dream, extract
from memd.history import runs as history
from memd.history.writes import Recorder
from memd.job.runner import run_job
from memd.tree import Home, Place
from tests.jobkit import context, ingest, make_settings, write_session
from tests.jobs.dream.helpers import TARGET, make_ctx, mk_settings, offline_scope

KEY = "-work-app"
SID = "s1"
NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.md")) if p.name != "MEMORY.md"} if d.is_dir() else {}


def extract_offline(home: Path, text: str, start: int = 0) -> None:
    write_session(home / "projects" / KEY / f"{SID}.jsonl", [("user", text), ("assistant", "Noted.")], start=start)
    ingest(home)
    ctx = context(home, make_settings(memd={"provider": "offline"}))
    try:
        assert run_job(ctx, extract, Place.session(KEY, SID)).outcome == "ok"
    finally:
        ctx.conn.close()


def test_an_extraction_run_is_in_history_and_undone_byte_for_byte(tmp_path: Path) -> None:
    home = tmp_path / "h"
    mem = home / "projects" / KEY / "memory"
    extract_offline(home, "We decided to use Postgres for the billing service.")
    first = files(mem)
    extract_offline(home, "We decided to require two reviews for every database migration.", start=2)
    second = files(mem)
    assert len(first) == 1 and len(second) == 2
    runs = history.list_runs(Home(home), Place.project(KEY))
    assert [r["kind"] for r in runs] == ["write", "write"] and runs[-1]["job"] == "extract"
    assert runs[-1]["changes"]["added"] == sorted(set(second) - set(first))
    s = make_settings()
    info = history.undo(Home(home), s, Place.project(KEY), None, now=NOW, lock_timeout=1)
    assert files(mem) == first and info["undo_of"] == runs[-1]["run"]
    assert "Postgres" in (mem / "MEMORY.md").read_text() and "reviews" not in (mem / "MEMORY.md").read_text()
    history.undo(Home(home), s, Place.project(KEY), info["run"], now=NOW, lock_timeout=1)  # undo the undo
    assert files(mem) == second


def test_a_file_changed_since_stops_the_undo(tmp_path: Path) -> None:
    home = tmp_path / "h"
    mem = home / "projects" / KEY / "memory"
    extract_offline(home, "We decided to use Postgres for the billing service.")
    [name] = files(mem)
    (mem / name).write_text((mem / name).read_text() + "\nA hand edit.\n")
    before = files(mem)
    with pytest.raises(history.HistoryError, match=name):
        history.undo(Home(home), make_settings(), Place.project(KEY), None, now=NOW, lock_timeout=1)
    assert files(mem) == before


def test_a_damaged_kept_copy_is_refused(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    mem = home.project_memory(KEY)
    mem.mkdir(parents=True)
    target = mem / "note.md"
    target.write_text("---\nname: note\ndescription: d\ntype: project\n---\nold\n")
    rec = Recorder(home, Place.project(KEY), "remember", "test", NOW)
    rec.before(target)
    target.write_text("---\nname: note\ndescription: d\ntype: project\n---\nnew\n")
    info = rec.commit()
    assert info is not None and info["changes"]["updated"] == ["note.md"]
    (rec.entry / "before" / "note.md").write_text("tampered")
    with pytest.raises(history.HistoryError, match="checksum"):
        history.undo(home, make_settings(), Place.project(KEY), None, now=NOW, lock_timeout=1)
    assert "new" in target.read_text()


def _loose(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            if stat.S_IMODE(os.lstat(p).st_mode) & 0o077:
                out.append(p)
    return out


def test_history_is_private_and_undo_puts_the_modes_back(tmp_path: Path) -> None:
    """Claude Code makes memory directories 0755 and files 0644; memd's copies of them are 0700/0600,
    and an undo restores the user's modes."""

    home = tmp_path / "h"
    d = offline_scope(home)
    os.chmod(d, 0o755)
    for f in d.glob("*.md"):
        os.chmod(f, 0o644)
    before = {f.name: (f.read_bytes(), stat.S_IMODE(f.stat().st_mode)) for f in d.glob("*.md") if f.name != "MEMORY.md"}
    ctx = make_ctx(home, mk_settings(memd={"provider": "offline"}))
    assert run_job(ctx, dream, TARGET, force=True).outcome == "ok"
    assert _loose(home / "memd") == []
    history.undo(Home(home), mk_settings(), TARGET, None, now=NOW, lock_timeout=1)
    after = {f.name: (f.read_bytes(), stat.S_IMODE(f.stat().st_mode)) for f in d.glob("*.md") if f.name != "MEMORY.md"}
    assert after == before and stat.S_IMODE(d.stat().st_mode) == 0o755
    assert _loose(home / "memd") == []
