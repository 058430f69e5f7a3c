"""Shared helpers of the benchmark harness: where the corpus is, timing, result notes."""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("MEMD_CORPUS", REPO.parent / "shared" / "corpus" / "claude-code"))
MEMD = [str(Path(sys.executable).with_name("memd"))]


def start_daemon(home: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`memd run` on `home`, once it has written its daemon.json (or SystemExit after 60 s)."""
    p = subprocess.Popen([*MEMD, "--home", str(home), "run"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 60
    while not (home / "memd" / "daemon.json").exists():
        if time.time() > deadline or p.poll() is not None:
            raise SystemExit("daemon did not start")
        time.sleep(0.05)
    return p


def need_corpus() -> None:
    if not CORPUS.is_dir():
        sys.exit(f"corpus folder {CORPUS} is absent")


def compile_memd() -> None:
    """Write memd's bytecode before timing its processes, as an installed memd has it: with
    PYTHONDONTWRITEBYTECODE set (as on some machines), every `memd` process would otherwise compile
    its changed modules from source again, tens of milliseconds that no installed copy pays."""

    compileall.compile_dir(str(REPO / "memd"), quiet=1)


def replicate_corpus(home: Path, min_bytes: int) -> int:
    """Copy the corpus into `home` as many projects as needed to reach `min_bytes`."""
    need_corpus()
    one = sum(p.stat().st_size for p in CORPUS.rglob("*.jsonl"))
    copies = -(-min_bytes // one)
    for i in range(copies):
        for d in sorted(CORPUS.iterdir()):
            if d.is_dir():
                shutil.copytree(d, home / "projects" / f"-copy{i:03d}-{d.name}")
    return copies * one


def timed(cmd: list[str], env: dict[str, str] | None = None, text: bool = True) -> tuple[float, Any]:
    """Wall time of a command with its output read through a pipe, as a consumer would.

    `text=False` reads bytes: decoding megabytes of output in the harness is the
    harness's cost, not the command's.
    """
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=text, env=env)
    return time.perf_counter() - t, r


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def write_section(title: str, text: str, path: Path) -> None:
    """Replace one benchmark's `## title` section of RESULTS.md, leaving the other sections alone."""
    old = path.read_text() if path.exists() else "# Benchmark results\n"
    start = old.find(title)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        nxt = old.find("\n## ", start + len(title))
        new = old[:start] + text + ("" if nxt < 0 else "\n" + old[nxt + 1 :])
    path.write_text(new.rstrip("\n") + "\n")
