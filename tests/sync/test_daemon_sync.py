"""The daemon syncs by itself: soon after a write, and every `memd.sync.everyMinutes`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.procs import DaemonProc, memd_env, run_memd, wait_for
from tests.sync.helpers import GIT_ENV, bare_remote, git, hand_write, make_home, memory_files, text


def _remote_files(remote: Path) -> set[str]:
    out = git("--git-dir", str(remote), "ls-tree", "-r", "--name-only", "main", check=False)
    return set(out.split())


@pytest.mark.slow
def test_the_daemon_syncs_after_a_write_and_within_the_interval(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path)
    a = make_home(tmp_path, "a", remote)
    b = make_home(tmp_path, "b", remote, sync={"remote": str(remote), "everyMinutes": 1})
    env_a = memd_env(**GIT_ENV, MEMD_HOST="laptop")
    # the interval is a test-only 5 s (`memd.sync.everyMinutes` is at least a minute): nothing waits on the wall clock
    with DaemonProc(b.root, env=memd_env(**GIT_ENV, MEMD_HOST="desk", MEMD_TEST_SYNC_EVERY_SECONDS="5")):
        # a hand edit on B: the index job commits it, and the daemon pushes it soon after (not a minute later)
        hand_write(b, None, "desk-note.md", text("desk-note", "Written on the desk."))
        wait_for(lambda: "global/desk-note.md" in _remote_files(remote), every=0.5)
        # A pushes a memory; B's daemon pulls it within the interval without being asked
        hand_write(a, None, "laptop-note.md", text("laptop-note", "Written on the laptop."))
        assert run_memd(a.root, "sync", env=env_a).returncode == 0
        wait_for(lambda: "laptop-note.md" in memory_files(b, None), every=0.5)
        # its index follows, and status says so
        wait_for(lambda: "laptop-note" in (b.global_memory / "MEMORY.md").read_text(), every=0.2)
        # polled too: the pull's sync run records its outcome after its files land, and the index may come first
        st = wait_for(lambda: _sync_ok(b.root))
        assert st["last_ok"] and st["last_error"] is None and st["remote"] == str(remote)


def _sync_ok(root: Path) -> dict[str, Any] | None:
    st: dict[str, Any] = json.loads(run_memd(root, "status", "--json", env=memd_env(**GIT_ENV)).stdout)["sync"]
    return st if st["last_ok"] and st["last_error"] is None else None
