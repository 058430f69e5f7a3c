"""`memd scan`'s click-free entry (`memd.__main__.scan_call`, issue 27 point 1): a plain `memd [--home H]
scan [--json]` runs without click and answers exactly as the click command does; anything else, a home
that is missing or not a directory included, goes to click.

Real processes on copies of one small home: the first scan of each copy, then a scan with nothing new.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memd.__main__ import scan_call, scan_command
from tests.procs import memd_env

ENTRY = [sys.executable, "-c", "from memd.__main__ import main; main()"]  # what the `memd` script runs
CLICK = [sys.executable, "-c", "from memd.cli import main; main()"]  # the click CLI alone
LINE = {"type": "user", "uuid": "u1", "timestamp": "2026-11-30T00:00:00.000Z",
        "message": {"role": "user", "content": "keep the ledger exact"}}  # fmt: skip


def _home(root: Path) -> Path:
    p = root / "projects" / "-work-shop" / "s1.jsonl"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(LINE) + "\n")
    return root


def _run(cmd: list[str], args: list[str], cwd: Path) -> tuple[int, bytes, bytes]:
    r = subprocess.run([*cmd, *args], capture_output=True, env=memd_env(), cwd=cwd, timeout=120)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize("args", [
    ["--home", "{h}", "scan", "--json"],
    ["scan", "--home={h}", "--json", "--json"],
    ["--home", "/nowhere", "scan", "--home", "{h}"],  # the command's --home wins over the group's
    ["--home", "{h}", "scan", "--home="],  # an empty one counts as none
])  # fmt: skip
def test_a_plain_scan_answers_as_the_click_command(tmp_path: Path, args: list[str]) -> None:
    mine, theirs = _home(tmp_path / "a"), tmp_path / "b"
    shutil.copytree(mine, theirs)
    for _ in range(2):  # a first scan, then one with nothing new
        got = _run(ENTRY, [a.format(h=mine) for a in args], tmp_path)
        want = _run(CLICK, [a.format(h=theirs) for a in args], tmp_path)
        assert got == want and got[0] == 0


@pytest.mark.parametrize("as_json", [True, False])
def test_a_reader_gone_ends_the_scan_silently_with_exit_1(tmp_path: Path, as_json: bool) -> None:
    """stdout a pipe whose reader is gone: the scan is done and committed, its totals go nowhere, exit 1
    and nothing on stderr, as click's standalone mode ends it (a traceback before the fix)."""
    for cmd, side in ((ENTRY, "a"), (CLICK, "b")):
        home = _home(tmp_path / side)
        read, write = os.pipe()
        os.close(read)
        r = subprocess.run([*cmd, "--home", str(home), "scan", *(["--json"] if as_json else [])], stdout=write,
                           stderr=subprocess.PIPE, env=memd_env(), timeout=120)  # fmt: skip
        os.close(write)
        assert (r.returncode, r.stderr) == (1, b""), cmd
        assert _run(cmd, ["--home", str(home), "scan", "--json"], tmp_path)[1].count(b'"records": 0') == 1  # committed


@pytest.mark.parametrize("home", ["missing", "file"])
def test_a_home_click_refuses_is_refused_as_click_refuses_it(tmp_path: Path, home: str) -> None:
    target = tmp_path / home
    if home == "file":
        target.write_text("x")
    for args in (["--home", str(target), "scan", "--json"], ["scan", "--home", str(target)]):
        got, want = _run(ENTRY, args, tmp_path), _run(CLICK, args, tmp_path)
        assert got == want and got[0] == 2


def test_the_plain_scan_loads_neither_click_nor_the_cli(tmp_path: Path) -> None:
    h = _home(tmp_path / "h")
    code = ("import os, sys; sys.argv = ['memd', '--home', sys.argv[1], 'scan', '--json']\n"
            "leave = os._exit\n"  # a plain scan ends through os._exit (`memd.__main__._leave`)
            "def report(code):\n"
            "    import gc\n"
            "    print('collector', gc.isenabled(), file=sys.stderr)\n"
            "    print(sorted(m for m in ('click', 'memd.cli', 'logging') if m in sys.modules), file=sys.stderr, flush=True)\n"
            "    leave(code)\n"
            "os._exit = report\n"
            "from memd.__main__ import main\n"
            "main()\n")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code, str(h)], capture_output=True, env=memd_env(), timeout=120)
    assert r.returncode == 0 and r.stderr.decode().strip().splitlines()[-2:] == ["collector False", "[]"]
    assert json.loads(r.stdout)["records"] == 1


def test_a_scan_left_to_click_runs_with_the_collector_on(tmp_path: Path) -> None:
    """The plain scan turns the cyclic collector off for its imports and its fold; a command line it
    leaves to click (here a home that is not there) gets it back on."""
    assert gc.isenabled()
    assert scan_command(str(tmp_path / "missing"), True) is None
    assert gc.isenabled()


# Runs `memd [--home H] scan --json` as the `memd` script does, with an exit handler that leaves a mark
# (`.exit`) and an object whose finaliser leaves another (`.final`: the interpreter's finalisation frees it).
_MARKED = ("import atexit, sys\n"
           "mark = sys.argv[2]\n"
           "atexit.register(lambda: open(mark + '.exit', 'w').close())\n"
           "class Freed:\n"
           "    def __init__(self, path, opener=open): self.path, self.opener = path, opener\n"
           "    def __del__(self): self.opener(self.path, 'w').close()\n"
           "kept = Freed(mark + '.final')\n"
           "sys.argv = ['memd', '--home', sys.argv[1], 'scan', '--json']\n"
           "from memd.__main__ import main\n"
           "main()\n")  # fmt: skip


def test_a_plain_scan_ends_without_finalising(tmp_path: Path) -> None:
    """A plain scan leaves through `os._exit` once its output is flushed (its ledger is committed and
    closed): the exit handlers run (logging's among them, which flushes and closes the log file of a scan
    that logged a warning), the interpreter's finalisation does not, and its whole output is there,
    through a pipe. A plain run that finalised would leave the `.final` mark; one that skipped the exit
    handlers would leave no `.exit` mark and no log line."""
    clean, bad = _home(tmp_path / "clean"), _home(tmp_path / "bad")
    with open(bad / "projects" / "-work-shop" / "s1.jsonl", "a") as fh:
        fh.write("{not json\n")
    marks = {}
    for name, h in (("clean", clean), ("bad", bad)):
        mark = tmp_path / name
        r = subprocess.run([sys.executable, "-c", _MARKED, str(h), str(mark)], capture_output=True, env=memd_env(),
                           timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["records"] == 1 and out["problems"] == (name == "bad")
        marks[name] = (Path(f"{mark}.exit").exists(), Path(f"{mark}.final").exists())
    assert marks == {"clean": (True, False), "bad": (True, False)}
    assert "transcript.line_skipped" in (bad / "memd" / "logs" / "memd.jsonl").read_text()


def test_the_marked_probe_sees_a_finalised_exit(tmp_path: Path) -> None:
    """The probe above can fail: a command line click runs (here `memd scan --help`) ends through
    `sys.exit`, and the finalisation leaves its mark."""
    mark = tmp_path / "help"
    code = _MARKED.replace("'scan', '--json'", "'scan', '--help'")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(mark)], capture_output=True, env=memd_env(),
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert (Path(f"{mark}.exit").exists(), Path(f"{mark}.final").exists()) == (True, True)


@pytest.mark.parametrize(("args", "want"), [
    (["scan"], (None, False)),
    (["--home", "H", "scan", "--json"], ("H", True)),
    (["--home", "G", "scan", "--home", "H"], ("H", False)),
    (["scan", "--project", "k"], None),
    (["scan", "--help"], None),
    (["--json", "scan"], None),
    (["scan", "scan"], None),
    (["sessions", "--json"], None),
    (["scan", "--home"], None),
])  # fmt: skip
def test_only_the_plain_forms_skip_click(args: list[str], want: tuple[str | None, bool] | None) -> None:
    assert scan_call(args) == want
