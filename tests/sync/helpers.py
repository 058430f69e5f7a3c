"""Two homes, a bare remote on local disk, and real git: the equipment of the sync tests."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memd import settings as st
from memd.fsutil import atomic_write, ensure_private_dir
from memd.git.commits import after_run
from memd.history.writes import Recorder
from memd.keys import key_for_root
from memd.memory.file import render_memory
from memd.tree import Home, Place

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test User", "GIT_AUTHOR_EMAIL": "user@example.invalid",
    "GIT_COMMITTER_NAME": "Test User", "GIT_COMMITTER_EMAIL": "user@example.invalid",
    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
}  # fmt: skip


def git(*args: str, cwd: Path | None = None, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ENV)
    p = subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, capture_output=True, text=True,
                       env=env, check=False)  # fmt: skip
    if check and p.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {p.stderr}")
    return p.stdout


def bare_remote(tmp: Path, name: str = "remote.git") -> Path:
    path = tmp / name
    git("init", "-q", "--bare", "-b", "main", str(path))
    return path


def make_home(tmp: Path, name: str, remote: Path | str | None, **memd: Any) -> Home:
    root = tmp / name
    (root / "projects").mkdir(parents=True)
    settings = {"memd": {"provider": "offline", "git": True, **({"sync": {"remote": str(remote)}} if remote else {}),
                         **memd}}  # fmt: skip
    (root / "settings.json").write_text(json.dumps(settings))
    return Home(root)


def settings_of(home: Home) -> Any:
    return st.load(home.settings_file)


def text(name: str, body: str, mtype: str = "feedback", updated: str = "") -> str:
    meta = {"updated": updated} if updated else {}
    return render_memory(name, f"about {name}", mtype, body, meta)


def hand_write(home: Home, key: str | None, file: str, content: str) -> Path:
    """A file written by hand (the user's change)."""
    d = Place.memory(key).memory_dir(home)
    ensure_private_dir(d)
    p = d / file
    p.write_text(content)
    return p


def memd_write(home: Home, key: str | None, file: str, content: str | None, *, job: str = "extract",
               reason: str = "test write") -> dict[str, Any] | None:  # fmt: skip
    """A memd write as the write path makes it: before-images, an atomic write, the history run,
    then its commit (`memd.git.commits.after_run`, which every writer calls once its run is durable)."""
    place = Place.memory(key)
    d = place.memory_dir(home)
    rec = Recorder(home, place, job, reason, datetime.now(UTC))
    rec.before(d / file)
    if content is None:
        (d / file).unlink()
    else:
        atomic_write(d / file, content)
    info = rec.commit()
    after_run(home, place, info, settings_of(home))
    return info


def project_checkout(tmp: Path, path: str, remote_url: str) -> Path:
    """A git repository at `path` (under tmp) whose origin is `remote_url`: a project's checkout."""
    root = tmp / path
    root.mkdir(parents=True)
    git("init", "-q", str(root))
    git("-C", str(root), "remote", "add", "origin", remote_url)
    return root


def agent_session(home: Home, root: Path, sid: str = "s1") -> str:
    """A transcript the agent wrote while working in `root`: what tells memd where a project lives."""
    key = key_for_root(os.path.realpath(root))
    d = home.projects / key
    d.mkdir(parents=True, exist_ok=True)
    rec = {"type": "user", "uuid": "u1", "sessionId": sid, "cwd": str(root), "timestamp": "2026-01-01T00:00:00Z",
           "message": {"role": "user", "content": "hello"}}  # fmt: skip
    (d / f"{sid}.jsonl").write_text(json.dumps(rec) + "\n")
    return key


def memory_files(home: Home, key: str | None) -> dict[str, bytes]:
    d = Place.memory(key).memory_dir(home)
    if not d.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name.endswith(".md") and p.name != "MEMORY.md"}


def log_subjects(home: Home) -> list[str]:
    return git("--git-dir", str(home.memd_dir / "git"), "log", "--format=%s", "main").splitlines()
