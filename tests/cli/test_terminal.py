"""A terminal that reads at a glance (issue 24 pt 5): aligned tables whatever a name's width, local
times with the zone (JSON keeps UTC), durations in words, `sessions` with date and title, `logs -n`,
one-line human messages on a piped stderr, unknown names exit 2, id prefixes, completion, `show --global`.

One demo home (`memd demo`: sessions, runs, a dream and its undo in the history) is built per module;
tests that change it work on a copy."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from memd.daemon.status import gather, render
from memd.tree import Home
from tests.conftest import memd_cmd
from tests.procs import memd_env, run_memd

KEY = "-home-dev-webshop"
LONG = "6d1f0c2e-1b7a-4c55-9a0e-5b8f3e2d4a10"
MEMORY = "---\nname: {name}\ndescription: {desc}\nmetadata:\n  type: {type}\n---\n{body}\n"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("demo") / "home"
    r = subprocess.run([*memd_cmd(), "demo", str(home)], capture_output=True, text=True, env=memd_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    return home


@pytest.fixture
def home(demo: Path, tmp_path: Path) -> Path:
    h = tmp_path / "home"
    shutil.copytree(demo, h, symlinks=True)
    return h


def _put(d: Path, name: str, desc: str, body: str = "body", type_: str = "project") -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.md").write_text(MEMORY.format(name=name, desc=desc, body=body, type=type_))


def _columns(header: str, line: str, name: str) -> tuple[int, int]:
    """Where column `name` ends in the header line, and where its cell ends in `line` (right-aligned)."""
    end = header.index(name) + len(name)
    return end, len(line[:end].rstrip()) if line[end : end + 1] in ("", " ") else -1


# --- tables ---------------------------------------------------------------------------------------------


def test_status_durations_sit_under_their_header_whatever_the_job_names(tmp_path: Path) -> None:
    d = gather_empty(tmp_path)
    runs = {"extract": 33, "a-very-long-job-name": 1_234_567, "summary": None}
    for name, ms in runs.items():
        last = {"started_at": "2026-11-20T09:00:00.000Z", "outcome": "ok", "duration_ms": ms}
        d["jobs"][name] = {"last_runs": [last], "last_failure": None, "due": 12}
    lines = render(d).splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("JOB"))
    header, rows = lines[i], lines[i + 1 : i + 1 + len(runs)]
    took_end = header.index("TOOK") + len("TOOK")
    due_end = header.index("DUE") + len("DUE")
    for row in rows:
        assert row[:took_end].rstrip() == row[:took_end] and row[took_end] == " ", (header, row)  # right edge under TOOK
        assert row[due_end - 2 : due_end] == "12", (header, row)
    assert "20 min 34 s" in rows[1] and "33 ms" in rows[0]  # durations in words, not raw ms


def gather_empty(tmp_path: Path) -> dict[str, object]:
    (tmp_path / "h").mkdir()
    return gather(Home(tmp_path / "h"))


def test_held_back_wait_is_said_in_days_and_hours(tmp_path: Path) -> None:
    d = gather_empty(tmp_path)
    d["ledger"] = {"held_back": [{"waiting_seconds": 585596 * 60}], "held_back_count": 1}
    text = render(d)
    assert "longest 406 d 15 h" in text and "585596 min" not in text


def test_list_columns_stay_aligned_for_names_over_32_characters(tmp_path: Path) -> None:
    h = tmp_path / "h"
    long = "a-memory-name-well-over-thirty-two-characters-long"
    _put(h / "projects" / "-repo" / "memory", long, "the long one")
    _put(h / "projects" / "-repo" / "memory", "short", "the short one")
    r = run_memd(h, "list", "--project", "-repo")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stdout.splitlines() if x.strip()]
    starts = {line.index("-repo") for line in lines[1:]}
    assert len(starts) == 1, lines  # the SCOPE column starts at one offset in every row
    assert lines[0].index("SCOPE") in starts


def test_text_times_are_local_with_the_zone_and_json_stays_utc(demo: Path) -> None:
    env = memd_env(TZ="Asia/Tokyo")
    r = run_memd(demo, "sessions", "--no-scan", env=env, process=True)
    assert r.returncode == 0, r.stderr
    row = next(x for x in r.stdout.splitlines() if x.startswith(LONG))
    assert "2026-11-20 18:00 JST" in row  # 09:00:20Z in Tokyo
    r = run_memd(demo, "sessions", "--no-scan", "--json", env=env, process=True)
    (s,) = [x for x in json.loads(r.stdout) if x["session_id"] == LONG]
    assert s["first_ts"] == "2026-11-20T09:00:20Z"
    r = run_memd(demo, "status", env=env, process=True)
    assert re.search(r"^extract\s+\d{4}-\d\d-\d\d \d\d:\d\d JST", r.stdout, re.M), r.stdout
    r = run_memd(demo, "history", env=env, process=True)
    assert " JST" in r.stdout and not re.search(r"\d\dZ$", r.stdout, re.M)


# --- sessions: date and title ----------------------------------------------------------------------------


def test_sessions_show_date_and_title(demo: Path) -> None:
    r = run_memd(demo, "sessions", "--no-scan", env=memd_env(TZ="UTC"), process=True)
    assert r.returncode == 0, r.stderr
    header = r.stdout.splitlines()[0]
    assert "DATE" in header and header.rstrip().endswith("TITLE")
    rows = {x.split()[0]: x for x in r.stdout.splitlines()[1:] if not x.startswith("[")}
    assert "The checkout handler returns 500 when the cart is empty." in rows[LONG]  # the first prompt
    assert rows["mew-7f3a"].rstrip().endswith("table tests")  # MewCode's own title (.meta)
    assert "2026-11-20 09:00 UTC" in rows[LONG]


def test_a_title_never_shows_a_secret(tmp_path: Path) -> None:
    h = tmp_path / "h"
    (h / "projects" / "-p").mkdir(parents=True)
    key = "sk-ant-api03-" + "A1b2C3d4E5f6G7h8" * 5
    rec = {"type": "user", "message": {"role": "user", "content": f"use {key} for the API"}, "uuid": "u1",
           "sessionId": "s1", "timestamp": "2026-11-01T00:00:00Z"}  # fmt: skip
    (h / "projects" / "-p" / "s1.jsonl").write_text(json.dumps(rec) + "\n")
    r = run_memd(h, "sessions")
    assert r.returncode == 0, r.stderr
    assert "use " in r.stdout and key[:20] not in r.stdout, r.stdout


def test_logs_n_prints_the_last_lines(tmp_path: Path) -> None:
    h = tmp_path / "h"
    (h / "memd" / "logs").mkdir(parents=True)
    recs = [{"ts": f"2026-11-20T09:00:{i:02d}.000000Z", "level": "info", "event": f"e{i}", "logger": "memd", "job": "index"}
            for i in range(50)]  # fmt: skip
    (h / "memd" / "logs" / "memd.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    r = run_memd(h, "logs", "-n", "3", "--json")
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["event"] for x in r.stdout.splitlines()] == ["e47", "e48", "e49"]
    r = run_memd(h, "logs", "--lines", "2", "--job", "index", env=memd_env(TZ="UTC"), process=True)
    assert r.stdout.splitlines()[0].startswith("2026-11-20 09:00:48 UTC info")
    assert run_memd(h, "logs", "-n", "0").stdout == ""


def test_a_piped_run_now_keeps_json_log_lines_out_of_stderr(tmp_path: Path) -> None:
    h = tmp_path / "h"
    (h / "projects" / "-p").mkdir(parents=True)
    good = {"type": "user", "message": {"role": "user", "content": "hi"}, "uuid": "u1", "sessionId": "s1",
            "timestamp": "2026-11-01T00:00:00Z"}  # fmt: skip
    (h / "projects" / "-p" / "s1.jsonl").write_text(json.dumps(good) + "\nnot json at all\n")
    r = run_memd(h, "run-now", "summary", process=True)  # stderr is a pipe; summary reads the sessions (index does not)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert any("transcript.line_skipped" in x for x in lines), r.stderr  # the warning is said ...
    assert not any(x.lstrip().startswith("{") for x in lines), r.stderr  # ... as a line for people, not JSON
    logged = (h / "memd" / "logs" / "memd.jsonl").read_text().splitlines()
    assert any(json.loads(x)["event"] == "transcript.line_skipped" for x in logged)  # the record is in the log file


# --- unknown names, prefixes -----------------------------------------------------------------------------


@pytest.mark.parametrize("args,name", [
    (("logs", "--job", "bogus"), "bogus"),
    (("sessions", "--project", "nosuch"), "nosuch"),
    (("run-now", "extract", "--project", "nosuch"), "nosuch"),
    (("list", "--project", "nosuch"), "nosuch"),
    (("recall", "tests", "--session", "nosuch"), "nosuch"),
    (("history", "--project", "nosuch"), "nosuch"),
    (("undo", "nosuch"), "nosuch"),
    (("pause", "nosuch"), "nosuch"),
])  # fmt: skip
def test_an_unknown_name_is_exit_2_with_one_line_naming_it(home: Path, args: tuple[str, ...], name: str) -> None:
    r = run_memd(home, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and repr(name) in r.stderr, r.stderr


def test_unique_prefixes_of_session_and_run_ids_are_accepted(home: Path) -> None:
    r = run_memd(home, "pause", LONG[:6])
    assert r.returncode == 0 and f"session {LONG}" in r.stdout, r.stderr
    r = run_memd(home, "resume", LONG[:6], "--project", KEY)
    assert r.returncode == 0, r.stderr
    r = run_memd(home, "run-now", "summary", "--session", LONG[:8], "--force", "--json")
    assert r.returncode in (0, 4), r.stderr
    assert json.loads(r.stdout)[0]["target"] == f"session:{KEY}:{LONG}"
    r = run_memd(home, "recall", "tests", "--session", LONG[:5], "--project", KEY, "--json")
    assert r.returncode == 0, r.stderr
    runs = json.loads(run_memd(home, "history", "--global", "--json").stdout)
    last = runs[-1]["run"]
    r = run_memd(home, "undo", last[:-3], "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["undo_of"] == last


def test_an_ambiguous_prefix_is_exit_2_listing_the_candidates(home: Path) -> None:
    proj = home / "projects" / KEY
    for sid in ("abc111", "abc222"):
        rec = {"type": "user", "message": {"role": "user", "content": "hello"}, "uuid": f"u-{sid}", "sessionId": sid,
               "timestamp": "2026-11-25T00:00:00Z"}  # fmt: skip
        (proj / f"{sid}.jsonl").write_text(json.dumps(rec) + "\n")
    r = run_memd(home, "pause", "abc")
    assert r.returncode == 2 and "ambiguous" in r.stderr and "abc111" in r.stderr and "abc222" in r.stderr, r.stderr
    runs = [x["run"] for x in json.loads(run_memd(home, "history", "--json").stdout)]
    r = run_memd(home, "undo", runs[0][:8])  # the date: every run of the demo shares it
    assert r.returncode == 2 and "ambiguous" in r.stderr, r.stderr


# --- completion, show --global ---------------------------------------------------------------------------


def _complete(home: Path, *words: str) -> list[str]:
    line = ["memd", "--home", str(home), *words]
    env = memd_env(COMP_WORDS=" ".join(line), COMP_CWORD=str(len(line) - 1), _MEMD_COMPLETE="bash_complete")
    r = subprocess.run(memd_cmd(), capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return [x.split(",", 1)[1] for x in r.stdout.splitlines()]


def test_completion_knows_jobs_memories_sessions_runs_and_projects(demo: Path) -> None:
    assert _complete(demo, "run-now", "") == ["all", "dream", "extract", "index", "summary", "sync"]
    assert _complete(demo, "logs", "--job", "su") == ["summary"]
    assert "never-commit-to-main" in _complete(demo, "show", "")
    assert _complete(demo, "pause", "6d") == [LONG]
    assert _complete(demo, "run-now", "extract", "--session", "mew") == ["mew-7f3a"]
    runs = [x["run"] for x in json.loads(run_memd(demo, "history", "--json").stdout)]
    assert set(_complete(demo, "undo", "")) == set(runs)
    assert KEY in _complete(demo, "list", "--project", "")


def test_show_global_picks_the_drawers_memory(tmp_path: Path) -> None:
    h = tmp_path / "h"
    _put(h / "memory", "style", "the drawer's style", "Tabs.", "user")
    _put(h / "projects" / "-repo" / "memory", "style", "the project's style", "Spaces.")
    r = run_memd(h, "show", "style", "--project", "-repo", "--json")
    assert json.loads(r.stdout)["scope"] == "project"
    r = run_memd(h, "show", "style", "--global", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["scope"] == "global" and "Tabs." in json.loads(r.stdout)["body"]
    assert run_memd(h, "show", "nope", "--global").returncode == 2


# --- the first scan's time left --------------------------------------------------------------------------
