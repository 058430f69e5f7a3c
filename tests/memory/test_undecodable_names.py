"""A memory file whose name is not valid UTF-8 (`caf\\xe9.md`, written by a Latin-1 tool): a problem named in one
line, left as it is, never a memory. Before, no view, search row or JSON answer could carry its name: the index
job failed for its whole directory at every run (the drawer render's encoding), and `memd list --json` died
with a TypeError."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from memd.fsutil import shown
from memd.memory.file import render_memory
from memd.memory.scan import NOT_UTF8_NAME, scan_dir
from memd.tree import Home
from tests.jobkit import write_session
from tests.procs import memd_env

BAD = b"caf\xe9.md"


def _home(root: Path) -> tuple[Home, bytes]:
    home = Home(root)
    d = home.global_memory
    d.mkdir(parents=True)
    (d / "ok.md").write_text(render_memory("ok", "a memory", "user", "body"))
    data = render_memory("cafe", "named in Latin-1", "user", "body").encode()
    with open(os.path.join(os.fsencode(d), BAD), "wb") as f:
        f.write(data)
    return home, data


def _memd(home: Home, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from memd.__main__ import main; main()", "--home", str(home.root), *args],
                          capture_output=True, text=True, errors="surrogateescape", env=memd_env(), timeout=120)  # fmt: skip


def test_a_name_not_utf8_is_a_problem_and_the_file_is_left_as_it_is(tmp_path: Path) -> None:
    home, data = _home(tmp_path / "h")
    r = scan_dir(home.global_memory, "global", None)
    assert [m.name for m in r.memories] == ["ok"]
    assert [(os.fsencode(p.path.name), p.reason) for p in r.problems] == [(BAD, NOT_UTF8_NAME)]
    with open(os.path.join(os.fsencode(home.global_memory), BAD), "rb") as f:
        assert f.read() == data


def test_the_directory_is_indexed_and_listed_around_it(tmp_path: Path) -> None:
    home, _data = _home(tmp_path / "h")
    r = _memd(home, "run-now", "index", "--json")
    assert r.returncode == 0, r.stderr
    assert [x["outcome"] for x in json.loads(r.stdout)] == ["ok"] and "Logging error" not in r.stderr
    assert "[ok](ok.md)" in (home.global_memory / "MEMORY.md").read_text()
    for entry in ("from memd.__main__ import main; main()", "from memd.cli import main; main()"):  # plain and click
        r = subprocess.run([sys.executable, "-c", entry, "--home", str(home.root), "list", "--json"], capture_output=True,
                           text=True, env=memd_env(), timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert [m["name"] for m in doc["memories"]] == ["ok"]
        assert doc["problems"] == [{"file": str(home.global_memory / "caf\\xe9.md"), "reason": NOT_UTF8_NAME}]
    r = _memd(home, "status", "--json")
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)
    log = (home.memd_dir / "logs" / "memd.jsonl").read_text()
    assert "caf\\\\xe9.md" in log  # the log line names the file, its byte shown


def test_shown_is_the_path_unless_its_bytes_are_not_utf8() -> None:
    assert shown("/a/b.md") == "/a/b.md"
    assert shown(Path("/a/café-日本.md")) == "/a/café-日本.md"
    assert shown(os.fsdecode(b"/a/caf\xe9.md")) == "/a/caf\\xe9.md"
    assert shown(os.fsdecode(b"/a/\xff\xfe")).encode("utf-8") == b"/a/\\xff\\xfe"


def _copy_from_latin1(root: Path) -> Home:
    """A home restored from a Latin-1 system: a project directory and a transcript named with byte 0xE9, beside
    a project and a session memd can read."""
    home = Home(root)
    good = home.projects / "-work-shop"
    write_session(good / "s1.jsonl", [("user", "keep the ledger exact"), ("assistant", "noted")])
    bad_dir = os.path.join(os.fsencode(home.projects), b"-work-caf\xe9")
    os.makedirs(os.path.join(bad_dir, b"memory"))
    with open(os.path.join(bad_dir, b"memory", b"m.md"), "wb") as f:
        f.write(render_memory("m", "in a project named in Latin-1", "user", "b").encode())
    with open(os.path.join(bad_dir, b"s2.jsonl"), "wb") as f:
        f.write((good / "s1.jsonl").read_bytes())
    with open(os.path.join(os.fsencode(good), b"s\xe9.jsonl"), "wb") as f:
        f.write((good / "s1.jsonl").read_bytes())
    return home


def test_project_and_transcript_names_not_utf8_are_skipped_and_named_by_doctor(tmp_path: Path) -> None:
    """Before, the first such name stopped `memd scan` (no session read), `run-now index` (a traceback) and
    `list --all --json`: SQLite refuses the name as text."""
    home = _copy_from_latin1(tmp_path / "h")
    r = _memd(home, "scan", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["sessions"] == 1  # s1 only
    r = _memd(home, "run-now", "index", "--json")
    assert r.returncode == 0 and {x["outcome"] for x in json.loads(r.stdout)} == {"ok"}, r.stderr
    for args in (["list", "--all", "--json"], ["sessions", "--json"], ["status", "--json"]):
        r = _memd(home, *args)
        assert r.returncode == 0, (args, r.stderr)
        json.loads(r.stdout)
    r = _memd(home, "doctor", "--json")
    names = next(c for c in json.loads(r.stdout) if c["name"] == "names")
    assert names["ok"] is False and r.returncode == 1
    assert "projects/-work-caf\\xe9" in names["detail"] and "projects/-work-shop/s\\xe9.jsonl" in names["detail"]
    assert os.path.exists(os.path.join(os.fsencode(home.projects), b"-work-caf\xe9", b"s2.jsonl"))  # left as it is


def test_doctor_names_nothing_on_a_home_of_utf8_names(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    write_session(home.projects / "-work-café-日本" / "s1.jsonl", [("user", "x")])
    r = _memd(home, "doctor", "--json")
    assert next(c for c in json.loads(r.stdout) if c["name"] == "names")["ok"] is True


def test_an_import_of_such_a_name_is_recorded_and_undone(tmp_path: Path) -> None:
    """`memd import` of an archive holding `caf\\xe9.md`: before, the files went live and the history entry was
    never written (run.json's strict encoding), so the import could not be undone; `history --json` answers
    with the name's escapes."""
    home, _data = _home(tmp_path / "h")
    archive = tmp_path / "x.tar.gz"
    assert _memd(home, "export", str(archive)).returncode == 0
    new = Home(tmp_path / "new")
    new.root.mkdir()
    r = _memd(new, "import", str(archive))
    assert r.returncode == 0, r.stderr
    assert os.path.exists(os.path.join(os.fsencode(new.global_memory), BAD))
    r = _memd(new, "history", "--json")
    assert r.returncode == 0, r.stderr
    runs = json.loads(r.stdout)
    assert [x["job"] for x in runs] == ["import"]
    r = _memd(new, "undo", runs[0]["run"])
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(os.path.join(os.fsencode(new.global_memory), BAD))
    assert not (new.global_memory / "ok.md").exists()


def test_a_sync_of_such_a_name_is_recorded_on_the_side_that_receives_it(tmp_path: Path) -> None:
    """Git sync carries the file (git keeps a name's bytes); the receiving home's sync used to fail on run.json
    after the file had gone live, leaving a write that could not be undone."""
    from tests.sync.helpers import GIT_ENV, bare_remote, make_home  # noqa: PLC0415 - only this test syncs

    remote = bare_remote(tmp_path)
    a, b = make_home(tmp_path, "a", remote), make_home(tmp_path, "b", remote)
    a.global_memory.mkdir(parents=True, exist_ok=True)
    with open(os.path.join(os.fsencode(a.global_memory), BAD), "wb") as f:
        f.write(render_memory("cafe", "named in Latin-1", "user", "body").encode())
    (a.global_memory / "ok.md").write_text(render_memory("ok", "a memory", "user", "body"))
    for home, host in ((a, "a"), (b, "b")):
        r = subprocess.run([sys.executable, "-c", "from memd.__main__ import main; main()", "--home", str(home.root), "sync",
                            "--json"], capture_output=True, text=True, errors="surrogateescape",
                           env=memd_env(**GIT_ENV, MEMD_HOST=host), timeout=120)  # fmt: skip
        assert r.returncode == 0, (host, r.stderr)
    assert os.path.exists(os.path.join(os.fsencode(b.global_memory), BAD)) and (b.global_memory / "ok.md").exists()
    runs = json.loads(_memd(b, "history", "--json").stdout)
    assert [x["job"] for x in runs] == ["sync"]
    assert _memd(b, "undo", runs[0]["run"]).returncode == 0
    assert not os.path.exists(os.path.join(os.fsencode(b.global_memory), BAD))
