"""Which `projects/<key>/` a real Claude Code uses for a working directory.

For each cwd of the table, Claude Code runs once (`claude -p`) with a fresh
config dir in which a `projects/<candidate>/memory/MEMORY.md` is planted for
every candidate key — the cwd as given, its real path, its git root, the
canonical git root (a linked worktree's main repository) — each with its own
marker line. The test then checks, against the pure functions of
tests/realclaude.py:

- the transcript lands in `projects/<claude_key(realpath(cwd))>/<session>.jsonl`;
- the one MEMORY.md whose marker reaches the model (first request) is the one
  of `claude_memory_key(realpath(cwd))`, and the memory directory the system
  prompt names is that key's `memory/`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakeapi import FakeAnthropic, text
from tests.realclaude import ClaudeInstall, claude_key, claude_memory_key, claude_memory_root, git_root, run_claude

_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "memd test",
    "GIT_AUTHOR_EMAIL": "memd@example.invalid",
    "GIT_COMMITTER_NAME": "memd test",
    "GIT_COMMITTER_EMAIL": "memd@example.invalid",
}


def git(cwd: Path, *args: str) -> None:
    env = {**os.environ, **_GIT_ENV}
    subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always", *args],
                   cwd=cwd, env=env, check=True, capture_output=True)


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q")
    (path / "README").write_text("x\n", encoding="utf-8")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "init")
    return path


@dataclass
class World:
    base: Path
    repo: Path
    plain: Path


NFC = unicodedata.normalize("NFC", "café-é")
NFD = unicodedata.normalize("NFD", "café-é")
LONG = ["segment-one-ü-" + "a" * 50, "segment-two-" + "b" * 60, "segment-three-日本-" + "c" * 50, "tail-🚀-" + "d" * 40]


def _mk(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def _symlink(w: World) -> Path:
    link = w.base / "link to repo"
    if not link.is_symlink():
        link.symlink_to(w.repo, target_is_directory=True)
    return link


def _worktree(w: World) -> Path:
    wt = w.base / "wt.tree"
    if not wt.exists():
        git(w.repo, "worktree", "add", "-q", "-b", "wt-branch", str(wt))
    return wt


def _submodule(w: World) -> Path:
    sub = w.repo / "mods" / "lib"
    if not sub.exists():
        lib = w.base / "lib-origin"
        if not lib.exists():
            new_repo(lib)
        git(w.repo, "submodule", "add", "-q", str(lib), "mods/lib")
    return sub


ROWS: dict[str, Callable[[World], Path]] = {
    "repo-root": lambda w: w.repo,
    "subdir-spaces-dots": lambda w: _mk(w.repo / "sub dir" / "v1.2 .hidden.d"),
    "non-ascii-nfc": lambda w: _mk(w.repo / NFC),
    "non-ascii-nfd": lambda w: _mk(w.repo / NFD),
    "emoji": lambda w: _mk(w.repo / "rocket-🚀"),
    "long-in-repo": lambda w: _mk(w.repo.joinpath(*LONG)),
    "long-outside-git": lambda w: _mk(w.plain.joinpath(*LONG)),
    "symlink-to-repo": _symlink,
    "worktree": _worktree,
    "worktree-subdir": lambda w: _mk(_worktree(w) / "src"),
    "submodule": _submodule,
    "submodule-subdir": lambda w: _mk(_submodule(w) / "inner"),
    "outside-git": lambda w: w.plain,
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("keys").resolve()
    plain = _mk(base / "plain dir")
    return World(base=base, repo=new_repo(base / "my.repo"), plain=plain)


def _candidates(cwd: Path) -> dict[str, list[str]]:
    """Candidate key -> the names of the directories it is the key of."""
    real = Path(os.path.realpath(cwd))
    named = {"given": str(cwd), "realpath": str(real), "canonical-git-root": str(claude_memory_root(real))}
    root = git_root(real)
    if root is not None:
        named["git-root"] = str(root)
    named["nfc-realpath"] = unicodedata.normalize("NFC", str(real))
    out: dict[str, list[str]] = {}
    for label, path in named.items():
        out.setdefault(claude_key(path), []).append(label)
    return out


@pytest.mark.parametrize("row", list(ROWS))
def test_project_and_memory_keys(
    row: str, world: World, claude: ClaudeInstall, tmp_path: Path, ground_truth: list[str]
) -> None:
    cwd = ROWS[row](world)
    real = Path(os.path.realpath(cwd))
    config = tmp_path / "home" / ".claude"
    markers: dict[str, str] = {}
    for i, (key, labels) in enumerate(_candidates(cwd).items()):
        marker = f"MEMD-MARKER-{i}-{'+'.join(labels)}"
        markers[marker] = key
        mem = config / "projects" / key / "memory"
        mem.mkdir(parents=True)
        (mem / "MEMORY.md").write_text(f"- [m](m.md) — {marker}\n", encoding="utf-8")

    with FakeAnthropic(default=text("OK keys")) as api:
        run = run_claude("which memory?", cwd, config, api.url, claude=claude)
        asked = api.message_requests
    assert run.returncode == 0, run.stderr
    assert asked, "Claude Code sent no request"
    body = json.dumps(dict(asked[0]), ensure_ascii=False)

    transcript = run.transcript()
    assert transcript is not None, sorted(str(p.relative_to(config)) for p in config.rglob("*.jsonl"))
    seen = sorted(m for m in markers if m in body)
    memory_dirs = re.findall(r"persistent file-based memory at `([^`]+)`", body)
    ground_truth.append(
        f"{row}: cwd={str(cwd)[len(str(world.base)):]!r} -> transcript dir {transcript.parent.name!r} "
        f"({len(transcript.parent.name)} chars); MEMORY.md that reached the model: {seen}; "
        f"{run.elapsed:.2f}s"
    )

    assert transcript.parent.name == claude_key(str(real))
    expected_memory = claude_memory_key(real)
    assert [markers[m] for m in seen] == [expected_memory], seen
    assert [Path(d).parent.name for d in memory_dirs] == [expected_memory]
    # a transcript key never exceeds 200 characters + "-" + the hash
    assert len(transcript.parent.name) <= 200 + 1 + 7


def test_key_function_examples() -> None:
    """Fixed points of claude_key, computed with Claude Code's own JS function (2.1.197)."""
    assert claude_key("/home/u/my.repo/sub dir") == "-home-u-my-repo-sub-dir"
    assert claude_key("/x/rocket-🚀") == "-x-rocket---"  # a surrogate pair: two dashes
    assert claude_key("/x/" + unicodedata.normalize("NFC", "café")) == "-x-caf-"
    assert claude_key("/x/" + unicodedata.normalize("NFD", "café")) == "-x-cafe-"  # e + U+0301
    assert claude_key("/" + "a" * 250) == "-" + "a" * 199 + "-feo44x"
    assert claude_key("/" + "a" * 199) == "-" + "a" * 199  # exactly 200: no hash
