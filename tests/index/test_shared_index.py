"""Two writers, one folder, nothing lost (SPEC §14): a Claude Code project's `memory/` as Claude Code
itself leaves it — a `MEMORY.md` with lines no memory file backs, a topic file without front matter —
maintained by memd through the real CLI, real files and the history.

Every case here failed on main before the shared index: `memd run-now index` replaced the stock
MEMORY.md with its own render (the note gone, no history run) and rejected `debugging.md`."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobs import dream
from memd.history.writes import Recorder
from memd.index import refresh
from memd.index.refresh import write_index
from memd.index.render import INDEX_END_PREFIX, INDEX_HEADER, render_memory_index
from memd.job.runner import run_job
from memd.memory.scan import scan_dir
from memd.tree import Home, Place
from tests.jobs.dream.helpers import KEY as DREAM_KEY
from tests.jobs.dream.helpers import TARGET, make_ctx, mk_settings, offline_scope
from tests.write.kit import KEY, cli, cli_json, memory_dir, settings, write_memory

NOTE = "The flaky test is tests/test_hooks.py::test_timeout; rerun it once before debugging."
STOCK = f"# Memory index\n\n- [Flaky test](flaky_test.md) — which test flakes and what to do\n{NOTE}\n"
DEBUGGING = "# Debugging notes\n\nRun the suite with -x; the fixtures leak temp dirs when interrupted.\n"


def _project(tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "h"
    settings(home)
    d = memory_dir(home)
    d.mkdir(parents=True)
    return home, d


def test_stock_memory_md_keeps_every_line_and_the_rewrite_is_undoable(tmp_path: Path) -> None:
    home, d = _project(tmp_path)
    write_memory(home, "ci-is-slow", "CI takes 40 minutes.")
    (d / "MEMORY.md").write_text(STOCK)
    (d / "MEMORY.md").chmod(0o644)

    r = cli(home, "run-now", "index", "--project", KEY)
    assert r.returncode == 0, r.stderr
    text = (d / "MEMORY.md").read_text()
    assert STOCK in text  # every line the agent wrote, verbatim and in order
    assert "- [ci-is-slow](ci-is-slow.md) — about ci-is-slow" in text  # and memd's own index
    assert text.startswith(INDEX_HEADER)
    assert stat.S_IMODE((d / "MEMORY.md").stat().st_mode) == 0o644  # the file's mode is kept

    runs = [x for x in cli_json(home, "history", "--project", KEY) if x.get("job") == "index"]
    assert len(runs) == 1 and runs[0]["changes"] == {"added": [], "updated": ["MEMORY.md"], "deleted": []}
    again = cli(home, "run-now", "index", "--project", KEY)
    assert again.returncode == 0 and (d / "MEMORY.md").read_text() == text  # stable: no rewrite, no run
    assert len([x for x in cli_json(home, "history", "--project", KEY) if x.get("job") == "index"]) == 1

    undo = cli(home, "undo", runs[0]["run"], "--project", KEY)
    assert undo.returncode == 0, undo.stderr
    assert STOCK in (d / "MEMORY.md").read_text()


def test_topic_file_without_front_matter_is_a_memory_in_the_index(tmp_path: Path) -> None:
    home, d = _project(tmp_path)
    (d / "debugging.md").write_text(DEBUGGING)
    r = cli(home, "run-now", "index", "--project", KEY)
    assert r.returncode == 0, r.stderr
    assert "- [debugging](debugging.md) — Debugging notes" in (d / "MEMORY.md").read_text()
    assert (d / "debugging.md").read_text() == DEBUGGING  # never rewritten to add front matter
    scanned = scan_dir(d, "project", KEY)
    assert [m.name for m in scanned.memories] == ["debugging"] and not scanned.problems
    assert [n.path.name for n in scanned.notes] == ["debugging.md"]
    assert "no front matter: indexed as a project memory named 'debugging'" in scanned.notes[0].reason
    found = cli_json(home, "search", "fixtures leak", "--project", KEY)
    assert any("debugging" in str(h) for h in found), found  # search finds it too
    status = cli(home, "status")
    assert "no front matter" in status.stdout + status.stderr  # reported as such


def test_agent_lines_appended_after_memds_block_survive_a_forget(tmp_path: Path) -> None:
    home, d = _project(tmp_path)
    write_memory(home, "ci-is-slow", "CI takes 40 minutes.")
    write_memory(home, "old-board", "The board moved.")
    assert cli(home, "run-now", "index", "--project", KEY).returncode == 0
    # Claude Code's auto-memory: a topic file (its front matter, top-level type) and a pointer appended.
    (d / "flaky_test.md").write_text("---\nname: Flaky test\ndescription: which test flakes\ntype: project\n---\n\n"
                                     + NOTE + "\n")  # fmt: skip
    with (d / "MEMORY.md").open("a") as fh:
        fh.write("- [Flaky test](flaky_test.md) — which test flakes and what to do\r\n")
        fh.write(NOTE + "\n")
    r = cli(home, "forget", "old-board", "--project", KEY)
    assert r.returncode == 0, r.stderr
    text = (d / "MEMORY.md").read_bytes().decode()
    assert "old-board" not in text  # memd's own line of a memory it deleted goes
    assert "- [Flaky test](flaky_test.md) — which test flakes and what to do\r\n" + NOTE + "\n" in text
    assert text.count("flaky_test.md") == 1  # the agent's pointer indexes its file; memd adds no second line
    assert "- [ci-is-slow](ci-is-slow.md)" in text


def test_a_line_put_inside_memds_block_is_kept_and_memds_stale_lines_go(tmp_path: Path) -> None:
    home, d = _project(tmp_path)
    write_memory(home, "keep", "Kept.")
    write_memory(home, "gone", "Gone soon.")
    memories = scan_dir(d, "project", KEY).memories
    first = render_memory_index(memories).text
    edited = first.replace("## Project\n", "## Project\n\nNote from /memory: ask before deploying.\n")
    (d / "gone.md").unlink()
    after = render_memory_index(scan_dir(d, "project", KEY).memories, existing=edited)
    assert after.foreign and "Note from /memory: ask before deploying." in after.text
    assert "gone" not in after.text.split(INDEX_END_PREFIX)[0]  # memd's block is rebuilt...
    assert "- [gone](gone.md)" in after.text  # ...but a block edited by someone else keeps memd's stale line too
    untouched = render_memory_index(scan_dir(d, "project", KEY).memories, existing=first)
    assert not untouched.foreign and "gone" not in untouched.text  # memd's verified block: stale lines go


def test_a_write_by_the_agent_between_read_and_swap_is_kept(tmp_path: Path) -> None:
    home, d = _project(tmp_path)
    write_memory(home, "keep", "Kept.")
    index = d / "MEMORY.md"
    index.write_text(STOCK)
    rec = Recorder(Home(home), Place.project(KEY), "index", "test", datetime.now(UTC))
    late = "- [Late](late.md) — written by the agent while memd was merging\n"

    def agent_writes_then_record(path: Path) -> None:
        rec.before(path)
        with path.open("a") as fh:  # the agent's Write lands after memd read the file, before its swap
            fh.write(late)

    done = write_index(index, scan_dir(d, "project", KEY).memories, record=agent_writes_then_record)
    assert done.written and done.merges == 1
    text = index.read_text()
    assert STOCK in text and text.endswith(late) and "- [keep](keep.md)" in text
    assert not [n for n in os.listdir(d) if n.endswith(".tmp")]
    assert rec.commit() is not None


def test_crlf_and_undecodable_bytes_of_the_agents_lines_are_kept(tmp_path: Path) -> None:
    home, d = _project(tmp_path)
    write_memory(home, "keep", "Kept.")
    index = d / "MEMORY.md"
    raw = b"# Index\r\n- caf\xe9 (latin-1 byte)\r\n"
    index.write_bytes(raw)
    write_index(index, scan_dir(d, "project", KEY).memories)
    assert index.read_bytes().endswith(raw)
    once = index.read_bytes()
    assert not write_index(index, scan_dir(d, "project", KEY).memories).written and index.read_bytes() == once


def test_a_dream_keeps_the_agents_lines_of_memory_md(tmp_path: Path) -> None:
    home = tmp_path / "h"
    d = offline_scope(home)
    (d / "MEMORY.md").write_text(f"{NOTE}\n- [Debugging](debugging.md) — how to debug\n")
    (d / "debugging.md").write_text(DEBUGGING)
    assert run_job(make_ctx(home, mk_settings()), dream, TARGET, force=True).outcome == "ok"
    text = (d / "MEMORY.md").read_text()
    assert f"{NOTE}\n- [Debugging](debugging.md) — how to debug\n" in text and "tabs" in text
    assert (d / "debugging.md").read_text() == DEBUGGING and DREAM_KEY in str(d)


def test_without_an_atomic_exchange_the_compare_before_rename_keeps_the_agents_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(refresh, "_exchange", lambda tmp, path: False)  # a system without renameat2
    home, d = _project(tmp_path)
    write_memory(home, "keep", "Kept.")
    index = d / "MEMORY.md"
    index.write_text(STOCK)
    late = "- [Late](late.md) — written by the agent while memd was merging\n"

    def agent_writes(path: Path) -> None:
        with path.open("a") as fh:
            fh.write(late)

    done = write_index(index, scan_dir(d, "project", KEY).memories, record=agent_writes)
    assert done.written and done.merges == 1
    assert STOCK in index.read_text() and index.read_text().endswith(late)


def test_plain_undo_after_remember_in_a_shared_folder_undoes_the_remember(tmp_path: Path) -> None:
    home, d = _project(tmp_path)
    (d / "MEMORY.md").write_text(STOCK)
    r = cli_json(home, "remember", "We decided that migrations ship a day before the code.", "--project", KEY)
    path = home / r["file"]
    assert path.exists() and STOCK in (d / "MEMORY.md").read_text()
    jobs = [x.get("job") for x in cli_json(home, "history", "--project", KEY)]
    assert "index" in jobs  # the shared MEMORY.md's rewrite is a run of its own...
    undo = cli(home, "undo", "--project", KEY)
    assert undo.returncode == 0, undo.stderr
    assert not path.exists()  # ...but plain `memd undo` undoes the remember
    text = (d / "MEMORY.md").read_text()
    assert STOCK in text and path.name not in text
