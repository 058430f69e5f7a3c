"""The state database: migrations, versions, permissions, cursors."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from memd import state
from memd.job.context import get_cursor, set_cursor


def test_fresh_database_is_migrated_private_and_wal(tmp_path: Path) -> None:
    p = tmp_path / "memd" / "state.sqlite"
    conn = state.connect(p)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(state.MIGRATIONS)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert (p.stat().st_mode & 0o777) == 0o600 and (p.parent.stat().st_mode & 0o777) == 0o700
    conn.close()
    conn = state.connect(p)  # idempotent
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(state.MIGRATIONS)
    conn.close()


def test_newer_schema_is_refused_clearly(tmp_path: Path) -> None:
    p = tmp_path / "state.sqlite"
    raw = sqlite3.connect(p)
    raw.execute(f"PRAGMA user_version={len(state.MIGRATIONS) + 1}")
    raw.close()
    with pytest.raises(state.StateError, match="newer than this memd"):
        state.connect(p)


def test_readonly_without_state_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(state.StateError, match="no state yet"):
        state.connect(tmp_path / "absent.sqlite", readonly=True)


def test_cursor_roundtrip_and_kv(tmp_path: Path) -> None:
    conn = state.connect(tmp_path / "s.sqlite")
    assert get_cursor(conn, "extract", "t") is None
    set_cursor(conn, "extract", "t", {"offset": 5}, "2026-01-01T00:00:00.000Z")
    set_cursor(conn, "extract", "t", {"offset": 9}, "2026-01-01T00:00:01.000Z")
    assert get_cursor(conn, "extract", "t") == {"offset": 9}
    state.set_kv(conn, "a", "1")
    state.set_kv(conn, "a", "2")
    assert state.get_kv(conn, "a") == "2" and state.get_kv(conn, "b") is None


def test_runs_of_dead_processes_are_swept_as_interrupted(tmp_path: Path) -> None:
    conn = state.connect(tmp_path / "s.sqlite")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    conn.execute("INSERT INTO runs(run_id, job, target, started_at, pid) VALUES ('a', 'extract', 't', 'x', ?)", (dead_pid,))
    conn.execute("INSERT INTO runs(run_id, job, target, started_at, pid) VALUES ('b', 'extract', 't', 'x', ?)", (os.getpid(),))
    assert state.sweep_interrupted(conn, "2026-11-30T00:00:00.000Z") == 1
    rows = dict(conn.execute("SELECT run_id, outcome FROM runs").fetchall())
    assert rows == {"a": "interrupted", "b": None}
