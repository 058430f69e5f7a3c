"""`memd run-now index` with nothing changed (issue 27 pt 4): as a process it loads neither the
ledger's ingest, nor the model types (with the redactor's patterns), nor git's modules (memd.git
off), nor the views' render, the query parser, the history's packs or the locks, and it opens no memory file: file stats and search.sqlite decide; a hand edit is still
read and indexed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from jobs.index import SETTLED_SECONDS
from memd.memory.file import render_memory
from memd.tree import Home
from tests.procs import memd_env

UNUSED = ("memd.ledger.scan", "memd.transcripts.fold", "memd.llm.types", "memd.git.commits", "memd.git.repo",
          # what only a refresh that writes, a search or a kept file needs (the views' render, the query parser,
          # the history's packs, shutil with its compressors)
          "memd.index.render", "memd.index.query", "memd.history.pack", "shutil",
          # nor the locks: an unchanged scope is told without its lock (`jobs.index.unlocked`); nor the scan and
          # the file parser, for no file is read
          "filelock", "memd.memory.scan", "memd.memory.file",
          # nor inspect: every dataclass has its docstring, and dataclasses' inspect is deferred (memd.__main__);
          # nor logging.handlers (socket, queue…): the log file's rotation is memd.logs.file's own
          "inspect", "logging.handlers", "socket")
# Runs `memd ARGS` in this interpreter with an audit hook that keeps every path opened (`open`
# audit events: builtins.open, io.open, os.open alike), then reports them and the modules loaded.
PROBE = """
import json, os, runpy, sys
opened = []
sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == "open" and args and isinstance(args[0], str) else None)
sys.argv = ["memd", *sys.argv[1:]]
def report(code):
    print(json.dumps({"code": code, "opened": opened, "loaded": sorted(m for m in sys.modules if m in %r)}), file=sys.stderr, flush=True)
leave, me = os._exit, os.getpid()
def reported_exit(code):  # a plain `memd run-now` ends through os._exit (memd.__main__._leave)
    if os.getpid() == me:
        report(code)
    leave(code)
os._exit = reported_exit
try:
    runpy.run_module("memd", run_name="__main__")
except SystemExit as exc:
    report(exc.code)
""" % (UNUSED,)  # noqa: UP031 - a literal tuple in the probe's source


def _run(home: Path, *args: str) -> tuple[dict[str, object], str]:
    r = subprocess.run([sys.executable, "-c", PROBE, "--home", str(home), *args], capture_output=True, text=True,
                       env=memd_env(), timeout=120)  # fmt: skip
    return json.loads(r.stderr.strip().splitlines()[-1]), r.stdout


def _home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "h")
    for key in ("-p", "-q"):
        d = home.project_memory(key)
        d.mkdir(parents=True)
        for i in range(3):
            (d / f"m{i}.md").write_text(render_memory(f"m{i}", f"memory {i} of {key}", "project", f"body {i}"))
    home.global_memory.mkdir(parents=True)
    (home.global_memory / "g.md").write_text(render_memory("g", "a global one", "user", "global body"))
    return home


def _memory_files(opened: object) -> list[str]:
    assert isinstance(opened, list)
    return sorted(p for p in opened if "/memory/" in p and p.endswith(".md"))


def test_an_unchanged_index_check_opens_no_memory_file_and_loads_no_ingest(tmp_path: Path) -> None:
    home = _home(tmp_path)
    first, _ = _run(home.root, "run-now", "index")
    assert first["code"] == 0
    assert _memory_files(first["opened"])  # the first run reads them (the control: the hook sees opens)
    day = datetime.now(UTC).date()
    second, _ = _run(home.root, "run-now", "index")  # found nothing to change (the first wrote MEMORY.md): a record
    assert second["code"] == 0
    time.sleep(SETTLED_SECONDS + 0.2)  # the search database's daily check passes on a file this old (the drawer's
    assert _run(home.root, "run-now", "index")[0]["code"] == 0  # run, under its lock), and holds for a day
    again, out = _run(home.root, "run-now", "index")
    assert again["code"] == 0, out
    opened = _memory_files(again["opened"])
    if datetime.now(UTC).date() != day:  # the drawer's record holds the day its ages count from: a new day renders again
        opened = [p for p in opened if p != str(home.global_memory / "MEMORY.md")]
    assert opened == []  # MEMORY.md included: stats and search.sqlite decided
    assert again["loaded"] == []
    assert sorted(line for line in out.splitlines() if line.startswith("index ")) == [
        "index global: ok", "index project:-p: ok", "index project:-q: ok"]  # fmt: skip


def test_a_hand_edit_is_read_and_indexed_at_the_next_check(tmp_path: Path) -> None:
    home = _home(tmp_path)
    for _ in range(3):  # the first writes MEMORY.md, the second keeps the unchanged record, the third uses it
        assert _run(home.root, "run-now", "index")[0]["code"] == 0
    edited = home.project_memory("-q") / "m1.md"
    edited.write_text(render_memory("m1", "memory 1 of -q", "project", "body 1, now with zanzibar"))
    got, _ = _run(home.root, "run-now", "index")
    assert got["code"] == 0
    assert str(edited) in _memory_files(got["opened"])
    assert not any(p.endswith("/m0.md") or p.endswith("/g.md") for p in _memory_files(got["opened"]))  # rows reused
    found = subprocess.run([sys.executable, "-m", "memd", "--home", str(home.root), "search", "zanzibar", "--project",
                            "-q", "--json"], capture_output=True, text=True, env=memd_env(), timeout=120)  # fmt: skip
    assert [h["name"] for h in json.loads(found.stdout)] == ["m1"], found.stderr
