"""The one-time move of memories written under sub-directory and worktree keys (issue 11 §1)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from memd.keys import cwd_key, project_key
from tests.conftest import memd_cmd
from tests.procs import DaemonProc, memd_env, wait_for
from tests.test_keys import git, make_repo

MEM = "---\nname: {name}\ndescription: {desc}\ntype: project\n---\n{body}\n"


def plant(home: Path, key: str, cwd: Path, files: dict[str, str]) -> Path:
    d = home / "projects" / key
    (d / "memory").mkdir(parents=True, exist_ok=True)
    rec = {"type": "user", "uuid": "u1", "sessionId": "s1", "cwd": str(cwd), "timestamp": "2026-11-30T10:00:00Z",
           "message": {"role": "user", "content": "hello"}}  # fmt: skip
    (d / "s1.jsonl").write_text(json.dumps(rec) + "\n")
    for name, body in files.items():
        (d / "memory" / name).write_text(MEM.format(name=name[:-3], desc=body[:20], body=body))
    return d / "memory"


def mds(d: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(d.glob("*.md")) if p.name != "MEMORY.md"} if d.is_dir() else {}


def test_sub_directory_and_worktree_memories_move_to_the_root_and_undo_puts_them_back(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "src").mkdir()
    git("worktree", "add", "-q", str(tmp_path / "wt"), "-b", "topic", cwd=repo)
    home = tmp_path / "home"
    root_key = project_key(repo)
    root_mem = plant(home, root_key, repo, {"db.md": "Postgres.", "ci.md": "CI runs on push."})
    sub_mem = plant(home, cwd_key(repo / "src"), repo / "src", {"lint.md": "Run ruff.", "db.md": "Postgres."})
    wt_mem = plant(home, cwd_key(tmp_path / "wt"), tmp_path / "wt", {"ci.md": "CI runs nightly."})
    before = {"root": mds(root_mem), "sub": mds(sub_mem), "wt": mds(wt_mem)}
    with DaemonProc(home, env=memd_env()) as d:
        wait_for(lambda: "lint.md" in mds(root_mem) and "ci-2.md" in mds(root_mem))
        assert d.stop() == 0
    after = mds(root_mem)
    assert set(after) == {"db.md", "ci.md", "lint.md", "ci-2.md"}  # same bytes not copied twice; a clash renamed
    assert after["ci.md"] == before["root"]["ci.md"] and "nightly" in after["ci-2.md"]  # nothing overwritten
    assert mds(sub_mem) == {} and mds(wt_mem) == {}
    assert "lint" in (root_mem / "MEMORY.md").read_text()
    hist = json.loads(subprocess.run([*memd_cmd(), "--home", str(home), "history", "--json"], capture_output=True,
                                     text=True, check=True).stdout)  # fmt: skip
    runs = {r["run"] for r in hist if r["job"] == "migrate"}
    assert len(runs) == 2  # one run per moved directory, each recorded in both scopes
    for run in sorted(runs, reverse=True):
        r = subprocess.run([*memd_cmd(), "--home", str(home), "undo", run], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert mds(root_mem) == before["root"] and mds(sub_mem) == before["sub"] and mds(wt_mem) == before["wt"]
    with DaemonProc(home, env=memd_env()) as d:  # once per home: not moved again
        wait_for(lambda: (home / "memd" / "daemon.json").exists())
        assert d.stop() == 0
    assert mds(sub_mem) == before["sub"]
