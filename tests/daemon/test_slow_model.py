"""Issue 21 point 4: a slow model delays no one else. Model calls that hang hold up their own sessions
only: another session's extraction lands while they are still hanging. The daemon is a real process,
the model the loopback fake API (a process too), the client the real `anthropic` one.

Not timed: the hung calls are answered only after 600 s and their deadline is 300 s, so "lands while
they hang" is checked by the hung requests still being open (no answer recorded for them) when the
other session's memory appears. On main (two workers for every job) three hung sessions took both
workers and the other session waited behind them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memd.memory.scan import scan_dir
from tests.fakeapi import op, ops_text
from tests.jobkit import write_session
from tests.procs import DaemonProc, FakeApiProc, log_records, memd_env, wait_for

HUNG = ["-work-alpha", "-work-beta", "-work-gamma"]
FREE = "-work-delta"


def _script() -> dict[str, object]:
    answer = ops_text(op(scope="project", name="deploys-on-fridays", type="project",
                         description="Deploys happen on Fridays only", body="**Why:** the user said so."))  # fmt: skip
    return {
        "rules": [
            {"if_user_contains": "HANGS", "reply": {"kind": "text", "text": "yes", "delay": 600}},
            {"if_system_contains": "memory gate", "reply": {"kind": "text", "text": "yes"}},
        ],
        "default": {"kind": "text", "text": answer},
    }


@pytest.mark.slow
def test_hung_calls_of_other_sessions_do_not_stop_this_ones_extraction(tmp_path: Path) -> None:
    with FakeApiProc(tmp_path, _script()) as api:
        home = tmp_path / "h"
        home.mkdir()
        (home / "settings.json").write_text(json.dumps({
            "memory": {"sessionMemory": {"enabled": False}},
            "memd": {"provider": "anthropic", "baseUrl": api.url, "timeoutSeconds": 300, "maxRetries": 0},
        }))  # fmt: skip
        with DaemonProc(home, env=memd_env(ANTHROPIC_API_KEY="test-key")):
            for key in HUNG:
                write_session(home / "projects" / key / "s.jsonl",
                              [("user", f"HANGS: remember that {key} deploys on Mondays."), ("assistant", "OK.")])  # fmt: skip
            wait_for(lambda: len(api.requests()) >= 2, 120)  # on main: both workers hold a hung call
            write_session(home / "projects" / FREE / "s.jsonl",
                          [("user", "Remember that we deploy only on Fridays, please."), ("assistant", "Noted.")])  # fmt: skip
            memory = home / "projects" / FREE / "memory"
            wait_for(lambda: memory.is_dir() and scan_dir(memory, "project", FREE).memories, 120)
            hung = [r for r in api.requests() if "HANGS" in json.dumps(r["body"])]
            assert len(hung) <= len(HUNG)  # at most one call each: none has been answered or retried

            def finished() -> list[str]:
                return [r["target"] for r in log_records(home) if r.get("event") == "job.finished"
                        and r.get("job") == "extract"]  # fmt: skip

            wait_for(finished, 60)  # the memory is on disk before the run's last line is logged
            assert finished() == [f"session:{FREE}:s"]  # the hung ones are still running
    [m] = scan_dir(home / "projects" / FREE / "memory", "project", FREE).memories
    assert m.name == "deploys-on-fridays"
