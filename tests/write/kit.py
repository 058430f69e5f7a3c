"""Shared by the control tests: a home with settings, a transcript, an $EDITOR script, the CLI as a process."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from memd.memory.file import render_memory
from tests.procs import memd_env, run_memd

KEY = "-work-repo"
SID = "s1"
GHP = "ghp_" + "Zq7k" * 9  # 36 characters after the prefix
SK_ANT = "sk-ant-api03-" + "Yw3_" * 20 + "xQAA"
AKIA = "AKIA" + "Q7ZK2M4N6P8R3T5V"
AWS_SECRET = "aws_secret_access_key=" + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "9Tq2Zk4Lm8"
SECRETS = (GHP, SK_ANT, AKIA, AWS_SECRET.split("=", 1)[1])


def settings(home: Path, memory: dict[str, Any] | None = None, memd: dict[str, Any] | None = None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    data = {"memory": memory or {}, "memd": {"provider": "offline", **(memd or {})}}
    (home / "settings.json").write_text(json.dumps(data))


def cli(home: Path, *args: str, editor: Path | None = None, env: dict[str, str] | None = None) -> Any:
    extra = {"EDITOR": str(editor), "VISUAL": ""} if editor else {}
    tmp = home.parent / "tmp"  # edit copies (kept when refused) stay inside the test's directory
    tmp.mkdir(exist_ok=True)
    return run_memd(home, *args, env={**(env or memd_env(**extra)), "TMPDIR": str(tmp)})


def cli_json(home: Path, *args: str, **kw: Any) -> Any:
    r = cli(home, *args, "--json", **kw)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return json.loads(r.stdout)


def editor(tmp: Path, name: str, python: str) -> Path:
    """An $EDITOR: a script that runs `python` with `p` the path of the file and `t` its text, then saves `t`."""
    script = tmp / f"{name}.py"

    script.write_text(
        f"#!{sys.executable}\nimport sys, pathlib\np = pathlib.Path(sys.argv[1])\nt = p.read_text()\n{python}\n"
        "p.write_text(t)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def memory_dir(home: Path, key: str | None = KEY) -> Path:
    return home / "memory" if key is None else home / "projects" / key / "memory"


def write_memory(home: Path, name: str, body: str, *, key: str | None = KEY, typ: str = "project",
                 description: str | None = None, meta: dict[str, Any] | None = None) -> Path:  # fmt: skip
    d = memory_dir(home, key)
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{name}.md"
    p.write_text(render_memory(name, description or f"about {name}", typ, body, meta or {}), encoding="utf-8")
    return p


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every regular file under `root` (relative path → bytes)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            if p.is_file() and not p.is_symlink():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out


def memory_files(home: Path) -> dict[str, bytes]:
    """The memory directories' files (memories and MEMORY.md), and the drawer render."""
    out = {}
    for d in [home / "memory", *sorted((home / "projects").glob("*/memory"))]:
        if d.is_dir():
            out.update({str(p.relative_to(home)): p.read_bytes() for p in d.iterdir() if p.is_file()})
    if (home / "memory.md").exists():
        out["memory.md"] = (home / "memory.md").read_bytes()
    return out
