"""Locks: canonical order, bounded waits between real processes, the daemon lock, planted symlinks."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock

import memd
from memd import locks
from memd.daemon import lock as daemonlock
from memd.daemon.lock import AlreadyRunning, DaemonLock, daemon_alive, read_pid_file
from memd.locks import (
    GLOBAL,
    LockBusy,
    Place,
    UnsafeLockPath,
    acquire,
    lock_path,
)
from memd.tree import Home

REPO = Path(memd.__file__).resolve().parent.parent
PROJECT = Place.project("-tmp-proj")
SESSION = Place.session("-tmp-proj", "0b1c2d3e-sid")


@pytest.fixture
def home(tmp_path: Path) -> Home:
    return Home(tmp_path / "deepcode")


def _lock_is_free(home: Home, scope: Place) -> bool:
    """Probe with a fresh acquisition: flock contends between descriptors even in one process."""
    try:
        with acquire(home, [scope], timeout=0):
            return True
    except LockBusy:
        return False


# --- helpers that run a real second process ----------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from memd.locks import acquire
    from memd.tree import Place
    from memd.daemon.lock import DaemonLock
    from memd.tree import Home
    home = Home(Path(sys.argv[1]))
    what, seconds = sys.argv[2], float(sys.argv[3])
    if what == "daemon":
        with DaemonLock(home):
            print("held", flush=True)
            time.sleep(seconds)
    else:
        with acquire(home, [Place.parse(s) for s in what.split(",")], timeout=0):
            print("held", flush=True)
            time.sleep(seconds)
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


class Holder:
    """A separate process holding locks for a while; waits until it really holds them."""

    def __init__(self, home: Home, what: str, seconds: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(home.root), what, str(seconds)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if line.strip() != "held":
            self.proc.kill()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"holder did not start: {line!r} {err}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def wait(self) -> int:
        return self.proc.wait(timeout=30)


@pytest.fixture
def holders():
    started: list[Holder] = []
    yield started
    for h in started:
        h.kill()


# --- scopes and names ----------------------------------------------------------------------


def test_scope_round_trips_and_validates() -> None:
    for s in (GLOBAL, PROJECT, SESSION):
        assert Place.parse(str(s)) == s
    assert str(SESSION) == "session:-tmp-proj:0b1c2d3e-sid"
    for bad in ("", "global:x", "project:", "session:k", "bogus:k"):
        with pytest.raises(ValueError):
            Place.parse(bad)
    with pytest.raises(ValueError):
        Place("project")
    with pytest.raises(ValueError):
        Place("global", "k")


def test_lock_file_names_are_safe_and_distinct(home: Home) -> None:
    with pytest.raises(ValueError):  # a place is one path component: a slash never reaches a lock name
        Place.session("k", "../../../etc/passwd")
    evil = Place.session("k", "..\\..%2f..etc passwd" + "x" * 400)
    path = lock_path(home, evil)
    assert path.parent == home.locks_dir
    assert "/" not in path.name and len(path.name) < 200
    # Sanitising is lossy; the hash keeps scopes that sanitise alike apart.
    assert lock_path(home, Place.session("k", "a b")) != lock_path(home, Place.session("k", "a_b"))
    assert lock_path(home, Place.project("k")) != lock_path(home, Place.session("k", "k"))
    with acquire(home, [evil], timeout=0):
        assert path.exists()
    assert sorted(os.listdir(home.root)) == ["memd"]  # nothing escaped the locks dir


# --- order -------------------------------------------------------------------------------


def test_scopes_are_taken_global_project_session_whatever_the_order_given(home: Home) -> None:
    with acquire(home, [SESSION, GLOBAL, PROJECT, SESSION], timeout=1) as held:
        assert held.scopes == [GLOBAL, PROJECT, SESSION]
        for scope in (GLOBAL, PROJECT, SESSION):
            assert not _lock_is_free(home, scope)
    for scope in (GLOBAL, PROJECT, SESSION):
        assert _lock_is_free(home, scope)


def test_global_is_tried_first_so_a_busy_global_leaves_narrower_scopes_untouched(home: Home, holders) -> None:
    holders.append(Holder(home, "global", 30))
    waited: list[Place] = []
    with pytest.raises(LockBusy) as err:
        with acquire(home, [SESSION, PROJECT, GLOBAL], timeout=0.3, on_wait=waited.append):
            pytest.fail("acquired a lock another process holds")
    assert err.value.scope == GLOBAL
    assert waited == [GLOBAL]
    # Had session or project been taken before global, their lock files would exist now.
    assert not lock_path(home, PROJECT).exists()
    assert not lock_path(home, SESSION).exists()


def test_failure_on_a_later_scope_releases_the_earlier_ones(home: Home, holders) -> None:
    holders.append(Holder(home, str(SESSION), 30))
    with pytest.raises(LockBusy) as err:
        with acquire(home, [SESSION, GLOBAL, PROJECT], timeout=0.3):
            pass
    assert err.value.scope == SESSION
    # global and project were taken (their files exist) and then released.
    assert lock_path(home, GLOBAL).exists() and lock_path(home, PROJECT).exists()
    assert _lock_is_free(home, GLOBAL) and _lock_is_free(home, PROJECT)


def test_an_exception_in_the_body_releases_everything(home: Home) -> None:
    with pytest.raises(RuntimeError):
        with acquire(home, [GLOBAL, PROJECT], timeout=1):
            raise RuntimeError("job failed")
    assert _lock_is_free(home, GLOBAL) and _lock_is_free(home, PROJECT)


# --- contention between real processes ---------------------------------------------------


def test_second_process_waits_then_gets_the_lock(home: Home, holders) -> None:
    holder = Holder(home, f"{GLOBAL},{PROJECT}", 3)  # long enough to be waited for however late this process gets to ask
    holders.append(holder)
    waited: list[Place] = []
    start = time.monotonic()
    with acquire(home, [PROJECT], timeout=20, on_wait=waited.append) as held:
        elapsed = time.monotonic() - start
        assert holder.proc.poll() is not None or holder.wait() == 0  # holder finished first
    assert waited == [PROJECT]  # told once, before waiting
    assert held.waited_s[PROJECT] > 0.3
    assert 0.3 < elapsed < 60


def test_lock_busy_when_the_holder_outlasts_the_timeout(home: Home, holders) -> None:
    holders.append(Holder(home, str(PROJECT), 30))
    start = time.monotonic()
    with pytest.raises(LockBusy) as err:
        with acquire(home, [PROJECT], timeout=0.5):
            pass
    elapsed = time.monotonic() - start
    assert 0.45 < elapsed < 30  # the upper bound only rules out a hang: a loaded machine is slow
    assert err.value.exit_code == 75
    assert str(PROJECT) in str(err.value) and "waited" in str(err.value)


def test_zero_timeout_fails_at_once_without_announcing_a_wait(home: Home, holders) -> None:
    holders.append(Holder(home, str(GLOBAL), 30))
    calls: list[Place] = []
    with pytest.raises(LockBusy):
        with acquire(home, [GLOBAL], timeout=0, on_wait=calls.append):
            pass
    assert calls == []


def test_no_wait_and_no_callback_when_free(home: Home) -> None:
    calls: list[Place] = []
    with acquire(home, [GLOBAL], timeout=5, on_wait=calls.append) as held:
        assert held.total_wait_s == 0
    assert calls == []


def test_a_killed_holder_leaves_no_stale_lock(home: Home, holders) -> None:
    holder = Holder(home, str(GLOBAL), 30)
    holders.append(holder)
    assert not _lock_is_free(home, GLOBAL)
    holder.kill()  # SIGKILL: no cleanup code runs; the kernel drops the flock
    assert _lock_is_free(home, GLOBAL)


def test_two_threads_of_one_process_exclude_each_other(home: Home) -> None:
    inside = 0
    overlap = False
    guard = threading.Lock()

    def worker() -> None:
        nonlocal inside, overlap
        with acquire(home, [GLOBAL], timeout=10):
            with guard:
                inside += 1
                overlap = overlap or inside > 1
            time.sleep(0.05)
            with guard:
                inside -= 1

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlap


# --- the daemon lock ---------------------------------------------------------------------

SECOND_DAEMON = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from memd.daemon.lock import DaemonLock, AlreadyRunning
    from memd.tree import Home
    try:
        DaemonLock(Home(Path(sys.argv[1]))).acquire()
    except AlreadyRunning as e:
        print(e, file=sys.stderr)
        sys.exit(e.exit_code)
    print("acquired")
    """
)


def test_daemon_lock_refuses_a_second_instance_in_another_process(home: Home) -> None:
    with DaemonLock(home):
        info = read_pid_file(home)
        assert info is not None and info["pid"] == os.getpid() and info["home"] == str(home.root)
        proc = subprocess.run([sys.executable, "-c", SECOND_DAEMON, str(home.root)],
                              capture_output=True, text=True, env=_env(), timeout=60)
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert f"pid {os.getpid()}" in proc.stderr
        assert str(home.root) in proc.stderr
    # Released and cleaned up: a second process may now start.
    assert read_pid_file(home) is None
    proc = subprocess.run([sys.executable, "-c", SECOND_DAEMON, str(home.root)],
                          capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 0 and "acquired" in proc.stdout


def test_daemon_alive_checks_the_lock_not_the_pid(home: Home, holders) -> None:
    assert daemon_alive(home) is None
    holder = Holder(home, "daemon", 30)
    holders.append(holder)
    info = daemon_alive(home)
    assert info is not None and info["pid"] == holder.pid
    with pytest.raises(AlreadyRunning) as err:
        DaemonLock(home).acquire()
    assert err.value.exit_code == 3 and f"pid {holder.pid}" in str(err.value)
    holder.kill()  # SIGKILL: the pid file stays behind, stale
    assert read_pid_file(home) is not None
    assert daemon_alive(home) is None
    with DaemonLock(home):
        assert daemon_alive(home)["pid"] == os.getpid()


def test_daemon_alive_does_not_create_files_in_a_fresh_home(home: Home) -> None:
    assert daemon_alive(home) is None
    assert not home.root.exists()


# --- planted symlinks and permissions ------------------------------------------------------


def _plant(home: Home, scope: Place, target: Path) -> Path:
    locks.ensure_locks_dir(home)
    link = lock_path(home, scope)
    link.symlink_to(target)
    return link


def test_symlink_at_a_lock_path_does_not_touch_the_victim(home: Home, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    before = victim.stat()
    _plant(home, GLOBAL, victim)
    with pytest.raises(UnsafeLockPath) as err:
        with acquire(home, [GLOBAL, PROJECT], timeout=0.2):
            pytest.fail("locked through a symlink")
    assert "symlink" in str(err.value) and str(lock_path(home, GLOBAL)) in str(err.value)
    after = victim.stat()
    assert victim.read_text() == "precious\n"
    assert (after.st_size, after.st_mtime_ns, stat.S_IMODE(after.st_mode)) == (
        before.st_size, before.st_mtime_ns, 0o644)
    assert not lock_path(home, PROJECT).exists()  # nothing after the refusal was attempted


def test_dangling_symlink_does_not_create_its_target(home: Home, tmp_path: Path) -> None:
    victim = tmp_path / "would-be-created"
    _plant(home, PROJECT, victim)
    with pytest.raises(UnsafeLockPath):
        with acquire(home, [PROJECT], timeout=0.2):
            pass
    assert not victim.exists()


def test_symlink_at_the_daemon_lock_is_refused(home: Home, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("x")
    locks.ensure_locks_dir(home)
    daemonlock.daemon_lock_path(home).symlink_to(victim)
    with pytest.raises(UnsafeLockPath):
        DaemonLock(home).acquire()
    assert victim.read_text() == "x"


def test_filelock_itself_refuses_to_follow_a_symlink(tmp_path: Path) -> None:
    """Our early check has a race window; this is the guarantee behind it (filelock >= 3.20.3)."""

    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "x.lock"
    link.symlink_to(victim)
    with pytest.raises(OSError) as err:
        FileLock(link, mode=0o600, thread_local=False).acquire(timeout=0.2)
    assert err.value.errno == errno.ELOOP
    assert victim.read_text() == "precious"


def test_symlinked_locks_dir_is_refused(home: Home, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    home.memd_dir.mkdir(parents=True)
    home.locks_dir.symlink_to(elsewhere)
    with pytest.raises(UnsafeLockPath):
        with acquire(home, [GLOBAL], timeout=0.2):
            pass
    assert list(elsewhere.iterdir()) == []


def test_lock_dir_is_0700_and_lock_files_0600_whatever_the_umask(home: Home) -> None:
    old = os.umask(0)
    try:
        locks.ensure_locks_dir(home)
        stale = lock_path(home, PROJECT)
        stale.touch(mode=0o666)  # e.g. left by hand, or by an older memd
        with acquire(home, [GLOBAL, PROJECT, SESSION], timeout=1):
            pass
        with DaemonLock(home):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(home.locks_dir.stat().st_mode) == 0o700
    files = list(home.locks_dir.iterdir())
    assert len(files) == 4
    for f in files:
        assert stat.S_IMODE(f.lstat().st_mode) == 0o600, f
