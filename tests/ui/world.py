"""A home for the page's tests: memories in the drawer and a project (with provenance and history),
job runs, model calls over several days, a session with a summary, and one proposal waiting."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from jobs import dream, extract
from memd import state
from memd.job.runner import run_job
from memd.tree import Home, Place
from memd.write import control, proposals
from tests.conftest import memd_cmd
from tests.jobkit import context, ingest, make_settings, write_session
from tests.jobs.dream.helpers import write_mem
from tests.procs import memd_env

KEY = "-work-shop"
TOOLS = "-work-tools"
SID1, SID2 = "s-first", "s-second"
FIRST = [("user", "Please always run the linter before committing; broken CI costs us hours."),
         ("assistant", "Understood."),
         ("user", "We decided that an empty cart is a 422 with a JSON error body."),
         ("assistant", "Noted.")]  # fmt: skip
SECOND = [("user", "We decided that prices are stored as integer cents, never floats."), ("assistant", "Noted.")]
# Days back from today that have model calls, with (job, model, input, output) rows.
USAGE = {1: [("extract", "claude-haiku-4-5", 12_000, 900), ("summary", "claude-haiku-4-5", 8_000, 1_200)],
         3: [("dream", "claude-sonnet-4-6", 30_000, 4_000)],
         9: [("extract", "claude-haiku-4-5", 5_000, 300)]}  # fmt: skip


def _settings(home: Path, review: bool) -> None:
    (home / "settings.json").write_text(json.dumps({"memory": {"review": review}, "memd": {"provider": "offline"}}))


def build(home: Path, today: date) -> dict[str, object]:
    """Lay the home out through memd's own jobs and write path; returns what the tests look for."""
    (home / "projects").mkdir(parents=True, exist_ok=True)
    _settings(home, review=False)
    write_session(home / "projects" / KEY / f"{SID1}.jsonl", FIRST)
    ingest(home)
    ctx = context(home, make_settings())
    r = run_job(ctx, extract, Place("session", KEY, SID1))
    assert r.outcome == "ok", r
    d = control.decide(ctx, "I prefer answers in British English.", scope="global", key=KEY, mtype="user", name=None)
    control.remember(ctx, d)  # the drawer: `memd remember --global`
    tools = home / "projects" / TOOLS / "memory"
    tools.mkdir(parents=True)
    write_mem(tools, "tabs", "the user indents with tabs here", "feedback", "Use tabs, not spaces. Why: history uses tabs.", age_h=72)
    write_mem(tools, "tabs-2", "The user indents with tabs here", "feedback", "Use tabs, not spaces! Why: history uses tabs", age_h=30)
    r = run_job(ctx, dream, Place("project", TOOLS), force=True)  # an offline dream merges the two
    assert r.outcome == "ok", r
    ctx.conn.close()
    _settings(home, review=True)
    write_session(home / "projects" / KEY / f"{SID2}.jsonl", SECOND)
    ingest(home)
    ctx = context(home, make_settings(memory={"review": True}))
    r = run_job(ctx, extract, Place("session", KEY, SID2))
    assert r.outcome == "ok", r
    ctx.conn.close()
    (pending,) = proposals.list_proposals(Home(home))
    summary = Home(home).summary_file(KEY, SID1)
    summary.parent.mkdir(parents=True, exist_ok=True)
    summary.write_text("# Cart endpoint errors and the linter rule\n\n## Current state and next steps\n"
                       "The empty-cart case answers 422.\n", encoding="utf-8")  # fmt: skip
    conn = state.connect(Home(home).state_db)
    with conn:
        for back, rows in USAGE.items():
            day = today - timedelta(days=back)
            for job, model, i, o in rows:
                conn.execute("INSERT INTO model_calls (ts, day, job, model, tier, input_tokens, output_tokens, ok) "
                             "VALUES (?,?,?,?,?,?,?,1)", (f"{day}T10:00:00Z", day.isoformat(), job, model, "small", i, o))  # fmt: skip
    conn.close()
    return {"proposal": pending.id, "usage_days": sorted((today - timedelta(days=b)).isoformat() for b in USAGE)}


@dataclass
class Page:
    """A running `memd ui --no-open` and the address it printed."""

    proc: subprocess.Popen[str]
    url: str  # with ?token=
    port: int
    token: str

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def served(home: Path) -> Iterator[Page]:
    """`memd ui --no-open` as a real process; stopped (SIGTERM, then kill) at the end."""
    proc = subprocess.Popen([*memd_cmd(), "--home", str(home), "ui", "--no-open"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=memd_env())  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=(\S+)", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        _wait_listening(int(m.group(1)))
        yield Page(proc, m.group(0), int(m.group(1)), m.group(2))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_listening(port: int) -> None:
    for _ in range(2400):  # about two minutes at most: a loaded machine starts the server slowly
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def today() -> date:
    return datetime.now(UTC).date()

