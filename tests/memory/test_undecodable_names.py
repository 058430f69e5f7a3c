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
                          capture_output=True, text=True, env=memd_env(), timeout=120)  # fmt: skip


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
