"""The index job's nothing-changed answer without the scope's lock (`jobs.index.unlocked`, issue 27 point 4):
a scope whose record still vouches for it is told at once, even while another memd process holds its lock;
anything the locked run would act on (a changed file, a writer's temporary, problems `memd status` does not
show, git on, the search database's daily check) sends the run under the lock as before.

Real processes hold the locks (flock is per open file: another process is what a user meets).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs import index
from memd.job.context import JobContext
from memd.job.runner import run_job
from memd.memory.file import render_memory
from memd.tree import Home, Place
from tests.jobkit import context, make_settings
from tests.procs import memd_env

BUSY = 75  # EX_TEMPFAIL: `--no-wait` met a held lock


def _home(root: Path) -> Home:
    home = Home(root)
    d = home.project_memory("-p")
    d.mkdir(parents=True)
    for i in range(3):
        (d / f"m{i}.md").write_text(render_memory(f"m{i}", f"memory {i}", "project", f"body {i}"))
    (d / "broken.md").write_text("---\nname: [unclosed\n---\nx\n")  # a problem `memd status` shows
    home.global_memory.mkdir(parents=True)
    (home.global_memory / "g.md").write_text(render_memory("g", "a global one", "user", "global body"))
    return home


def _index(home: Home, *args: str) -> tuple[int, list[dict[str, object]], str]:
    r = subprocess.run([sys.executable, "-m", "memd", "--home", str(home.root), "run-now", "index", "--no-wait",
                        "--json", *args], capture_output=True, text=True, env=memd_env(), timeout=120)  # fmt: skip
    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else []), r.stderr


def _settled(tmp_path: Path, drawer: bool = False) -> Home:
    """A home whose scopes all hold a nothing-changed record (the first run writes the views, the second
    finds nothing to change and records it). `drawer`: and the search database's daily check passed on a
    file older than `SETTLED_SECONDS` (a third run, once it is), as the drawer's run wants it."""
    home = _home(tmp_path / "h")
    for _ in range(2):
        assert _index(home)[0] == 0
    if drawer:
        time.sleep(index.SETTLED_SECONDS + 0.2)
        assert _index(home)[0] == 0
    return home


def _hold(home: Home, place: Place) -> subprocess.Popen[str]:
    """Another memd process holding `place`'s lock until its stdin closes."""
    code = ("import sys\nfrom pathlib import Path\nfrom memd.locks import acquire\nfrom memd.tree import Home, Place\n"
            "kind, key = sys.argv[2], sys.argv[3] or None\n"
            "with acquire(Home(Path(sys.argv[1])), [Place(kind, key)], timeout=5):\n"
            "    print('held', flush=True)\n    sys.stdin.read()\n")  # fmt: skip
    holder = subprocess.Popen([sys.executable, "-c", code, str(home.root), place.kind, place.key or ""],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=memd_env())  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def _release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(timeout=30)


def _index_held(home: Home, places: list[Place], *args: str) -> tuple[int, list[dict[str, object]], str]:
    """`_index(home, *args)` while other processes hold `places`' locks."""
    holders = [_hold(home, place) for place in places]
    try:
        return _index(home, *args)
    finally:
        for holder in holders:
            _release(holder)


def test_an_unchanged_scope_is_told_while_another_process_holds_its_lock(tmp_path: Path) -> None:
    home = _settled(tmp_path, drawer=True)
    code, results, err = _index_held(home, [Place.project("-p"), Place("global")])
    assert code == 0, err
    got = {r["target"]: (r["outcome"], r["details"]) for r in results}  # type: ignore[index]
    assert set(got) == {"global", "project:-p"}
    outcome, details = got["project:-p"]
    assert outcome == "ok" and isinstance(details, dict)
    assert (details["memories"], details["problems"], details["changed"]) == (3, 1, False)


def test_a_changed_file_waits_for_the_lock_and_is_indexed_once_it_is_free(tmp_path: Path) -> None:
    home = _settled(tmp_path)
    (home.project_memory("-p") / "m1.md").write_text(render_memory("m1", "edited", "project", "zanzibar"))
    code, results, _err = _index_held(home, [Place.project("-p")], "--project", "-p")
    assert code == BUSY and [(r["outcome"], "lock busy" in str(r["reason"])) for r in results] == [("deferred", True)]
    assert _index(home, "--project", "-p")[0] == 0
    assert "edited" in (home.project_memory("-p") / "MEMORY.md").read_text()


def test_a_writers_temporary_sends_the_check_under_the_lock(tmp_path: Path) -> None:
    """A temporary in the directory: the locked run sweeps it once stale, or waits for its writer."""
    home = _settled(tmp_path)
    (home.project_memory("-p") / ".m0.md.x1y2z3.tmp").write_text("half a write")
    code, results, _err = _index_held(home, [Place.project("-p")], "--project", "-p")
    assert code == BUSY and [(r["outcome"], "lock busy" in str(r["reason"])) for r in results] == [("deferred", True)]


def test_problems_state_no_longer_shows_are_recorded_again(tmp_path: Path) -> None:
    """The record vouches for the files, not for `memd status`: a problems table that lost the scope's
    rows is written again by the run under the lock."""
    home = _settled(tmp_path)
    conn = sqlite3.connect(home.state_db)
    with conn:
        conn.execute("DELETE FROM problems WHERE source = 'memory:project:-p'")
    conn.close()
    assert _index_held(home, [Place.project("-p")], "--project", "-p")[0] == BUSY
    assert _index(home, "--project", "-p")[0] == 0
    conn = sqlite3.connect(home.state_db)
    rows = conn.execute("SELECT path, reason FROM problems WHERE source = 'memory:project:-p'").fetchall()
    conn.close()
    assert [Path(p).name for p, _reason in rows] == ["broken.md"]


@contextmanager
def _ctx(home: Home, **memd: object) -> Iterator[JobContext]:
    """A context on the home as the CLI left it, its clock past `SETTLED_SECONDS`, and the drawer's run done
    once with it (the search database's daily check passed on a settled file, as `_settled(drawer=True)`)."""
    now = datetime.now(UTC) + timedelta(seconds=index.SETTLED_SECONDS + 1)
    ctx = context(home.root, make_settings(memd=dict(memd)), now=now)
    ctx.keep_search = True  # as `memd run-now` keeps it
    try:
        index.run(ctx, Place("global"), force=False)
        yield ctx
    finally:
        ctx.drop_search()
        ctx.conn.close()


@pytest.mark.parametrize("place", [Place("global"), Place.project("-p")])
def test_the_answer_is_the_locked_runs_own(tmp_path: Path, place: Place) -> None:
    home = _settled(tmp_path)
    with _ctx(home) as ctx:
        told = index.unlocked(ctx, place)
        ran = index.run(ctx, place, force=False)
    assert told is not None and (told.outcome, told.reason, told.details) == (ran.outcome, ran.reason, ran.details)


def test_git_on_is_left_to_the_locked_run(tmp_path: Path) -> None:
    """With memd.git on, the run commits hand edits under the lock: nothing is told without it."""
    home = _settled(tmp_path)
    with _ctx(home) as ctx:
        assert index.unlocked(ctx, Place.project("-p")) is not None  # the control: git off
    with _ctx(home, git=True) as ctx:
        assert index.unlocked(ctx, Place.project("-p")) is None


def test_the_search_databases_daily_check_is_left_to_the_locked_run(tmp_path: Path) -> None:
    home = _settled(tmp_path)
    with _ctx(home) as ctx:
        assert index.unlocked(ctx, Place("global")) is not None  # the control: the daily check is not due
        ctx.conn.execute("DELETE FROM kv WHERE k = ?", (index.QUICK_CHECK_KEY,))
        assert index.unlocked(ctx, Place("global")) is None
        assert index.unlocked(ctx, Place.project("-p")) is not None  # only the drawer's run checks the database


def test_a_missing_or_linked_directory_is_left_to_the_locked_run(tmp_path: Path) -> None:
    home = _settled(tmp_path)
    with _ctx(home) as ctx:
        assert index.unlocked(ctx, Place.project("-p")) is not None  # the control
        assert index.unlocked(ctx, Place.project("-nope")) is None
        elsewhere = tmp_path / "elsewhere"
        home.project_memory("-p").rename(elsewhere)
        home.project_memory("-p").symlink_to(elsewhere)
        assert index.unlocked(ctx, Place.project("-p")) is None


def test_the_daemons_runs_take_the_lock_and_a_new_database_is_filled_whole(tmp_path: Path) -> None:
    """A context that opens a writer a run (the daemon's) is not told without the lock: a pre-check's own
    writer, opened and closed, would make a missing or damaged database anew and forget to fill it from every
    directory, and the next writer would sync one scope into an empty file (found in review)."""
    home = _settled(tmp_path)
    with _ctx(home) as ctx:
        assert index.unlocked(ctx, Place.project("-p")) is not None  # the control: a kept writer
    now = datetime.now(UTC) + timedelta(seconds=index.SETTLED_SECONDS + 1)
    ctx = context(home.root, make_settings(), now=now)  # keep_search off, as the daemon's contexts
    try:
        assert index.unlocked(ctx, Place.project("-p")) is None
        for suffix in ("", "-wal", "-shm"):
            Path(f"{home.search_db}{suffix}").unlink(missing_ok=True)
        assert run_job(ctx, index, Place.project("-p")).outcome == "ok"
    finally:
        ctx.conn.close()
    conn = sqlite3.connect(home.search_db)
    scopes = conn.execute("SELECT DISTINCT scope, project_key FROM memories ORDER BY 1, 2").fetchall()
    conn.close()
    assert scopes == [("global", None), ("project", "-p")]
