"""`memd list --json`'s click-free entry (`memd.__main__.list_call`, issue 27 point 4): a plain `memd [--home H]
list [--all] --json` runs without click and answers exactly as the click command does; anything else (the
table, `--project`, `--cwd`, a home that is missing or not a directory) goes to click.

Real processes on one small home: memories of the drawer and of two projects, some taken from search.sqlite's
rows and some parsed (added or edited after the index was built), and a file that is not a memory.
"""

from __future__ import annotations

import array
import fcntl
import os
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from memd.__main__ import list_call
from memd.index.refresh import refresh_dir
from memd.keys import project_key
from memd.memory.file import render_memory
from memd.tree import Home
from tests.procs import memd_env, modules_loaded

ENTRY = [sys.executable, "-c", "from memd.__main__ import main; main()"]  # what the `memd` script runs
CLICK = [sys.executable, "-c", "from memd.cli import main; main()"]  # the click CLI alone
DAY = 86400


def _home(root: Path, cwd: Path) -> Home:
    """The drawer, the project of `cwd` and one other, indexed, then one memory added and one edited
    after the index was built, and one file that is not a memory. Ages are whole days and a half, so
    the staleness notes of the two runs compared cannot fall on two sides of a day's boundary."""
    home = Home(root)
    now = time.time()
    places = [("global", None, home.global_memory), ("project", project_key(cwd), home.project_memory(project_key(cwd))),
              ("project", "-elsewhere", home.project_memory("-elsewhere"))]  # fmt: skip
    for n, (scope, key, d) in enumerate(places):
        d.mkdir(parents=True)
        for i in range(4):
            f = d / f"note-{n}-{i}.md"
            f.write_text(render_memory(f"note-{n}-{i}", f"note {i} of place {n}", ("user", "feedback")[i % 2], f"body {i}"))
            age = (i * 20 + 0.5) * DAY
            os.utime(f, (now - age, now - age))
        refresh_dir(home, scope, key, d)
    (places[1][2] / "later.md").write_text(render_memory("later", "added after the index", "project", "b"))
    (places[1][2] / "note-1-0.md").write_text(render_memory("note-1-0", "edited by hand", "user", "changed"))
    (places[2][2] / "broken.md").write_text("no front matter here\n")
    return home


def _run(cmd: list[str], args: list[str], cwd: Path) -> tuple[int, bytes, bytes]:
    r = subprocess.run([*cmd, *args], capture_output=True, env=memd_env(), cwd=cwd, timeout=120)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize("args", [
    ["--home", "{h}", "list", "--json"],  # the drawer and the project of the current directory
    ["list", "--home={h}", "--all", "--json", "--json"],
    ["--home", "/nowhere", "list", "--json", "--home", "{h}", "--all"],  # the command's --home wins over the group's
    ["--home", "{h}", "list", "--home=", "--all", "--json"],  # an empty one counts as none
])  # fmt: skip
def test_a_plain_list_answers_as_the_click_command(tmp_path: Path, args: list[str]) -> None:
    cwd = tmp_path / "work" / "shop"
    cwd.mkdir(parents=True)
    h = _home(tmp_path / "h", cwd).root
    argv = [a.format(h=h) for a in args]
    assert list_call(argv) is not None  # the form the plain entry takes
    got, want = _run(ENTRY, argv, cwd), _run(CLICK, argv, cwd)
    assert got == want and got[0] == 0
    assert b'"edited by hand"' in got[1] and b'"added after the index"' in got[1]
    assert (b"broken.md" in got[1]) == ("--all" in args) and (b"-elsewhere" in got[1]) == ("--all" in args)


@pytest.mark.parametrize("home", ["missing", "file"])
def test_a_home_click_refuses_is_refused_as_click_refuses_it(tmp_path: Path, home: str) -> None:
    target = tmp_path / home
    if home == "file":
        target.write_text("x")
    for args in (["--home", str(target), "list", "--json"], ["list", "--all", "--home", str(target), "--json"]):
        got, want = _run(ENTRY, args, tmp_path), _run(CLICK, args, tmp_path)
        assert got == want and got[0] == 2


def test_an_error_before_the_output_is_left_to_click(tmp_path: Path) -> None:
    """The current directory deleted under the command: the project's key cannot be found, the plain entry
    writes nothing and click meets the same error and reports it."""
    h = _home(tmp_path / "h", tmp_path).root
    gone = tmp_path / "gone"
    for cmd in (ENTRY, CLICK):
        gone.mkdir()
        code = f"import os, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); sys.argv = ['memd'] + sys.argv[1:]\n"
        r = subprocess.run([sys.executable, "-c", code + cmd[2], "--home", str(h), "list", "--json"],
                           capture_output=True, env=memd_env(), cwd=tmp_path, timeout=120)  # fmt: skip
        assert (r.returncode, r.stdout) == (1, b"")
        assert r.stderr.decode().strip().splitlines()[-1].startswith("FileNotFoundError")


def test_other_list_command_lines_go_to_click() -> None:
    for args in (["list"], ["list", "--all"], ["list", "--json", "--project", "-p"], ["list", "--json", "--cwd", "."],
                 ["list", "--json", "--help"], ["--home", "-x", "list", "--json"], ["search", "--json"],
                 ["list", "list", "--json"], ["--json", "list"]):  # fmt: skip
        assert list_call(args) is None, args
    assert list_call(["list", "--json"]) == (None, False)
    assert list_call(["list", "--all", "--json", "--all"]) == (None, True)


def test_the_plain_list_loads_neither_click_nor_logging_and_pauses_the_collector(tmp_path: Path) -> None:
    h = _home(tmp_path / "h", tmp_path).root
    want = _run(CLICK, ["--home", str(h), "list", "--all", "--json"], tmp_path)[1]
    loaded, out = modules_loaded(h, ("click", "memd.cli", "logging", "structlog"), "list", "--all", "--json")
    assert loaded == [] and out.encode() == want
    code = ("import contextlib, gc, sys\n"
            "import memd.collector as c\n"
            "real = c.paused\n"
            "@contextlib.contextmanager\n"
            "def seen():\n"
            "    with real():\n"
            "        print('paused', gc.isenabled(), file=sys.stderr)\n"
            "        yield\n"
            "c.paused = seen\n"
            "from memd.__main__ import main\n"
            "main()\n")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code, "--home", str(h), "list", "--all", "--json"], capture_output=True,
                       env=memd_env(), timeout=120)  # fmt: skip
    assert r.returncode == 0 and r.stderr.decode().strip().splitlines() == ["paused False"] and r.stdout == want


def test_a_reader_gone_before_the_output_ends_the_list_as_it_ends_the_click_command(tmp_path: Path) -> None:
    """`memd list --all --json` into a pipe whose reader has already gone: the write fails at once; both
    entries exit with the same code (click's 1 for a broken pipe) and the same stderr."""
    h = _home(tmp_path / "h", tmp_path).root
    got = []
    for cmd in (ENTRY, CLICK):
        r, w = os.pipe()
        os.close(r)
        try:
            p = subprocess.run([*cmd, "--home", str(h), "list", "--all", "--json"], stdout=w, stderr=subprocess.PIPE,
                               env=memd_env(), cwd=tmp_path, timeout=120)  # fmt: skip
        finally:
            os.close(w)
        got.append((p.returncode, p.stderr))
    assert got[0] == got[1] and got[0][0] == 1, got


def test_a_plain_list_of_a_home_without_an_index_parses_every_file_as_click_does(tmp_path: Path) -> None:
    h = _home(tmp_path / "h", tmp_path).root
    for suffix in ("", "-wal", "-shm"):
        (h / "memd" / f"search.sqlite{suffix}").unlink(missing_ok=True)
    args = ["--home", str(h), "list", "--all", "--json"]
    got, want = _run(ENTRY, args, tmp_path), _run(CLICK, args, tmp_path)
    assert got == want and got[0] == 0 and b'"note-2-3"' in got[1]
    assert not (h / "memd" / "search.sqlite").exists()  # a listing never creates the index


def _wait_full(fd: int, proc: subprocess.Popen[bytes]) -> None:
    """Until the pipe `fd` reads from holds as much as it can: its writer is then blocked in its write."""
    capacity = fcntl.fcntl(fd, 1032)  # F_GETPIPE_SZ
    held = array.array("i", [0])
    deadline = time.monotonic() + 300  # a bound on a hang, not a timing: the pipe fills in well under a second
    while time.monotonic() < deadline:
        fcntl.ioctl(fd, termios.FIONREAD, held)
        if held[0] >= capacity or proc.poll() is not None:
            return
        time.sleep(0.02)
    pytest.fail(f"the pipe never filled ({held[0]} of {capacity} bytes)")


def test_ctrl_c_while_the_list_is_written_ends_it_as_it_ends_the_click_command(tmp_path: Path) -> None:
    """`memd list --all --json | less`, then ^C while memd waits for the pager to read: "Aborted!" and exit 1 from
    both entries (the signal comes once the pipe is full, so memd is in its write)."""
    h = _home(tmp_path / "h", tmp_path).root
    more = h / "projects" / "-elsewhere" / "memory"
    probe_r, probe_w = os.pipe()
    capacity = fcntl.fcntl(probe_w, 1032)  # F_GETPIPE_SZ: 64 KiB here, 1 MiB on hosts of 64 KiB pages
    os.close(probe_r)
    os.close(probe_w)
    for i in range(max(600, 3 * capacity // 400)):  # a document several times a pipe's buffer (~500 bytes a memory)
        (more / f"extra-{i:05d}.md").write_text(render_memory(f"extra-{i:05d}", "x" * 300, "user", "b"))
    got = []
    for cmd in (ENTRY, CLICK):
        r, w = os.pipe()
        proc = subprocess.Popen([*cmd, "--home", str(h), "list", "--all", "--json"], stdout=w, stderr=subprocess.PIPE,
                                env=memd_env(), cwd=tmp_path)  # fmt: skip
        os.close(w)
        try:
            _wait_full(r, proc)
            assert proc.poll() is None  # still writing
            proc.send_signal(signal.SIGINT)
            _out, err = proc.communicate(timeout=120)
        finally:
            os.close(r)
        got.append((proc.returncode, err))
    assert got[0] == got[1] == (1, b"\nAborted!\n"), got
