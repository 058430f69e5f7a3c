"""MewCode projects as MewCode lays them out (its seed §1; issue 26 point 2): sessions in the project's
own `.mewcode/sessions/{id}.jsonl` with `{id}.meta` beside each, found from `memd.roots` and from the
projects memd knows; links followed only within those places; `.meta` titles shown."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from structlog.testing import capture_logs

from memd import state
from memd.keys import project_key
from memd.ledger import files as ledgerfiles
from memd.ledger import outside
from memd.ledger import store as ledger
from memd.settings import parse_text
from memd.tree import Home
from memd.ui.views import daemon_page
from tests.procs import run_memd

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "mewcode" / "mew-0001.jsonl"
NOW = "2026-11-30T00:00:00.000Z"


def mew_project(project: Path, sid: str = "mew-0001", title: str = "lint and deploy") -> Path:
    """A project as MewCode leaves it: `.mewcode/sessions/{id}.jsonl` and `{id}.meta` (title, counts, times)."""
    sessions = project / ".mewcode" / "sessions"
    sessions.mkdir(parents=True)
    shutil.copy(FIXTURE, sessions / f"{sid}.jsonl")
    meta = {"title": title, "message_count": 14, "token_count": 512,
            "created_at": "2026-10-01T09:00:00Z", "last_active": "2026-10-01T09:04:12Z"}  # fmt: skip
    (sessions / f"{sid}.meta").write_text(json.dumps(meta, ensure_ascii=False))
    return project


def set_roots(home: Path, roots: list[str]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps({"memd": {"roots": roots}}))


def sessions_json(home: Path) -> list[dict]:
    r = run_memd(home, "sessions", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_root_of_projects_gives_their_own_sessions_with_meta_titles(home: Path, tmp_path: Path) -> None:
    code = tmp_path / "code"
    proj = mew_project(code / "shop", title="结账页面重构")
    set_roots(home, [str(code)])
    rows = sessions_json(home)
    assert [(r["key"], r["session_id"], r["format"]) for r in rows] == [(project_key(proj), "mew-0001", "mewcode")]
    assert rows[0]["human_turns"] > 0 and rows[0]["path"] == str(proj / ".mewcode" / "sessions" / "mew-0001.jsonl")
    r = run_memd(home, "sessions")
    assert r.returncode == 0 and "结账页面重构" in r.stdout, r.stdout
    # A root may be the project itself; the same directory is one place, found once.
    set_roots(home, [str(proj), str(code)])
    assert [r["session_id"] for r in sessions_json(home)] == ["mew-0001"]


def test_a_project_memd_knows_from_a_session_cwd_is_looked_in(home: Path, tmp_path: Path) -> None:
    proj = mew_project(tmp_path / "work" / "api")
    (proj / ".git").mkdir()
    key = project_key(proj)
    rec = {"type": "user", "uuid": "u1", "sessionId": "c1", "cwd": str(proj),
           "message": {"role": "user", "content": "hello"}}  # fmt: skip
    (home / "projects" / key).mkdir(parents=True)
    (home / "projects" / key / "c1.jsonl").write_text(json.dumps(rec) + "\n")
    rows = sessions_json(home)  # no roots configured: the Claude Code session's cwd names the project
    assert sorted((r["key"], r["session_id"]) for r in rows) == [(key, "c1"), (key, "mew-0001")]


def test_appends_in_a_projects_own_sessions_are_seen_by_the_stale_check(home: Path, tmp_path: Path) -> None:
    proj = mew_project(tmp_path / "p")
    h = Home(home)
    conn = state.connect(h.state_db)
    found = outside.find(conn, h, [str(proj)])
    assert [s.session_id for s in ledgerfiles.stale_sessions(conn, h, outside=found)] == ["mew-0001"]
    for sf in ledgerfiles.stale_sessions(conn, h, outside=found):
        ledger.ingest(conn, sf, NOW)
    assert ledgerfiles.stale_sessions(conn, h, outside=found) == []
    with open(proj / ".mewcode" / "sessions" / "mew-0001.jsonl", "a") as fh:
        fh.write(json.dumps({"type": "user", "content": "one more thing", "timestamp": "2026-10-01T10:00:00Z"}) + "\n")
    assert [s.session_id for s in ledgerfiles.stale_sessions(conn, h, outside=found)] == ["mew-0001"]
    conn.close()


def test_a_link_in_the_home_to_a_project_inside_a_root_is_followed(home: Path, tmp_path: Path) -> None:
    proj = mew_project(tmp_path / "code" / "shop")
    key = project_key(proj)
    (home / "projects" / key).mkdir(parents=True)
    os.symlink(proj / ".mewcode", home / "projects" / key / ".mewcode")
    set_roots(home, [str(tmp_path / "code")])
    rows = sessions_json(home)
    assert [(r["key"], r["session_id"]) for r in rows] == [(key, "mew-0001")]  # once, not through both routes


def test_a_link_pointing_outside_the_roots_is_not_followed(home: Path, tmp_path: Path) -> None:
    elsewhere = mew_project(tmp_path / "elsewhere" / "secret")
    code = tmp_path / "code"
    (code / "linked").mkdir(parents=True)
    os.symlink(elsewhere / ".mewcode", code / "linked" / ".mewcode")  # the project's .mewcode points away
    os.symlink(elsewhere, code / "whole")  # a linked project directory, too
    (home / "projects" / "k").mkdir(parents=True)
    os.symlink(elsewhere / ".mewcode", home / "projects" / "k" / ".mewcode")  # and a link in the home
    set_roots(home, [str(code)])
    assert sessions_json(home) == []
    # The same links are followed once their target is inside a root.
    set_roots(home, [str(code), str(tmp_path / "elsewhere")])
    assert [r["session_id"] for r in sessions_json(home)] == ["mew-0001"]


def test_a_malformed_meta_is_ignored_with_one_line(home: Path, tmp_path: Path) -> None:
    proj = mew_project(tmp_path / "p")
    (proj / ".mewcode" / "sessions" / "mew-0001.meta").write_text("{not json")
    set_roots(home, [str(proj)])
    r = run_memd(home, "sessions")
    assert r.returncode == 0 and "mew-0001" in r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ".meta" in ln]
    assert len(lines) == 1 and "mew-0001.meta: not JSON; its title is ignored" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    (proj / ".mewcode" / "sessions" / "mew-0001.meta").write_text(json.dumps({"title": ["x"]}))
    r = run_memd(home, "sessions")
    assert r.returncode == 0 and "its title is not a string" in r.stderr


def test_roots_that_are_not_a_list_of_directories_are_one_line_naming_the_field(home: Path) -> None:
    for bad, why in ((["relative/dir"], "item 1 is not absolute"), ("~/code", "not a list of directories"),
                     (["/a", 3], "item 2 is not a string")):  # fmt: skip
        s = parse_text(json.dumps({"memd": {"roots": bad}}))
        assert s.memd.roots == [] and len(s.warnings) == 1, s.warnings
        assert s.warnings[0].startswith("memd.roots: ") and why in s.warnings[0] and "\n" not in s.warnings[0]
    assert parse_text(json.dumps({"memd": {"roots": ["~/code", "/srv/x"]}})).memd.roots == ["~/code", "/srv/x"]


def test_the_pages_sessions_show_the_meta_title_and_say_a_malformed_one_in_the_log(home: Path, tmp_path: Path) -> None:
    proj = mew_project(tmp_path / "p", title="结账页面重构")
    set_roots(home, [str(proj)])
    assert run_memd(home, "scan").returncode == 0
    now = datetime(2026, 12, 1, tzinfo=UTC)
    assert [r["title"] for r in daemon_page(Home(home), now)["session_rows"]] == ["结账页面重构"]
    (proj / ".mewcode" / "sessions" / "mew-0001.meta").write_text("[1, 2]")
    with capture_logs() as logs:
        rows = daemon_page(Home(home), now)["session_rows"]
    assert [r["session_id"] for r in rows] == ["mew-0001"] and rows[0]["title"] != "结账页面重构"
    said = [e for e in logs if e["event"] == "session.meta_ignored"]
    assert len(said) == 1 and "mew-0001.meta: not a JSON object" in said[0]["problem"], logs
