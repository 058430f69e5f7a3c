"""`memd run-now` brings the ledger up to date only where the job reads sessions (issue 27): an
index or sync run stats no transcript; `--project KEY` reads only that project's."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.procs import run_memd


def _session(home: Path, key: str, sid: str) -> None:
    rec = {"type": "user", "message": {"role": "user", "content": "hi"}, "uuid": f"u-{sid}", "sessionId": sid,
           "timestamp": "2026-11-01T00:00:00Z"}  # fmt: skip
    (home / "projects" / key).mkdir(parents=True, exist_ok=True)
    (home / "projects" / key / f"{sid}.jsonl").write_text(json.dumps(rec) + "\n")


def _ingested(home: Path) -> set[str]:
    db = home / "memd" / "state.sqlite"
    if not db.exists():
        return set()
    conn = sqlite3.connect(db)
    try:
        return {r[0] for r in conn.execute("SELECT session_id FROM sessions")}
    finally:
        conn.close()


def test_run_now_reads_only_the_sessions_its_jobs_use(tmp_path: Path) -> None:
    home = tmp_path / "h"
    _session(home, "-p", "s1")
    _session(home, "-q", "s2")
    (home / "projects" / "-p" / "memory").mkdir()
    r = run_memd(home, "run-now", "index")
    assert r.returncode == 0, r.stderr
    assert _ingested(home) == set()  # the index reads memory files, not transcripts
    r = run_memd(home, "run-now", "summary", "--project", "-p")
    assert r.returncode == 0, r.stderr
    assert _ingested(home) == {"s1"}  # that project's sessions only
    r = run_memd(home, "run-now", "summary")
    assert r.returncode == 0, r.stderr
    assert _ingested(home) == {"s1", "s2"}
