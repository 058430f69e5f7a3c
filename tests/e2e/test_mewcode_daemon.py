"""The daemon finds MewCode projects' own `.mewcode/sessions/` (issue 26 point 2) and follows their
appends, by file events and by polling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ledger.test_mewcode_projects import mew_project
from tests.procs import DaemonProc, run_memd, wait_for


def _turns(home: Path) -> int:
    r = run_memd(home, "sessions", "--json", "--no-scan")
    rows = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else []
    return max((x["human_turns"] for x in rows if x["session_id"] == "mew-0001"), default=-1)


@pytest.mark.parametrize("polling", [False, True], ids=["events", "polling"])
def test_the_daemon_ingests_a_root_projects_sessions_and_their_appends(tmp_path: Path, polling: bool) -> None:
    home = tmp_path / "h"
    proj = mew_project(tmp_path / "code" / "shop")
    home.mkdir()
    memd = {"roots": [str(tmp_path / "code")], **({"forcePolling": True, "pollSeconds": 1} if polling else {})}
    (home / "settings.json").write_text(json.dumps({"memd": memd}))
    with DaemonProc(home) as d:
        first = wait_for(lambda: _turns(home) > 0 and _turns(home), timeout=30)
        with open(proj / ".mewcode" / "sessions" / "mew-0001.jsonl", "a") as fh:
            fh.write(json.dumps({"type": "user", "content": "and deploy to staging",
                                 "timestamp": "2026-10-01T10:00:00Z"}) + "\n")  # fmt: skip
        # Events: the directory is watched (the reconcile is 300 s away). Polling: the next scan.
        wait_for(lambda: _turns(home) == first + 1, timeout=30)
        assert d.stop() == 0
