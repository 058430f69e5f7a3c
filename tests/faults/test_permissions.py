"""Permissions: everything memd creates is private to the user, whatever the umask.

The daemon and the shell commands run with umask 022 (the common default, under
which files come out 0644 and directories 0755 unless memd sees to it). After
extraction, summaries, indexes, searches and status have all run, every file
and directory under the home that memd created — memd/ itself, the drawer and
project memory directories, session-memory directories, summary.md, MEMORY.md,
the drawer render, search.sqlite and state.sqlite with their -wal and -shm,
logs, locks, the pid file — is 0700 (directories) or 0600 (files). The walk is
made while the daemon runs (so SQLite's -wal/-shm files exist) and again after
it stopped.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from memd.index.search import open_readonly
from tests.conftest import memd_cmd
from tests.faults.kit import FakeModel, append, build_corpus, settle, walk, write_settings
from tests.procs import DaemonProc


def _memd(home: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*memd_cmd(), "--home", str(home), *args], capture_output=True, text=True, env=env,
                          timeout=120, preexec_fn=lambda: os.umask(0o022))  # fmt: skip


def _modes(home: Path, ours: set[Path]) -> tuple[dict[str, str], int]:
    """Paths memd created whose mode is not private, and how many were checked."""
    wrong: dict[str, str] = {}
    checked = 0
    for p in walk(home):
        if p in ours:
            continue
        st = p.lstat()
        mode = stat.S_IMODE(st.st_mode)
        want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
        checked += 1
        if mode != want:
            wrong[str(p.relative_to(home))] = f"{mode:04o} (want {want:04o})"
    return wrong, checked


@pytest.mark.slow
def test_everything_memd_creates_is_private_under_umask_022(
    tmp_path: Path, fault_report: Counter[str], fault_notes: list[str]
) -> None:
    old = os.umask(0o022)
    try:
        home = tmp_path / "home"
        write_settings(home)
        corpus = build_corpus(5, projects=2, sessions=2, groups=5)
        ours = {home, home / "settings.json"}
        with FakeModel(tmp_path / "api") as api:
            env = api.env()
            with DaemonProc(home, env=env) as d:  # inherits umask 022 from this process
                for rel, data in corpus.writes:
                    append(home, rel, data)
                    ours |= {home / rel, (home / rel).parent, home / "projects"}
                settle(home)
                for args in (["run-now", "extract", "--force"], ["run-now", "summary", "--force"], ["run-now", "index"],
                             ["scan"], ["sessions", "--json"], ["status", "--json"], ["search", "deploy"],
                             ["list"], ["logs"]):  # fmt: skip
                    r = _memd(home, *args, env=env)
                    assert r.returncode == 0, (args, r.stderr[-500:])
                reader = open_readonly(home / "memd" / "search.sqlite")  # an agent holding the search db open
                try:
                    reader.execute("SELECT count(*) FROM memories").fetchone()
                    names = {p.name for p in walk(home)}
                    assert {"state.sqlite-wal", "state.sqlite-shm", "search.sqlite-wal", "search.sqlite-shm"} <= names, names
                    running, n_running = _modes(home, ours)
                finally:
                    reader.close()
                assert d.stop() == 0
        stopped, n_stopped = _modes(home, ours)
    finally:
        os.umask(old)
    created = {p.name for p in walk(home) if p not in ours}
    for expected in ("memd", "memory", "MEMORY.md", "memory.md", "summary.md", "session-memory", "state.sqlite",
                     "search.sqlite", "memd.jsonl", "locks", "global.lock"):  # fmt: skip
        assert expected in created, expected
    assert running == {} and stopped == {}, (running, stopped)
    fault_report["permissions: paths memd created, checked private (daemon running + stopped)"] += n_running + n_stopped
    fault_notes.append(f"permissions: {n_running} paths checked while the daemon ran (with SQLite -wal/-shm), "
                       f"{n_stopped} after it stopped; all 0700/0600 under umask 022")  # fmt: skip
