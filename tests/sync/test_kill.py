"""`kill -9` during `memd sync` leaves both repositories valid, and the next sync completes."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from memd.memory.file import parse_memory
from tests.conftest import memd_cmd
from tests.procs import kill_rounds, memd_env, run_memd
from tests.sync.helpers import GIT_ENV, bare_remote, git, hand_write, make_home, memory_files, text

ROUNDS = kill_rounds(8)


def _fsck(git_dir: Path) -> None:
    p = subprocess.run(["git", "--git-dir", str(git_dir), "fsck", "--strict", "--no-dangling"], capture_output=True,
                       text=True, check=False)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr


def _finished(log_file: Path) -> int:
    """How many syncs have logged their end so far."""
    if not log_file.exists():
        return 0
    return sum('"sync.finished"' in line for line in log_file.read_text().splitlines())


def _wait_for_git_child(p: subprocess.Popen[bytes], timeout: float = 120) -> None:
    proc = psutil.Process(p.pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        try:
            if any(c.name() == "git" for c in proc.children(recursive=True)):
                return
        except psutil.Error:
            pass
        time.sleep(0.005)


def _children(p: subprocess.Popen[bytes]) -> list[psutil.Process]:
    try:
        return psutil.Process(p.pid).children(recursive=True)
    except psutil.Error:
        return []


@pytest.mark.slow
@pytest.mark.timeout(900)  # a kill loop: its length grows with the machine's load (290 s of a 300 s limit seen at load 13)
def test_kill_9_during_sync_leaves_both_repositories_valid(tmp_path: Path) -> None:
    remote = bare_remote(tmp_path)
    a, b = make_home(tmp_path, "a", remote), make_home(tmp_path, "b", remote)
    env_a, env_b = memd_env(**GIT_ENV, MEMD_HOST="laptop"), memd_env(**GIT_ENV, MEMD_HOST="desk")
    for i in range(300):  # enough that a first sync takes a while
        hand_write(a, None, f"m{i:03d}.md", text(f"m{i:03d}", f"memory {i} " + "x" * 400))
    rng = random.Random(15)
    log_file = a.memd_dir / "logs" / "memd.jsonl"
    mid_sync = 0  # kills that landed before the sync logged its end
    for n in range(ROUNDS):
        hand_write(b, None, f"b{n}.md", text(f"b{n}", f"from desk {n}"))
        hand_write(b, None, "shared.md", text("shared", f"desk's version {n}"))
        assert run_memd(b.root, "sync", env=env_b).returncode == 0
        hand_write(a, None, "shared.md", text("shared", f"laptop's version {n}"))
        hand_write(a, None, f"a{n}.md", text(f"a{n}", f"from laptop {n}"))
        before = _finished(log_file)
        p = subprocess.Popen([*memd_cmd(), "--home", str(a.root), "sync"], env=env_a, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
        _wait_for_git_child(p)  # the sync is under way: it runs git
        time.sleep(rng.uniform(0.0, 0.2))  # soon after git starts: a sync of a few files is quick
        kids = _children(p)  # taken just before the kill: the git processes the kill orphans
        killed = p.poll() is None
        if killed:
            p.send_signal(signal.SIGKILL)
        p.wait(60)
        # a kill can land after the sync logged its end, while the process exits: that one is not mid-sync
        mid_sync += killed and _finished(log_file) == before
        # A git child of the killed memd may still be finishing: wait for it to end (a fixed 0.3 s was
        # too short on a loaded machine, and fsck then read a repository git was still writing).
        _gone, alive = psutil.wait_procs(kids, timeout=120)
        assert not alive, alive
        _fsck(remote)
        if (a.memd_dir / "git" / "HEAD").exists():
            _fsck(a.memd_dir / "git")
        for name, data in memory_files(a, None).items():  # never half a file
            parse_memory(name, data)
    assert mid_sync >= 2  # the test proves nothing unless kills land mid-sync (how many depends on the machine)
    r = run_memd(a.root, "sync", env=env_a)
    assert r.returncode == 0, r.stderr
    assert run_memd(b.root, "sync", env=env_b).returncode == 0
    assert memory_files(a, None) == memory_files(b, None)
    names = set(memory_files(a, None))
    assert {f"a{n}.md" for n in range(ROUNDS)} | {f"b{n}.md" for n in range(ROUNDS)} <= names
    assert {f"m{i:03d}.md" for i in range(300)} <= names
    # every version of shared.md that was ever committed on either side is still somewhere in history
    log = git("--git-dir", str(remote), "log", "-p", "--all", "--", "*shared*")
    assert f"laptop's version {ROUNDS - 1}" in log and f"desk's version {ROUNDS - 1}" in log
    for h in (a, b):
        _fsck(h.memd_dir / "git")
    assert git("--git-dir", str(a.memd_dir / "git"), "rev-parse", "main") == git("--git-dir", str(remote), "rev-parse", "main")
