"""Project keys (SPEC §1.1) and which memory directory a cwd maps to (§1.1a).

The key rule is checked against an independent JavaScript implementation run by
node (Claude Code's own language) where node is installed, and against literals
computed by it; the canonical root against real `git` repositories, worktrees and
submodules. `tests/e2e/agents/` checks the same against a real Claude Code binary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import unicodedata
from pathlib import Path

import pytest

from memd.keys import canonical_root, cwd_key, djb2, key_for_root, memory_key_for_session, project_key
from tests.conftest import memd_cmd

JS_KEY = r"""
const p = require('fs').readFileSync(0, 'utf8');
function h(s){let x=0;for(let i=0;i<s.length;i++){x=(x<<5)-x+s.charCodeAt(i);x|=0}return x}
const s = p.replace(/[^a-zA-Z0-9]/g, '-');
process.stdout.write(s.length > 200 ? s.slice(0, 200) + '-' + Math.abs(h(p)).toString(36) : s);
"""


def js_key(path: str) -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the JavaScript oracle for keys cannot run")
    return subprocess.run([node, "-e", JS_KEY], input=path.encode(), capture_output=True, check=True).stdout.decode()


def git(*args: str, cwd: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
                   cwd=cwd, env=env, check=True, capture_output=True)  # fmt: skip


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git("init", "-q", ".", cwd=path)
    (path / "README").write_text("x\n")
    git("add", "README", cwd=path)
    git("commit", "-q", "-m", "init", cwd=path)
    return path


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/a/b", "-a-b"),
        ("/home/u/my repo.v2/src", "-home-u-my-repo-v2-src"),
        ("/tmp/rocket-🚀", "-tmp-rocket---"),  # an emoji is two UTF-16 units, so two dashes
        ("/tmp/café", "-tmp-caf-"),  # NFC: é is one unit
        ("/tmp/cafe\u0301", "-tmp-cafe-"),  # NFD: e + combining accent, no normalisation
        ("/tmp/" + "a" * 250, "-tmp-" + "a" * 195 + "-bxbzwn"),
        ("/tmp/é🚀" + "b" * 300, "-tmp----" + "b" * 192 + "-gotkl7"),
    ],
)
def test_key_literals(path: str, key: str) -> None:
    assert key_for_root(path) == key


def test_djb2_is_javascripts_int32() -> None:
    assert djb2([]) == 0
    assert djb2([ord("a")]) == 97
    assert djb2([0xFFFF] * 10) < 0  # wraps to a negative int32 as JavaScript's `| 0` does


@pytest.mark.parametrize("name", ["plain", "with space.and.dots", "café", "cafe\u0301", "rocket-🚀", "中文目录", "x" * 230])
def test_key_equals_the_javascript_rule(tmp_path: Path, name: str) -> None:
    d = tmp_path / name
    d.mkdir()
    assert cwd_key(d) == js_key(os.path.realpath(d))


def test_canonical_root_table(tmp_path: Path) -> None:
    """Every row of the issue's table: where memories of a session started in `cwd` go."""
    repo = make_repo(tmp_path / "repo")
    sub = repo / "src" / "with space.and.dots"
    sub.mkdir(parents=True)
    nfc = repo / unicodedata.normalize("NFC", "café")
    nfd = repo / unicodedata.normalize("NFD", "café")
    nfc.mkdir()
    nfd.mkdir()
    emoji = repo / "rocket-🚀"
    emoji.mkdir()
    deep = repo / ("d" * 120) / ("e" * 120)
    deep.mkdir(parents=True)
    link = tmp_path / "link-to-repo"
    link.symlink_to(repo)
    git("worktree", "add", "-q", str(tmp_path / "wt"), "-b", "feature", cwd=repo)
    (tmp_path / "wt" / "pkg").mkdir()
    lib = make_repo(tmp_path / "lib")
    git("submodule", "add", "-q", str(lib), "vendor/lib", cwd=repo)
    outside = tmp_path / "plain" / "dir"
    outside.mkdir(parents=True)

    rows = {
        "root": (repo, repo),
        "sub-directory with spaces and dots": (sub, repo),
        "non-ASCII NFC": (nfc, repo),
        "non-ASCII NFD": (nfd, repo),
        "emoji": (emoji, repo),
        "over 200 characters": (deep, repo),
        "symlink to a repository": (link / "src", repo),
        "git worktree": (tmp_path / "wt" / "pkg", repo),
        "submodule": (repo / "vendor" / "lib", repo / "vendor" / "lib"),
        "outside git": (outside, outside),
    }
    for label, (cwd, root) in rows.items():
        assert canonical_root(cwd) == root.resolve(), label
        assert project_key(cwd) == key_for_root(root.resolve()), label
    assert len(cwd_key(deep)) > 200 and cwd_key(deep) != project_key(deep)
    assert cwd_key(link) == cwd_key(repo)  # the realpath names the directory, not the link


def test_session_memory_key_falls_back_to_the_transcript_directory(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "src").mkdir()
    assert memory_key_for_session(str(repo / "src"), "transcript-key") == project_key(repo)
    assert memory_key_for_session(str(tmp_path / "gone"), "transcript-key") == "transcript-key"
    assert memory_key_for_session(None, "transcript-key") == "transcript-key"
    assert memory_key_for_session("relative/path", "transcript-key") == "transcript-key"


def test_cli_key_json(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "src").mkdir()
    r = subprocess.run([*memd_cmd(), "key", "--json", str(repo / "src")], capture_output=True, text=True, check=True)
    data = json.loads(r.stdout)
    assert data["memory_key"] == project_key(repo) and data["transcript_key"] == cwd_key(repo / "src")
    assert data["root"] == str(repo.resolve())
