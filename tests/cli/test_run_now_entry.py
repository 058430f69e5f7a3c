"""`memd run-now`'s click-free entry (`memd.__main__.run_now_call`, issue 27 point 4): a plain `memd [--home H]
run-now JOB [--project KEY] [--session ID] [--global] [--all] [--force] [--no-wait] [--json]` runs without
click and answers as the click command does — the same output, exit code and effects on the home, errors
included; anything else (`--help`, a value that looks like an option, no JOB or two) goes to click.

Real processes on two copies of one small home (each entry runs on its own copy): memories of the drawer and
of two projects, and a transcript of each project.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memd.__main__ import run_now_call
from memd.daemon.runnow import Request
from memd.memory.file import render_memory
from memd.tree import Home
from tests.procs import memd_env, modules_loaded

ENTRY = [sys.executable, "-c", "from memd.__main__ import main; main()"]  # what the `memd` script runs
CLICK = [sys.executable, "-c", "from memd.cli import main; main()"]  # the click CLI alone


def _home(root: Path) -> Home:
    home = Home(root)
    for key in ("-p", "-q"):
        d = home.project_memory(key)
        d.mkdir(parents=True)
        for i in range(2):
            (d / f"m{i}.md").write_text(render_memory(f"m{i}", f"memory {i} of {key}", "project", f"body {i}"))
        rec = {"type": "user", "message": {"role": "user", "content": f"hello from {key}"}, "uuid": f"u{key}",
               "sessionId": f"s{key}", "timestamp": "2026-11-01T00:00:00Z"}  # fmt: skip
        (root / "projects" / key / f"s{key}.jsonl").write_text(json.dumps(rec) + "\n")
    home.global_memory.mkdir(parents=True)
    (home.global_memory / "g.md").write_text(render_memory("g", "a global one", "user", "global body"))
    return home


def _run(cmd: list[str], args: list[str], home: Path, **kw: object) -> tuple[int, str, str]:
    argv = [a.replace("{h}", str(home)) for a in args]
    r = subprocess.run([*cmd, *argv], capture_output=True, text=True, env=memd_env(), timeout=120, **kw)  # type: ignore[call-overload]
    return r.returncode, _plain(r.stdout, home), _plain(r.stderr, home)


def _plain(text: str, home: Path) -> str:
    """`text` with the home's path and what differs from run to run (run ids, durations, times) blanked."""
    text = text.replace(str(home), "H")
    text = re.sub(r'"(run_id|duration_ms|held_seconds|at|ts|started|finished)": [^,\n}]+', r'"\1": _', text)
    return re.sub(r"\b[0-9a-f]{12}\b", "_", text)


def _state(home: Path) -> dict[str, object]:
    """What the runs left in the home that a user would see: the memory views and the jobs' log events."""
    views = {str(p.relative_to(home)): p.read_text() for p in sorted(home.rglob("MEMORY.md"))}
    log = home / "memd" / "logs" / "memd.jsonl"
    events = [json.loads(line)["event"] for line in log.read_text().splitlines()] if log.exists() else []
    return {"views": views, "events": events}


@pytest.mark.parametrize("args", [
    ["--home", "{h}", "run-now", "index"],
    ["run-now", "--json", "index", "--home={h}", "--project=-p"],
    ["--home", "{h}", "run-now", "index", "--global", "--force", "--no-wait", "--json"],
    ["--home", "{h}", "run-now", "summary", "--project", "-q", "--force", "--json"],
    ["--home", "{h}", "run-now", "summary", "--session", "s-p", "--session", "s-q", "--force"],  # the last one counts
    ["--home", "{h}", "run-now", "summary", "--all"],
    ["--home", "{h}", "run-now", "bogus"],  # a usage error: its one line, exit 2
    ["--home", "{h}", "run-now", "index", "--project", "nope"],
    ["--home", "{h}", "run-now", "index", "--session", "s-p"],
    ["--home", "{h}", "run-now", "summary", "--global"],
    ["--home", "{h}", "run-now", "summary", "--session", "zz"],
    ["--home", "/nowhere", "run-now", "index", "--home", "{h}"],  # the command's --home wins over the group's
])  # fmt: skip
def test_a_plain_run_now_answers_as_the_click_command(tmp_path: Path, args: list[str]) -> None:
    plain, clicked = _home(tmp_path / "a").root, _home(tmp_path / "b").root
    assert run_now_call([a.replace("{h}", str(plain)) for a in args]) is not None  # the form the plain entry takes
    for _ in range(2):  # the second run finds the first one's work done
        got, want = _run(ENTRY, args, plain), _run(CLICK, args, clicked)
        assert got == want
        assert _state(plain) == _state(clicked)
    assert got[0] in (0, 2)
    assert (got[0] == 2) == ("memd: " in got[2])


@pytest.mark.parametrize("home", ["missing", "file"])
def test_a_home_click_refuses_is_refused_as_click_refuses_it(tmp_path: Path, home: str) -> None:
    target = tmp_path / home
    if home == "file":
        target.write_text("x")
    args = ["--home", str(target), "run-now", "index"]
    got, want = _run(ENTRY, args, tmp_path), _run(CLICK, args, tmp_path)
    assert got == want and got[0] == 2
    assert not target.is_dir()  # nothing made


def test_a_plain_run_now_loads_no_click(tmp_path: Path) -> None:
    home = _home(tmp_path / "h").root
    loaded, out = modules_loaded(home, ("click", "memd.cli"), "run-now", "index")
    assert loaded == [] and "index global: ok" in out
    loaded, _out = modules_loaded(home, ("click", "memd.cli"), "run-now", "index", "--help")  # the control
    assert loaded == ["click", "memd.cli"]


def _hold_global_lock(home: Path) -> subprocess.Popen[str]:
    """Another memd process holding the drawer's lock until its stdin closes."""
    code = ("import sys\nfrom pathlib import Path\nfrom memd.locks import acquire\nfrom memd.tree import Home, Place\n"
            "with acquire(Home(Path(sys.argv[1])), [Place('global')], timeout=5):\n"
            "    print('held', flush=True)\n    sys.stdin.read()\n")  # fmt: skip
    holder = subprocess.Popen([sys.executable, "-c", code, str(home)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=memd_env())  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_a_held_lock_is_waited_for_and_ctrl_c_aborts_as_in_click(tmp_path: Path) -> None:
    """`--no-wait` against a held lock: exit 75 with the lock's reason, both entries alike. Without it the
    command says once that it waits; ^C then ends it with "Aborted!" and exit 1, as click's standalone mode."""
    plain, clicked = _home(tmp_path / "a").root, _home(tmp_path / "b").root
    holders = [_hold_global_lock(plain), _hold_global_lock(clicked)]
    try:
        args = ["--home", "{h}", "run-now", "index", "--global", "--no-wait", "--json"]
        got, want = _run(ENTRY, args, plain), _run(CLICK, args, clicked)
        assert got == want and got[0] == 75 and "lock busy" in got[1]
        answers = []
        for cmd, home in ((ENTRY, plain), (CLICK, clicked)):
            p = subprocess.Popen([*cmd, "--home", str(home), "run-now", "index", "--global"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=memd_env())  # fmt: skip
            assert p.stderr is not None
            first = p.stderr.readline()  # once it waits
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=60)
            answers.append((p.returncode, _plain(first + err, home), out))
        assert answers[0] == answers[1]
        assert answers[0][0] == 1 and answers[0][1].startswith("waiting for the lock on global") and answers[0][1].endswith("\nAborted!\n")
    finally:
        for h in holders:
            h.communicate(input="", timeout=60)


def _started(home: Path) -> bool:
    """Whether a run of the index job on the drawer has begun (its row written before the lock is asked for)."""
    db = home / "memd" / "state.sqlite"
    if not db.exists():
        return False
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute("SELECT 1 FROM runs WHERE job='index' AND target='global' AND finished_at IS NULL").fetchone() is not None
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def test_ctrl_c_with_no_stderr_says_aborted_on_stdout_as_click(tmp_path: Path) -> None:
    """stderr closed at start: ^C's "Aborted!" goes to stdout, as `click.echo` sends a line with no stderr."""
    answers = []
    for cmd, side in ((ENTRY, "a"), (CLICK, "b")):
        home = _home(tmp_path / side).root
        holder = _hold_global_lock(home)
        try:
            p = subprocess.Popen([*cmd, "--home", str(home), "run-now", "index", "--global"], stdout=subprocess.PIPE,
                                 env=memd_env(), preexec_fn=lambda: os.close(2))  # fmt: skip
            deadline = time.monotonic() + 60
            while not _started(home) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # from its row to the lock's wait: a few statements
            p.send_signal(signal.SIGINT)
            out, _err = p.communicate(timeout=60)
            answers.append((p.returncode, out))
        finally:
            holder.communicate(input="", timeout=60)
    assert answers[0] == answers[1] == (1, b"\nAborted!\n")


def test_a_reader_gone_ends_it_silently_with_exit_1(tmp_path: Path) -> None:
    """stdout a pipe whose reader is gone before the report: exit 1 and nothing on stderr, as click's
    standalone mode does (the jobs ran: a later run finds them done)."""
    for cmd, home in ((ENTRY, _home(tmp_path / "a").root), (CLICK, _home(tmp_path / "b").root)):
        read, write = os.pipe()
        os.close(read)
        p = subprocess.run([*cmd, "--home", str(home), "run-now", "index", "--json"], stdout=write, stderr=subprocess.PIPE,
                           env=memd_env(), timeout=120)  # fmt: skip
        os.close(write)
        assert (p.returncode, p.stderr) == (1, b""), cmd


def _raw(cmd: list[str], args: list[str], home: Path, closed: int | None = None,
         env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:  # fmt: skip
    """Exit code, stdout and stderr bytes of `cmd ARGS`, with descriptor `closed` closed at its start."""
    r = subprocess.run([*cmd, *[a.replace("{h}", str(home)) for a in args]], capture_output=True, timeout=120,
                       env={**memd_env(), **(env or {})},
                       preexec_fn=None if closed is None else (lambda: os.close(closed)))  # fmt: skip
    return r.returncode, r.stdout.replace(str(home).encode(), b"H"), r.stderr.replace(str(home).encode(), b"H")


@pytest.mark.parametrize(("args", "closed", "env"), [
    (["--home", "{h}", "run-now", "index"], 1, None),  # no stdout: the report is dropped, the jobs all run
    (["--home", "{h}", "run-now", "index", "--project", "nope"], 2, None),  # no stderr: the error's exit code all the same
    (["--home", "{h}", "run-now", "summary", "--all", "--force"], None, {"PYTHONIOENCODING": "ascii"}),  # "—" in a C locale
    (["--home", "{h}", "run-now", "index", "--project", "é"], None, {"PYTHONIOENCODING": "ascii"}),
    (["--home", "{h}", "run-now", "index"], None, None),  # a project key holding an ANSI sequence, to a pipe
])  # fmt: skip
def test_streams_as_click_echo_treats_them(tmp_path: Path, args: list[str], closed: int | None,
                                           env: dict[str, str] | None) -> None:  # fmt: skip
    """The plain entry's lines go out as `click.echo` writes them: nothing on a stream that is missing,
    UTF-8 (errors replaced) on one whose encoding is ASCII, ANSI sequences stripped off a terminal."""
    homes = []
    for side in ("a", "b"):
        home = _home(tmp_path / side)
        d = home.project_memory("-p\x1b[31mred")
        d.mkdir(parents=True)
        (d / "m.md").write_text(render_memory("m", "one", "project", "b"))
        homes.append(home.root)
    got, want = _raw(ENTRY, args, homes[0], closed, env), _raw(CLICK, args, homes[1], closed, env)
    assert got == want
    assert b"\x1b" not in got[1] + got[2]
    assert _state(homes[0]) == _state(homes[1])
    if closed == 1:
        assert got[0] == 0 and _state(homes[0])["events"].count("job.finished") == 4  # the drawer and 3 projects


# Runs `memd ARGS` as the `memd` script does and, where a plain command ends (`os._exit`, after the exit
# handlers), reports every file object still open besides the standard streams: one would lose what it
# buffered, as the interpreter's finalisation (which would have flushed it) does not run. With LEAK set, the
# probe leaves one open itself (the control).
_OPEN_PROBE = """
import gc, io, os, sys
leave = os._exit
def report(code):
    std = {id(s) for s in (sys.stdout, sys.stderr, sys.stdin, sys.__stdout__, sys.__stderr__, sys.__stdin__)}
    std |= {id(getattr(s, "buffer", None)) for s in (sys.stdout, sys.stderr, sys.stdin)}
    names = sorted({str(getattr(o, "name", "?")) for o in gc.get_objects()
                   if isinstance(o, io.IOBase) and not o.closed and id(o) not in std and o.writable()
                   and getattr(o, "name", None) not in (0, 1, 2, "<stdin>", "<stdout>", "<stderr>")})
    print("open:", names, file=sys.__stderr__, flush=True)
    leave(code)
os._exit = report
if os.environ.get("LEAK"):
    kept = open(os.path.join(sys.argv[1], "leak.txt"), "w")
    kept.write("x")
sys.argv = ["memd", "--home", *sys.argv[1:]]
from memd.__main__ import main
main()
"""


@pytest.mark.parametrize("args", [["run-now", "all", "--force"], ["run-now", "summary", "--all", "--force", "--json"],
                                  ["scan"], ["list", "--all", "--json"]])  # fmt: skip
def test_a_plain_command_ends_with_no_file_left_open(tmp_path: Path, args: list[str]) -> None:
    home = _home(tmp_path / "h").root
    for leak in ("", "1"):
        r = subprocess.run([sys.executable, "-c", _OPEN_PROBE, str(home), *args], capture_output=True, text=True,
                           env={**memd_env(), "LEAK": leak}, timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
        lines = [line for line in r.stderr.splitlines() if line.startswith("open:")]
        assert lines == [f"open: {[str(home / 'leak.txt')] if leak else []}"], r.stderr


def test_run_now_command_lines() -> None:
    assert run_now_call(["run-now", "index"]) == (None, Request("index"))
    assert run_now_call(["run-now", "--project", "--force", "index"]) == (None, Request("index", "--force"))  # as click reads it
    assert run_now_call(["--home", "/h", "run-now", "--force", "dream", "--project", "-p", "--project=-q", "--json",
                         "--no-wait", "--all", "--global", "--session=s", "--home="]) == (
        "/h", Request("dream", "-q", "s", glob=True, all_=True, force=True, no_wait=True, as_json=True))  # fmt: skip
    for args in (["run-now"], ["run-now", "index", "dream"], ["run-now", "--help", "index"], ["run-now", "-h", "index"],
                 ["run-now", "index", "--project"], ["run-now", "--", "index"],
                 ["run-now", "-x"], ["run-now", "index", "--model", "m"], ["--force", "run-now", "index"],
                 ["--home", "-x", "run-now", "index"], ["run-now", "index", "--json=1"], ["--version"]):  # fmt: skip
        assert run_now_call(args) is None, args


def test_the_entries_share_a_home(tmp_path: Path) -> None:
    """One home run by the plain entry, then by click: the click run finds the plain run's work done (the
    ledger and search.sqlite as the plain entry left them, closed), and the other way round."""
    home = _home(tmp_path / "h").root
    for cmd in (ENTRY, CLICK, CLICK, ENTRY):
        r = subprocess.run([*cmd, "--home", str(home), "run-now", "index", "--json"], capture_output=True, text=True,
                           env=memd_env(), timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
    assert [r["details"]["changed"] for r in json.loads(r.stdout)] == [False, False, False]
