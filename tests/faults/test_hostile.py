"""Hostile model output and a hostile file system.

* A model answer naming paths (traversal, absolute, NUL, the index itself) while
  symlinks pointing outside the tree are planted in the memory directories (as
  memory files, as MEMORY.md, as the drawer render, as summary.md, and as the
  memory and session-memory directories themselves): nothing outside the home
  changes, each refusal is one line in the log, the sound operations still apply.
* Symlinks planted in the lock directory (the directory itself, a scope's lock
  file, the daemon lock): memd refuses with a clear error and the victim is untouched.
* A read-only memory directory (run as an unprivileged user: root ignores modes)
  and a full disk (a small tmpfs): the job fails with the reason in its outcome
  and log, nothing that was there is lost, and a later run completes the work.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import jobs.extract as extract
import jobs.index as index_job
import jobs.summary as summary
from memd.job.runner import run_job
from memd.memory.scan import scan_dir
from memd.tree import Place
from tests.conftest import memd_cmd
from tests.fakeapi import FakeAnthropic, op, ops_reply, text
from tests.faults.kit import FakeModel, RecordingLog, build_corpus, one_line, snapshot, turn_group, walk, write_settings
from tests.jobkit import context, ingest, make_settings, write_session
from tests.procs import log_records, memd_env, run_memd

KEY = "-work-app"
DURABLE = [("user", "Please always remember: we deploy the billing service only on Tuesdays, because of on-call."),
           ("assistant", "Understood, Tuesdays only.")]  # fmt: skip
MEMORY = "---\nname: {name}\ndescription: {desc}\nmetadata:\n  type: project\n---\n\n{body}\n"
SUMMARY = "# T\n\n## Current state and next steps\nworking\n\n## Worklog\n- a step\n"


@contextmanager
def world(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(home, outside): a home beside a directory of victims memd must never touch."""
    home = tmp_path / "home"
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("victim.md", "index-victim.md", "drawer-victim.md", "summary-victim.md", "global-victim.md"):
        (outside / name).write_text(MEMORY.format(name=name[:-3], desc="not memd's", body="keep me exactly"))
    (outside / "memdir").mkdir()
    (outside / "smdir").mkdir()
    write_session(home / "projects" / KEY / "s1.jsonl", DURABLE)
    yield home, outside


def _symlinks(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): os.readlink(p) for p in walk(root) if p.is_symlink()}


# --------------------------------------------------------------------------- model output + planted symlinks


def test_hostile_answer_with_symlinks_planted_in_memory_dirs_writes_nothing_outside(
    tmp_path: Path, fault_report: Counter[str]
) -> None:
    with world(tmp_path) as (home, outside):
        mdir = home / "projects" / KEY / "memory"
        mdir.mkdir(parents=True)
        (home / "memory").mkdir()
        (mdir / "existing.md").write_text(MEMORY.format(name="existing", desc="was here", body="before"))
        os.symlink(outside / "victim.md", mdir / "evil.md")
        os.symlink(outside / "index-victim.md", mdir / "MEMORY.md")
        os.symlink(outside / "global-victim.md", home / "memory" / "linked.md")
        os.symlink(outside / "drawer-victim.md", home / "memory.md")
        (home / "projects" / KEY / "s1" / "session-memory").mkdir(parents=True)
        os.symlink(outside / "summary-victim.md", home / "projects" / KEY / "s1" / "session-memory" / "summary.md")
        links = _symlinks(home)
        before = snapshot(outside)
        ingest(home)
        hostile = [op(name="evil", op="update", description="rewritten", body="pwned"),
                   op(name="linked", scope="global", type="user", description="through a link", body="pwned"),
                   op(name="../../outside/victim"), op(name="/etc/passwd"), op(name="~/.bashrc"),
                   op(name="..\\..\\x"), op(name="nul\x00byte"), op(name="huge", body="x" * 100_000),
                   op(name="kept-fact", description="the sound one", body="Tuesdays only.")]  # fmt: skip
        with FakeAnthropic([text("yes"), ops_reply(*hostile), text(SUMMARY)]) as api:
            ctx = context(home, make_settings(), fake_url=api.base_url)
            ctx.log = log = RecordingLog()
            r = run_job(ctx, extract, Place("session", KEY, "s1"))
            s = run_job(ctx, summary, Place("session", KEY, "s1"), force=True)
            ctx.conn.close()
        assert snapshot(outside) == before
        assert _symlinks(home) == links  # every planted link is still a link to where it was
        assert r.outcome == "ok", r
        assert sorted(m.name for m in scan_dir(mdir, "project", KEY).memories) == ["existing", "kept-fact"]
        assert (mdir / "existing.md").read_text() == MEMORY.format(name="existing", desc="was here", body="before")
        refusals = [x for x in log.records if x["event"] in ("operation.rejected", "operation.refused")]
        assert len(refusals) == len(hostile) - 1 and all(one_line(x["reason"]) for x in refusals), refusals
        assert s.outcome == "failed" and "symlink" in s.reason and one_line(s.reason), s
        fault_report["hostile: model operations refused (one line each)"] += len(refusals)
        fault_report["hostile: planted symlinks left untouched"] += len(links)


def test_a_memory_named_like_the_index_never_gets_the_index_file_name(tmp_path: Path) -> None:
    """On a case-insensitive disk (macOS) `memory.md` *is* MEMORY.md: a memory must never get that name."""
    with world(tmp_path) as (home, _outside):
        ingest(home)
        answer = ops_reply(op(name="MEMORY", description="named like the index", body="body"),
                           op(name="Memory", scope="global", type="user", description="also", body="body"))  # fmt: skip
        with FakeAnthropic([text("yes"), answer]) as api:
            ctx = context(home, make_settings(), fake_url=api.base_url)
            r = run_job(ctx, extract, Place("session", KEY, "s1"))
            ctx.conn.close()
        assert r.outcome == "ok", r
        for d in (home / "projects" / KEY / "memory", home / "memory"):
            names = [p.name for p in d.iterdir()]
            assert [n for n in names if n.casefold() == "memory.md"] == ["MEMORY.md"], names
            assert len(scan_dir(d).memories) == 1


def test_symlinked_memory_and_session_memory_directories_are_not_written_through(tmp_path: Path) -> None:
    with world(tmp_path) as (home, outside):
        os.symlink(outside / "memdir", home / "projects" / KEY / "memory")
        (home / "projects" / KEY / "s1").mkdir()
        os.symlink(outside / "smdir", home / "projects" / KEY / "s1" / "session-memory")
        before = snapshot(outside)
        ingest(home)
        answer = ops_reply(op(name="via-link", scope="project"),
                           op(name="drawer-ok", scope="global", type="user", description="fine", body="fine"))  # fmt: skip
        with FakeAnthropic([text("yes"), answer, text(SUMMARY)]) as api:
            ctx = context(home, make_settings(), fake_url=api.base_url)
            ctx.log = log = RecordingLog()
            r = run_job(ctx, extract, Place("session", KEY, "s1"))
            s = run_job(ctx, summary, Place("session", KEY, "s1"), force=True)
            i = run_job(ctx, index_job, Place("project", KEY))
            ctx.conn.close()
        assert snapshot(outside) == before, sorted(set(snapshot(outside)) - set(before))
        assert i.outcome == "skipped" and "symlink" in i.reason, i
        assert r.outcome == "ok" and r.details["applied"]["added"] == 1 and r.details["rejected"] == 1, r
        assert [m.name for m in scan_dir(home / "memory", "global", None).memories] == ["drawer-ok"]
        refused = [x for x in log.records if x["event"] == "operation.refused"]
        assert len(refused) == 1 and "symlink" in refused[0]["reason"] and one_line(refused[0]["reason"])
        assert s.outcome == "failed" and "symlink" in s.reason and one_line(s.reason), s


# --------------------------------------------------------------------------- the lock directory


def test_symlinks_planted_in_the_lock_directory_are_refused_and_victims_untouched(
    tmp_path: Path, fault_report: Counter[str]
) -> None:
    home = tmp_path / "home"
    outside = tmp_path / "outside"
    (outside / "lockdir").mkdir(parents=True)
    victim = outside / "victim.txt"
    victim.write_text("precious\n")
    (home / "projects").mkdir(parents=True)
    assert run_memd(home, "run-now", "index", "--global").returncode == 0  # creates memd/locks
    locks = home / "memd" / "locks"

    # 1. The locks directory itself is a link.
    shutil.rmtree(locks)
    os.symlink(outside / "lockdir", locks)
    r = run_memd(home, "run-now", "index", "--global")
    assert r.returncode == 1 and "symlink" in r.stdout + r.stderr, r
    d = subprocess.run([*memd_cmd(), "--home", str(home), "run"], capture_output=True, text=True, env=memd_env(), timeout=60)
    assert d.returncode == 1 and "symlink" in d.stderr and len(d.stderr.strip().splitlines()) == 1, d.stderr
    assert list((outside / "lockdir").iterdir()) == []
    os.unlink(locks)
    locks.mkdir(mode=0o700)

    # 2. A scope's lock file is a link to a victim: not truncated, not locked through.
    os.symlink(victim, locks / "global.lock")
    r = run_memd(home, "run-now", "index", "--global")
    assert r.returncode == 1 and "symlink" in r.stdout + r.stderr, r
    failed = [x for x in log_records(home) if x.get("event") == "job.finished" and x.get("outcome") == "failed"]
    assert failed and "symlink" in failed[-1]["reason"] and one_line(failed[-1]["reason"])

    # 3. The daemon lock is a link to a victim.
    os.symlink(victim, locks / "daemon.lock")
    d = subprocess.run([*memd_cmd(), "--home", str(home), "run"], capture_output=True, text=True, env=memd_env(), timeout=60)
    assert d.returncode == 1 and "symlink" in d.stderr and len(d.stderr.strip().splitlines()) == 1, d.stderr
    assert victim.read_text() == "precious\n" and list((outside / "lockdir").iterdir()) == []
    fault_report["hostile: lock-directory symlinks refused"] += 3


# --------------------------------------------------------------------------- read-only directories


def _unprivileged() -> tuple[list[str], int, int] | None:
    """A command prefix running as `nobody` (root ignores file modes), or None."""
    if os.geteuid() != 0:
        return [], os.getuid(), os.getgid()  # already unprivileged: modes apply as they are
    try:
        pw = pwd.getpwnam("nobody")
    except KeyError:
        return None
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups"], pw.pw_uid, pw.pw_gid
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "nobody", "--"], pw.pw_uid, pw.pw_gid
    return None


def _memd_as(prefix: list[str], home: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, *memd_cmd(), "--home", str(home), *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd="/")  # fmt: skip


SECOND = "Please remember FACT-P-9001 for the future, and FACT-G-9002 too: the user wants terse answers."


def _two_phases(home: Path, seed: int) -> tuple[str, str, bytes, set[str]]:
    """A session written in full now (rel, key), the durable exchange appended later, and every name expected."""
    corpus = build_corpus(seed, projects=1, sessions=1, groups=4, split_share=0.0)
    ((rel, data),) = corpus.files().items()
    (home / rel).parent.mkdir(parents=True, exist_ok=True)
    (home / rel).write_bytes(data)
    sid = rel.split("/")[2][: -len(".jsonl")]
    second = turn_group(sid, 50, SECOND)
    names = {n for v in corpus.expected_names().values() for n in v} | {"fact-p-9001", "fact-g-9002"}
    return rel, rel.split("/")[1], second, names


def _outcomes(home: Path, job: str) -> list[dict[str, Any]]:
    return [x for x in log_records(home) if x.get("event") == "job.finished" and x.get("job") == job]


@pytest.mark.slow
def test_read_only_memory_and_summary_directories_fail_visibly_and_lose_nothing(
    tmp_path: Path, fault_report: Counter[str]
) -> None:
    who = _unprivileged()
    if who is None:
        pytest.skip("running as root with neither setpriv nor runuser nor a 'nobody' user: modes cannot be enforced")
    prefix, uid, gid = who
    base = Path(tempfile.mkdtemp(prefix="memd-ro-", dir="/tmp"))
    try:
        os.chmod(base, 0o711)  # traversable by the unprivileged user
        home = base / "home"
        write_settings(home)
        rel, key, second, expected = _two_phases(home, 11)
        with FakeModel(tmp_path / "api") as api:
            env = api.env()
            if uid:
                subprocess.run(["chown", "-R", f"{uid}:{gid}", str(home)], check=True)
            assert _memd_as(prefix, home, "run-now", "extract", env=env).returncode == 0
            assert _memd_as(prefix, home, "run-now", "summary", "--force", env=env).returncode == 0
            mdir, sdir = home / "projects" / key / "memory", next(home.glob("projects/*/*/session-memory"))
            dirs = (mdir, home / "memory", sdir)
            before = {p: p.read_bytes() for d in dirs for p in d.iterdir()}
            assert (sdir / "summary.md").exists() and any(p.name.startswith("fact-") for p in before), sorted(before)
            for d in dirs:
                os.chmod(d, 0o500)
            with open(home / rel, "ab") as fh:
                fh.write(second)
            ex = _memd_as(prefix, home, "run-now", "extract", env=env)
            sm = _memd_as(prefix, home, "run-now", "summary", "--force", env=env)
            assert ex.returncode == 1 and sm.returncode == 1, (ex.stdout, ex.stderr, sm.stdout, sm.stderr)
            for job in ("extract", "summary"):
                last = _outcomes(home, job)[-1]
                assert last["outcome"] == "failed" and "Permission denied" in last["reason"], last
                assert one_line(last["reason"])
            after = {p: p.read_bytes() for d in dirs for p in d.iterdir()}
            assert after == before  # nothing lost, nothing half-written, no temporary file left
            for d in dirs:
                os.chmod(d, 0o700)
            assert _memd_as(prefix, home, "run-now", "extract", env=env).returncode == 0
            assert _memd_as(prefix, home, "run-now", "summary", "--force", env=env).returncode == 0
        names = {m.name for d, sc, k in ((mdir, "project", key), (home / "memory", "global", None)) for m in scan_dir(d, sc, k).memories}
        assert names == expected
        assert (sdir / "summary.md").read_bytes() != before[sdir / "summary.md"]
        fault_report["hostile: read-only directory failures reported (then recovered)"] += 2
    finally:
        subprocess.run(["chmod", "-R", "u+rwX", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------- a full disk


@contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[None]:
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                       capture_output=True, text=True)  # fmt: skip
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill ({r.stderr.strip() or r.returncode}); "
                    "RLIMIT_FSIZE would also fail SQLite and the log, so it cannot target memory files alone")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(d: Path) -> Path:
    filler = d / ".filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


@pytest.mark.slow
def test_full_disk_fails_the_job_with_its_reason_and_keeps_what_was_there(
    tmp_path: Path, fault_report: Counter[str]
) -> None:
    home = tmp_path / "home"
    write_settings(home)
    rel, key, second, expected = _two_phases(home, 12)
    mdir = home / "projects" / key / "memory"
    sdir = home / "projects" / key / rel.split("/")[2][: -len(".jsonl")] / "session-memory"
    gdir = home / "memory"
    dirs = (mdir, sdir, gdir)
    with FakeModel(tmp_path / "api") as api, small_tmpfs(mdir, "64k"), small_tmpfs(sdir, "64k"), small_tmpfs(gdir, "64k"):
        env = api.env()
        assert run_memd(home, "run-now", "extract", env=env).returncode == 0
        assert run_memd(home, "run-now", "summary", "--force", env=env).returncode == 0
        before = {p: p.read_bytes() for d in dirs for p in d.iterdir()}
        assert (sdir / "summary.md").exists() and any(p.name.startswith("fact-") for p in before), sorted(before)
        fillers = [_fill(d) for d in dirs]
        with open(home / rel, "ab") as fh:
            fh.write(second)
        ex = run_memd(home, "run-now", "extract", env=env)
        sm = run_memd(home, "run-now", "summary", "--force", env=env)
        assert ex.returncode == 1 and sm.returncode == 1, (ex.stdout, ex.stderr, sm.stdout, sm.stderr)
        for job in ("extract", "summary"):
            last = _outcomes(home, job)[-1]
            assert last["outcome"] == "failed" and "No space left" in last["reason"] and one_line(last["reason"]), last
        after = {p: p.read_bytes() for d in dirs for p in d.iterdir() if p.name != ".filler"}
        assert after == before  # whole old files, no half-written new ones, no temporary files
        for f in fillers:
            f.unlink()
        assert run_memd(home, "run-now", "extract", env=env).returncode == 0
        assert run_memd(home, "run-now", "summary", "--force", env=env).returncode == 0
        names = {m.name for d, sc, k in ((mdir, "project", key), (gdir, "global", None)) for m in scan_dir(d, sc, k).memories}
        assert names == expected
        assert (sdir / "summary.md").read_bytes() != before[sdir / "summary.md"]
    fault_report["hostile: full-disk failures reported (then recovered)"] += 2
