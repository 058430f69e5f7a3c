"""The hooks' click-free entry (`memd.__main__`, issue 27 point 3): a hook's command line runs without
click, logging or anything else it does not use, and answers exactly as the click command does.

Real processes on a real home, the hooks' JSON on stdin as Claude Code sends it. What a process loaded
is what `-X importtime` lists (nothing is added to the hooks' path to tell).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from memd.__main__ import HOOK_COMMANDS, hook_call
from memd.agent.connect import SUBCOMMANDS
from memd.index.refresh import refresh_all
from memd.keys import cwd_key, project_key
from memd.memory.file import render_memory, write_memory
from memd.tree import Home
from tests.procs import memd_env

REPO = Path(__file__).resolve().parents[2]
ENTRY = [sys.executable, "-c", "from memd.__main__ import main; main()"]  # what the `memd` script runs
CLICK = [sys.executable, "-c", "from memd.cli import main; main()"]  # the click CLI, as before issue 27
# Never on a hook's path: third-party packages (see `only_stdlib_and_memd`), and these.
DENIED = {
    "click", "logging", "hashlib", "_hashlib", "subprocess", "asyncio", "ssl", "socket", "uuid", "platform",
    "gettext", "locale", "email", "http", "tempfile", "shutil", "textwrap", "traceback", "argparse",
    "memd.cli", "memd.logs.events", "memd.index.render", "memd.memory.file", "memd.llm",
    "inspect", "ast", "dis",  # dataclasses' inspect is deferred (memd.__main__._dataclasses)
}  # fmt: skip


@pytest.fixture
def world(tmp_path: Path) -> tuple[Home, Path]:
    home = Home(tmp_path / "claude")
    proj = tmp_path / "shop"
    (proj / ".git").mkdir(parents=True)
    write_memory(home.global_memory, "prefers-tabs",
                 render_memory("prefers-tabs", "the user indents with tabs", "user", "Tabs, never spaces."))  # fmt: skip
    write_memory(home.project_memory(project_key(proj)), "deploy-fridays",
                 render_memory("deploy-fridays", "deploys happen only on Fridays", "project", "Run make deploy."))  # fmt: skip
    (home.root / "settings.json").write_text('{"memd": {"provider": "offline"}}')
    refresh_all(home)
    return home, proj


def event(home: Home, proj: Path, sid: str, name: str, **extra: Any) -> bytes:
    return json.dumps({"session_id": sid, "transcript_path": str(home.projects / cwd_key(proj) / f"{sid}.jsonl"),
                       "cwd": str(proj), "hook_event_name": name, "permission_mode": "default", **extra}).encode()  # fmt: skip


def run(cmd: list[str], args: list[str], stdin: bytes, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*cmd, *args], input=stdin, capture_output=True, env=memd_env(), cwd=cwd, timeout=60)


def loaded_modules(args: list[str], stdin: bytes, cwd: Path) -> tuple[bytes, set[str]]:
    """The hook's stdout and the modules it imported after the interpreter's start (`-X importtime`)."""
    r = run([ENTRY[0], "-X", "importtime", *ENTRY[1:]], args, stdin, cwd)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    names = [
        line.rsplit("|", 1)[-1].strip() for line in r.stderr.decode().splitlines() if line.startswith("import time:")
    ]
    return r.stdout, set(names[names.index("memd") :])  # from memd's package on (site's imports come before)


def only_stdlib_and_memd(names: set[str]) -> set[str]:
    """The names of neither (`org.python.core` is `copy`'s failed look for Jython)."""
    return {n for n in names if n.split(".")[0] not in {*sys.stdlib_module_names, "memd", "org"}}


def test_the_memd_script_is_the_click_free_entry() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["memd"] == "memd.__main__:main"
    assert HOOK_COMMANDS == SUBCOMMANDS  # every hook `memd connect` installs takes the click-free path


@pytest.mark.parametrize(("sub", "name", "extra", "needle"), [
    ("context", "SessionStart", {"source": "startup"}, b"Tabs, never spaces."),
    ("recall", "UserPromptSubmit", {"prompt": "how do we deploy on fridays?"}, b"deploy-fridays"),
])  # fmt: skip
def test_a_hook_loads_no_click_no_logging_nothing_it_does_not_use(
    world: tuple[Home, Path], sub: str, name: str, extra: dict[str, Any], needle: bytes
) -> None:
    home, proj = world
    # a home memd has used: the first hook leaves settings.last-good.json (fsutil's tempfile, once)
    run(ENTRY, ["--home", str(home.root), sub, "--hook"], event(home, proj, "s0", name, **extra), proj)
    out, names = loaded_modules(["--home", str(home.root), sub, "--hook"], event(home, proj, "s1", name, **extra), proj)
    assert needle in out  # it did its whole work (a hook that bailed out early would load less)
    assert "memd.agent.hooks" in names
    assert not only_stdlib_and_memd(names), sorted(only_stdlib_and_memd(names))
    assert not {n for n in names if n in DENIED or n.split(".")[0] in DENIED or n.rsplit(".", 1)[0] in DENIED}, sorted(
        names
    )


@pytest.mark.parametrize(("args", "expected"), [
    (["context", "--hook"], ("context", None)),
    (["recall", "--hook"], ("recall", None)),
    (["precompact", "--hook"], ("precompact", None)),
    (["--home", "/h", "context", "--hook"], ("context", "/h")),
    (["--home=/h", "recall", "--hook"], ("recall", "/h")),
    (["recall", "--hook", "--home", "/h"], ("recall", "/h")),
    (["recall", "--home", "/h", "--hook"], ("recall", "/h")),
    (["--home", "/a", "recall", "--hook", "--home=/b"], ("recall", "/b")),  # the command's wins, as in click
    (["--home", "/a", "--home", "/b", "recall", "--hook"], ("recall", "/b")),  # the last wins
    (["--home", "/a", "recall", "--hook", "--home="], ("recall", "/a")),  # an empty one counts as none
    (["--home", "", "context", "--hook"], ("context", None)),
    # anything else is click's
    (["context"], None), (["recall", "deploy"], None), (["recall", "--hook", "deploy"], None),
    (["context", "--hook", "--agent", "claude"], None), (["context", "--hook", "--json"], None),
    (["context", "--hook", "--hook"], None), (["--hook", "context"], None), (["context", "--hook", "--help"], None),
    (["--home", "context", "--hook"], None), (["context", "--hook", "--home"], None),
    (["context", "--home", "--hook"], None),  # click takes `--hook` as the home
    (["status"], None), ([], None), (["--version"], None), (["context", "--hook=1"], None), (["recall", "--", "--hook"], None),
])  # fmt: skip
def test_which_command_lines_take_the_hook_path(args: list[str], expected: tuple[str, str | None] | None) -> None:
    assert hook_call(args) == expected


def test_a_home_value_click_refuses_is_left_to_click(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "locked").mkdir(mode=0o000)
    assert hook_call(["--home", str(tmp_path / "file"), "context", "--hook"]) is None
    if not os.access(tmp_path / "locked", os.R_OK):  # root reads anything
        assert hook_call(["recall", "--hook", "--home", str(tmp_path / "locked")]) is None
    assert hook_call(["--home", str(tmp_path / "absent"), "context", "--hook"]) == ("context", str(tmp_path / "absent"))


CASES = [  # (command line, H the home and F a file; the event's name, None for a malformed one; its fields; answers)
    (["--home", "H", "context", "--hook"], "SessionStart", {"source": "startup"}, True),
    (["recall", "--hook", "--home=H"], "UserPromptSubmit", {"prompt": "deploy on fridays"}, True),
    (["--home", "H", "recall", "--hook"], "UserPromptSubmit", {"prompt": "nothing memory holds"}, False),
    (["--home", "H", "recall", "--hook"], None, {}, False),
    (["--home", "H", "context", "--hook"], None, {}, False),
    (["--home", "H/absent", "context", "--hook"], "SessionStart", {"source": "startup"}, False),
    (["--home", "F", "recall", "--hook"], "UserPromptSubmit", {"prompt": "deploy"}, False),  # click's usage error, exit 2
]


@pytest.mark.parametrize(("args", "name", "extra", "answers"), CASES)
def test_the_hook_path_answers_byte_for_byte_as_the_click_command(
    world: tuple[Home, Path], tmp_path: Path, args: list[str], name: str | None, extra: dict[str, Any], answers: bool
) -> None:
    """Same stdout, stderr and exit code through the click-free entry and through click: answers, a
    malformed event, a missing home, a home that is a file."""
    home, proj = world
    (tmp_path / "a-file").write_text("")
    args = [a.replace("H", str(home.root)) if "H" in a else a.replace("F", str(tmp_path / "a-file")) for a in args]
    results = []
    for j, cmd in enumerate((ENTRY, CLICK)):
        stdin = event(home, proj, f"s{j}", name, **extra) if name else b'{"session_id": '
        r = run(cmd, args, stdin, proj)
        results.append((r.returncode, r.stdout, r.stderr))
    assert results[0] == results[1], results
    assert results[0][0] == (2 if "a-file" in " ".join(args) else 0)
    assert bool(results[0][1]) == answers


def test_malformed_hook_input_is_one_line_and_exit_0(world: tuple[Home, Path]) -> None:
    home, proj = world
    malformed = run(ENTRY, ["--home", str(home.root), "recall", "--hook"], b"{", proj)
    assert malformed.returncode == 0 and malformed.stdout == b"" and malformed.stderr.decode().count("\n") == 1
    assert malformed.stderr.startswith(b"memd: hook skipped: JSONDecodeError")


def test_site_after_a_hook_program_puts_every_directory_where_a_plain_start_does(tmp_path: Path) -> None:
    """A hook program (memd.agent.connect.HOOK_CODE) appends memd's directory before `site` runs; `_site` must
    still leave sys.path as a plain start orders it, or a package of a site directory `site` puts first (the user
    site before the system's dist-packages; a venv's own before its base's) loses to one beside memd in a hook that
    answers itself. Here: a venv with the system's packages and a user site; memd in the later of the two."""
    from memd.agent.connect import HOOK_CODE  # noqa: PLC0415 - this test's only

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    env = memd_env(PYTHONUSERBASE=str(tmp_path / "user"))
    env.pop("PYTHONPATH", None)

    def path_of(*args: str) -> list[str]:
        out = subprocess.run([py, *args], capture_output=True, text=True, env=env, check=True).stdout
        return list(json.loads(out))

    user, own = path_of("-c", "import json, site; print(json.dumps([site.getusersitepackages(), site.getsitepackages()[0]]))")
    Path(user).mkdir(parents=True)
    plain = path_of("-P", "-c", "import json, sys; print(json.dumps(sys.path))")
    later = max((user, own), key=plain.index)
    (Path(later) / "memd").symlink_to(Path(__file__).resolve().parents[2] / "memd")
    program = HOOK_CODE.format(root=later).replace("import main; main()", "import _site; _site(); print(json.dumps(sys.path))")
    assert path_of("-S", "-P", "-c", "import json; " + program) == plain
