"""The daemon as a real process: reacting to changes, single instance, signals, run-now and locks."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from memd.locks import acquire
from memd.tree import Home, Place
from tests.conftest import memd_cmd
from tests.fakeapi import op, ops_text
from tests.jobkit import write_session
from tests.procs import DaemonProc, FakeApiProc, log_records, memd_env, run_memd, wait_for, wait_log

MEMORY = "---\nname: {name}\ndescription: {desc}\nmetadata:\n  type: user\n---\n{body}\n"


def test_missing_home_is_created_private(tmp_path: Path) -> None:
    home = tmp_path / "new-home"
    with DaemonProc(home) as d:
        assert (home.stat().st_mode & 0o777) == 0o700
        assert ((home / "memd").stat().st_mode & 0o777) == 0o700
        d.stop()


def test_hand_edit_reindexed_within_a_second(tmp_path: Path) -> None:
    home = tmp_path / "h"
    with DaemonProc(home) as d:
        wait_log(home, event="job.finished", job="index", target="global")
        (home / "memory" / "tabs.md").write_text(MEMORY.format(name="tabs", desc="indents with tabs", body="Tabs."))
        # Reindexed by the file event, not the 300 s reconcile; the latency itself is the bench's
        # (bench/bench_daemon.py): a wall-time bound here failed on a loaded machine.
        # MEMORY.md and the drawer's render (memory.md) are two writes of one job: wait for both, as a
        # reader between them sees the first alone (CI caught exactly that).
        wait_for(lambda: "tabs.md" in (home / "memory" / "MEMORY.md").read_text())
        wait_for(lambda: "indents with tabs" in (home / "memory.md").read_text())
        assert d.stop() == 0


def test_transcript_append_is_ingested(tmp_path: Path) -> None:
    home = tmp_path / "h"
    p = home / "projects" / "k" / "s1.jsonl"
    p.parent.mkdir(parents=True)
    p.write_text("")
    with DaemonProc(home) as d:
        rec = {"type": "user", "uuid": "u", "message": {"role": "user", "content": "hello"}}
        with open(p, "a") as fh:
            fh.write(json.dumps(rec) + "\n")

        def ingested() -> bool:
            r = run_memd(home, "sessions", "--json", "--no-scan")
            return r.returncode == 0 and any(x["human_turns"] == 1 for x in json.loads(r.stdout))

        wait_for(ingested)
        assert d.stop() == 0


def test_second_instance_refused_and_sigterm_exits_clean(tmp_path: Path) -> None:
    home = tmp_path / "h"
    with DaemonProc(home) as d:
        r = run_memd(home, "run", timeout=30)
        assert r.returncode == 3
        assert "already running" in r.stderr and str(d.proc.pid) in r.stderr
        assert d.stop(signal.SIGTERM) == 0
    assert not (home / "memd" / "daemon.json").exists()
    st = run_memd(home, "status", "--json")
    assert st.returncode == 0 and json.loads(st.stdout)["daemon"]["running"] is False
    assert wait_log(home, event="daemon.stopped")


def test_status_while_running_and_when_down(tmp_path: Path) -> None:
    home = tmp_path / "h"
    with DaemonProc(home) as d:
        wait_log(home, event="daemon.started")  # its state is set up (under load that takes a while)
        data = json.loads(run_memd(home, "status", "--json").stdout)
        assert data["daemon"]["running"] is True and data["daemon"]["pid"] == d.proc.pid
        assert "index" in data["jobs"]
        d.stop()
    data = json.loads(run_memd(home, "status", "--json").stdout)
    assert data["daemon"]["running"] is False


def test_sighup_reloads_settings(tmp_path: Path) -> None:
    home = tmp_path / "h"
    with DaemonProc(home) as d:
        (home / "settings.json").write_text('{"memory": {"extractEveryTurns": "nope"}}')
        d.proc.send_signal(signal.SIGHUP)
        rec = wait_log(home, event="settings.fallback")
        assert "memory.extractEveryTurns" in rec["problem"]
        wait_log(home, event="settings.reloaded")
        assert d.stop() == 0


def test_run_now_waits_for_a_held_lock_then_runs(tmp_path: Path) -> None:
    home = tmp_path / "h"
    (home / "memory").mkdir(parents=True)
    (home / "memory" / "a.md").write_text(MEMORY.format(name="a", desc="first", body="A."))
    with acquire(Home(home), [Place.global_()], timeout=5):
        proc = subprocess.Popen([*memd_cmd(), "--home", str(home), "run-now", "index", "--global"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=memd_env())  # fmt: skip
        line = proc.stderr.readline()
        assert "waiting for the lock on global" in line
        time.sleep(0.3)
        assert proc.poll() is None  # still waiting
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "index global: ok" in out
    assert "a.md" in (home / "memory" / "MEMORY.md").read_text()


def test_run_now_no_wait_exits_75(tmp_path: Path) -> None:
    home = tmp_path / "h"
    (home / "memory").mkdir(parents=True)
    with acquire(Home(home), [Place.global_()], timeout=5):
        r = run_memd(home, "run-now", "index", "--global", "--no-wait")
    assert r.returncode == 75 and "deferred" in r.stdout and "lock busy" in r.stdout


def test_unknown_job_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "h").mkdir()
    r = run_memd(tmp_path / "h", "run-now", "nonsense")
    assert r.returncode == 2 and "no job 'nonsense'" in r.stderr


def test_jobs_lists_triggers(tmp_path: Path) -> None:
    r = run_memd(tmp_path / "h", "jobs", "--json")
    rows = json.loads(r.stdout)
    assert {x["job"] for x in rows} >= {"index"}
    assert all(x["trigger"] for x in rows)


def test_logs_command_filters(tmp_path: Path) -> None:
    home = tmp_path / "h"
    (home / "memory").mkdir(parents=True)
    assert run_memd(home, "run-now", "index").returncode == 0
    r = run_memd(home, "logs", "--job", "index", "--json")
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    assert recs and all(x["job"] == "index" for x in recs)
    fin = [x for x in recs if x["event"] == "job.finished"]
    assert fin and {"job", "target", "run_id", "outcome", "duration_ms"} <= set(fin[0])
    assert run_memd(home, "logs", "--since", "yesterday").returncode == 2


def test_corrupt_state_gives_a_clear_error(tmp_path: Path) -> None:
    home = tmp_path / "h"
    (home / "memd").mkdir(parents=True)
    (home / "memd" / "state.sqlite").write_bytes(b"this is not a database" * 100)
    r = run_memd(home, "sessions", "--json")
    assert r.returncode == 1
    assert "state.sqlite" in r.stderr and "Traceback" not in r.stderr
    os.environ.get("HOME")


def test_a_job_that_raises_is_logged_once_retried_and_the_daemon_goes_on(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({
        "memory": {"sessionMemory": {"minInitTokens": 50, "minUpdateTokens": 50, "toolCallsBetween": 0}},
        "memd": {"provider": "offline", "retrySeconds": 1}}))  # fmt: skip
    write_session(home / "projects" / "k" / "s1.jsonl", [("user", "please look at the parser " * 20), ("assistant", "ok " * 50)])
    blocker = home / "projects" / "k" / "s1" / "session-memory" / "summary.md"
    blocker.mkdir(parents=True)  # the summary cannot be written: the job raises
    with DaemonProc(home) as d:
        rec = wait_log(home, event="job.finished", job="summary", outcome="failed")
        # an expected failure (issue 16): one line naming the file, no traceback
        assert "traceback" not in rec and "summary.md" in rec["reason"] and "\n" not in rec["reason"], rec
        wait_log(home, event="job.retry_scheduled", job="summary")
        blocker.rmdir()
        wait_for(lambda: (home / "projects" / "k" / "s1" / "session-memory" / "summary.md").is_file())
        wait_log(home, event="job.finished", job="summary", outcome="ok")  # the file lands before the log line
        assert d.proc.poll() is None  # never stopped the daemon
        finished = [r for r in log_records(home) if r.get("event") == "job.finished" and r.get("job") == "summary"]
        assert [r["outcome"] for r in finished][-1] == "ok"
        assert all("traceback" not in r for r in finished if r["outcome"] == "failed")  # each failure: one line
        assert d.stop() == 0


@pytest.mark.slow
def test_run_now_does_not_wait_for_a_model_call_in_flight(tmp_path: Path) -> None:
    """The daemon runs a slow extraction (the model answers only once run-now is done): no memory
    lock is held while it waits, so run-now of the same scope runs at once; the extraction's write
    lands after. (A fixed 3 s answer raced run-now's own start-up on a loaded machine: the write
    landed first and run-now then waited for the lock behind it.)"""

    home = tmp_path / "h"
    release = tmp_path / "release-the-extraction"
    write_session(home / "projects" / "k" / "s1.jsonl", [("user", "Remember that releases are cut on Tuesdays."), ("assistant", "ok")])
    (home / "settings.json").write_text(json.dumps({"memd": {"timeoutSeconds": 600}}))  # the held call outlasts no deadline
    script = {"rules": [{"if_system_contains": "memory gate", "reply": {"kind": "text", "text": "yes"}},
                        {"if_system_contains": "You maintain", "reply": {"kind": "text", "until": str(release),
                         "text": ops_text(op(scope="global", name="tuesday-releases", type="user"))}}]}  # fmt: skip
    with FakeApiProc(tmp_path, script) as api:
        env = memd_env(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="k")
        with DaemonProc(home, env=env) as d:
            wait_for(lambda: len(api.requests()) >= 2)  # the extraction call is in flight
            wait_log(home, event="job.finished", job="index", target="global")  # the daemon's own start-up index is done
            proc = subprocess.run([*memd_cmd(), "--home", str(home), "run-now", "index", "--global"],
                                  capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            assert "waiting for the lock" not in proc.stderr and "index global: ok" in proc.stdout
            assert "tuesday-releases" not in _read(home / "memory" / "MEMORY.md")  # the extraction has not written
            release.touch()
            wait_for(lambda: "tuesday-releases" in _read(home / "memory" / "MEMORY.md"))
            assert d.stop() == 0


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_run_now_waits_visibly_for_a_held_lock(tmp_path: Path) -> None:
    """A lock held by another process (here: this test) makes run-now wait, say so, then run."""

    home = tmp_path / "h"
    (home / "memory").mkdir(parents=True)
    assert run_memd(home, "scan").returncode == 0
    release = threading.Event()
    held = threading.Event()

    def hold() -> None:
        with acquire(Home(home), [Place.global_()], timeout=5):
            held.set()
            release.wait(120)

    t = threading.Thread(target=hold)
    t.start()
    assert held.wait(120)
    proc = subprocess.Popen([*memd_cmd(), "--home", str(home), "run-now", "index", "--global"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=memd_env())  # fmt: skip
    # Released once run-now says it waits, not after a fixed 1.5 s: a process that took longer than
    # that to start on a loaded machine found the lock free and never said it waited.
    first = proc.stderr.readline() if proc.stderr else ""
    release.set()
    out, err = proc.communicate(timeout=120)
    t.join(120)
    assert proc.returncode == 0, first + err
    assert "waiting for the lock on global" in first and "index global: ok" in out


@pytest.mark.slow
def test_locked_state_gives_a_clear_error(tmp_path: Path) -> None:
    home = tmp_path / "h"
    (home / "projects" / "k").mkdir(parents=True)
    (home / "projects" / "k" / "s.jsonl").write_text('{"type":"user","uuid":"u","message":{"content":"hi"}}\n')
    assert run_memd(home, "scan").returncode == 0
    (home / "projects" / "k" / "s.jsonl").write_text('{"type":"user","uuid":"u","message":{"content":"hi"}}\n' * 2)
    holder = sqlite3.connect(home / "memd" / "state.sqlite", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        r = run_memd(home, "scan")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert r.returncode == 75 and "locked by another process" in r.stderr and "Traceback" not in r.stderr


def test_debug_logging_leaves_out_the_watchers_own_events(tmp_path: Path) -> None:
    """At `logLevel: debug` watchdog's per-event lines were 94 % of the log; memd's own lines stay."""
    home = tmp_path / "h"
    proj = home / "projects" / "k"
    proj.mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps({"memd": {"logLevel": "debug", "provider": "offline"}}))
    t = proj / "s1.jsonl"
    t.write_text("")
    with DaemonProc(home, env=memd_env()) as d:
        for i in range(20):
            with open(t, "a") as fh:
                fh.write(json.dumps({"type": "user", "uuid": f"u{i}", "message": {"role": "user", "content": f"hi {i}"}}) + "\n")
            time.sleep(0.02)
        wait_for(lambda: "ledger.ingested" in (home / "memd" / "logs" / "memd.jsonl").read_text())
        assert d.stop() == 0
    lines = [json.loads(x) for x in (home / "memd" / "logs" / "memd.jsonl").read_text().splitlines() if x.strip()]
    assert any(r.get("event") == "ledger.ingested" for r in lines)
    # watchdog's per-event lines are debug; a shutdown race it reports at error level is not an event line
    watcher = [r for r in lines if str(r.get("logger", "")).startswith("watchdog") and r.get("level") in ("debug", "info")]
    assert watcher == [], watcher[:3]
