"""Issue 16, "A model call never holds memd hostage": the daemon as a real process against a fake API that
drips its answer one byte every 2 s (minutes for a whole answer; never silent long enough for a per-read
timeout). Measured before the fix: a 5 s timeout held a call 183-610 s, and SIGTERM did not stop the
daemon within 200 s. The bounds asserted here are generous; what they separate is bounded from unbounded.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.jobkit import write_session
from tests.procs import DaemonProc, FakeApiProc, log_records, memd_env, wait_for

KEY = "-work-app"
TIMEOUT_S = 3


def _home(tmp_path: Path, api: FakeApiProc, *, max_retries: int) -> Path:
    home = tmp_path / "h"
    write_session(home / "projects" / KEY / "s1.jsonl",
                  [("user", "Remember that we deploy only on Fridays, please."), ("assistant", "Noted.")])  # fmt: skip
    (home / "settings.json").write_text(json.dumps({
        "memory": {"sessionMemory": {"enabled": False}},  # only the extraction calls the model
        "memd": {"provider": "anthropic", "baseUrl": api.url, "timeoutSeconds": TIMEOUT_S, "maxRetries": max_retries},
    }))  # fmt: skip
    return home


def _drip_script() -> dict[str, object]:
    return {"default": {"kind": "text", "text": "yes", "drip": 2}}


@pytest.mark.slow
def test_sigterm_with_a_call_in_flight_drains_within_the_timeout(tmp_path: Path) -> None:
    """The gate call is in flight when SIGTERM comes: it ends at its bound, no retry is started (two were
    allowed), the run is deferred (redone from its cursor after a restart) and the daemon exits 0."""
    with FakeApiProc(tmp_path, _drip_script()) as api:
        home = _home(tmp_path, api, max_retries=2)
        with DaemonProc(home, env=memd_env(ANTHROPIC_API_KEY="test-key")) as d:
            assert d.proc is not None
            wait_for(lambda: api.requests())  # recorded on arrival: the call is in flight
            sent = time.monotonic()
            d.proc.send_signal(signal.SIGTERM)
            code = d.proc.wait(TIMEOUT_S + 120)
            drained = time.monotonic() - sent
        assert code == 0
        assert drained < TIMEOUT_S + 60, drained  # before the fix: still running after 200 s (margin: a loaded CI machine)
        assert len(api.requests()) == 1  # the stop was honoured between attempts
    logs = log_records(home)
    [run] = [r for r in logs if r.get("event") == "job.finished" and r.get("job") == "extract"]
    assert run["outcome"] == "deferred" and "memd is stopping" in run["reason"], run
    assert "timed out after 3 s" in run["reason"]
    [stopped] = [r for r in logs if r.get("event") == "daemon.stopped"]
    assert stopped["unfinished"] == []


@pytest.mark.slow
def test_a_drip_fed_call_fails_at_its_bound_in_the_daemon(tmp_path: Path) -> None:
    """Without a stop, the attempts run out one bound after another and the run fails (it is retried later
    with a backoff); the extraction's lock-free model call never blocked anything meanwhile."""
    with FakeApiProc(tmp_path, _drip_script()) as api:
        home = _home(tmp_path, api, max_retries=1)
        with DaemonProc(home, env=memd_env(ANTHROPIC_API_KEY="test-key")) as d:
            started = time.monotonic()
            run = wait_for(lambda: next((r for r in log_records(home) if r.get("event") == "job.finished"
                                         and r.get("job") == "extract"), None), 2 * TIMEOUT_S + 180)  # fmt: skip
            took = time.monotonic() - started
            assert d.stop() == 0
    assert run["outcome"] == "failed" and "after 2 attempts: timed out after 3 s" in run["reason"], run
    assert took < 2 * TIMEOUT_S + 120, took  # start-up, two bounded attempts and a backoff; unbounded: ~10 min each
    assert len(api.requests()) >= 2
