"""The run: bad input, vanished transcripts, the off switch, and kill -9 during writes."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jobs import summary
from jobs.summary.document import TOTAL_MAX_CHARS
from memd.job.runner import run_job
from memd.tree import Home, Place
from tests.conftest import REPO
from tests.jobs.summary.kit import (
    SMALL_SETTINGS,
    assert_whole,
    ingest,
    make_ctx,
    make_settings,
    offline_llm,
    rec_assistant,
    rec_result,
    rec_user,
    write_jsonl,
)
from tests.procs import kill_rounds

BAD_INPUTS: dict[str, list[Any]] = {
    "no-human-text": [
        rec_assistant([{"type": "text", "text": "Starting on my own. " * 600}], "m1"),
        rec_assistant([{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}], "m2"),
        rec_result("t1", "a b c"),
    ],
    "only-tool-calls": [
        *[r for i in range(40) for r in (
            rec_assistant([{"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {"file_path": f"f{i}.py"}}], f"m{i}"),
            rec_result(f"t{i}", "z" * 500))],
    ],
    "compaction-first": [
        {"type": "system", "subtype": "compact_boundary", "uuid": "c", "sessionId": "s",
         "compactMetadata": {"trigger": "auto", "preTokens": 150000}},
        rec_user("Summary of the earlier conversation: " + "s" * 9000, isCompactSummary=True),
        rec_user("Carry on with the migration " + "m" * 9000),
        rec_assistant([{"type": "text", "text": "Carrying on."}], "m1"),
    ],
    "giant-tool-result": [
        rec_user("Dump the logs"),
        rec_assistant([{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "cat big.log"}}], "m1"),
        rec_result("t1", "log line\n" * 600_000),
        rec_assistant([{"type": "text", "text": "That was long."}], "m2"),
    ],
    "garbage-lines": [
        "{not json", "[1, 2, 3]", "null", json.dumps({"type": "mystery", "x": 1}),
        rec_user("Real request " + "r" * 9000), "\x00\x01 binary",
        rec_assistant([{"type": "text", "text": "ok"}], "m1"),
    ],
    "nothing-conversational": [
        {"type": "file-history-snapshot", "messageId": "x", "snapshot": {}},
        {"type": "summary", "summary": "A title", "leafUuid": "u"},
        rec_user("<command-name>/clear</command-name>"),
    ],
    "paused-memory": [
        rec_user("<command-name>/pause-memory</command-name>"),
        rec_user("Private but still part of the session " + "p" * 9000),
        rec_assistant([{"type": "text", "text": "Understood."}], "m1"),
    ],
    "dangling-tool-call": [
        rec_user("Run it " + "d" * 9000),
        rec_assistant([{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "make"}}], "m1"),
    ],
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_gives_a_sane_summary_or_a_reasoned_skip(case: str, tmp_path: Path) -> None:
    home = tmp_path / "h"
    write_jsonl(home / "projects" / "k" / "s.jsonl", BAD_INPUTS[case])
    ctx = make_ctx(home, make_settings(SMALL_SETTINGS), offline_llm)
    ingest(ctx)
    t = Place("session", "k", "s")
    for force in (False, True):
        result = run_job(ctx, summary, t, force=force)
        assert result.outcome in ("ok", "skipped"), result
        assert result.reason
    path = ctx.home.summary_file("k", "s")
    if path.exists():
        doc = assert_whole(path.read_text())
        assert len(path.read_text()) <= TOTAL_MAX_CHARS + 200
        assert not doc.is_empty()
    if case == "paused-memory":  # nothing said after a pause is summarised (§3.4), nor run again and again
        assert summary.due(ctx) == [] and not path.exists()
    if case == "nothing-conversational":
        assert not path.exists()
    if case == "dangling-tool-call":  # read up to the call still waiting for its result, not past it
        assert "Run it" in path.read_text() and "make" not in path.read_text()
    if case == "giant-tool-result":
        assert "cat big.log" in path.read_text()


def test_a_vanished_transcript_or_unknown_session_is_skipped(tmp_path: Path) -> None:
    home = tmp_path / "h"
    path = home / "projects" / "k" / "s.jsonl"
    write_jsonl(path, BAD_INPUTS["compaction-first"])
    ctx = make_ctx(home, make_settings(SMALL_SETTINGS), offline_llm)
    ingest(ctx)
    path.unlink()
    r = run_job(ctx, summary, Place("session", "k", "s"), force=True)
    assert r.outcome == "skipped" and "unreadable" in r.reason
    r = run_job(ctx, summary, Place("session", "k", "nope"), force=True)
    assert r.outcome == "skipped" and "no such session" in r.reason


def test_disabled_means_never(tmp_path: Path) -> None:
    home = tmp_path / "h"
    write_jsonl(home / "projects" / "k" / "s.jsonl", BAD_INPUTS["compaction-first"])
    ctx = make_ctx(home, make_settings({**SMALL_SETTINGS, "enabled": False}), offline_llm)
    ingest(ctx)
    assert summary.due(ctx) == []
    r = run_job(ctx, summary, Place("session", "k", "s"), force=True)
    assert r.outcome == "skipped" and "disabled" in r.reason


# ----------------------------------------------------------------------------- kill -9 during writes

CHILD = r"""
import json, random, sys
from datetime import UTC, datetime
from pathlib import Path
import structlog
import jobs.summary as summary
from memd import state
from memd.ledger import store as ledger
from memd.job.context import JobContext
from memd.tree import Place
from memd.job.runner import run_job
from memd.settings import parse_text
from memd.discovery import SessionFile
from memd.tree import Home
from memd.llm.client import LLM
from memd.llm.types import LLMConfig

home, seed = Path(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
h = Home(home)
path = home / "projects" / "k" / "s.jsonl"
path.parent.mkdir(parents=True, exist_ok=True)
structlog.configure(logger_factory=structlog.ReturnLoggerFactory())
conn = state.connect(h.state_db)
ctx = JobContext(home=h, settings=parse_text("{}"), conn=conn, now=lambda: datetime.now(UTC),
                 log=structlog.get_logger(), llm_factory=lambda c: LLM(LLMConfig(provider="offline")))
words = ["alpha", "beta", "gamma", "delta", "parser", "cache", "index", "lock", "fsync", "rename"]
n = 0
while True:
    n += 1
    tid = f"t{seed}-{n}"
    req = " ".join(rng.choice(words) for _ in range(rng.randint(100, 250)))
    recs = [
        {"type": "user", "uuid": f"u{tid}", "sessionId": "s", "timestamp": "2026-11-30T10:00:00.000Z",
         "message": {"role": "user", "content": f"request {tid}: {req}"}},
        {"type": "assistant", "uuid": f"a{tid}", "sessionId": "s", "message": {"id": f"m{tid}", "role": "assistant",
         "content": [{"type": "tool_use", "id": tid, "name": "Bash",
                      "input": {"command": f"make test-{tid} " + req[:80]}},
                     {"type": "tool_use", "id": tid + "r", "name": "Read",
                      "input": {"file_path": f"src/{rng.choice(words)}/{tid}.py"}}]}},
        {"type": "user", "uuid": f"r{tid}", "sessionId": "s", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tid, "content": "failed: " + req[:150], "is_error": True},
            {"type": "tool_result", "tool_use_id": tid + "r", "content": req}]}},
        {"type": "assistant", "uuid": f"b{tid}", "sessionId": "s", "message": {"id": f"n{tid}", "role": "assistant",
         "content": [{"type": "text", "text": "done " + req}]}},
    ]
    with open(path, "ab") as fh:
        fh.write(b"".join(json.dumps(r).encode() + b"\n" for r in recs))
    ledger.ingest(conn, SessionFile("k", "s", str(path)), "2026-11-30T10:00:00.000Z")
    result = run_job(ctx, summary, Place("session", "k", "s"), force=True)
    assert result.outcome == "ok", result
    print(n, flush=True)
"""


@pytest.mark.slow
@pytest.mark.timeout(900)  # a kill loop: its length grows with the machine's load (290 s of a 300 s limit seen at load 13)
def test_kill_9_during_writes_leaves_a_whole_summary(tmp_path: Path) -> None:
    home = tmp_path / "h"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    summary_path = Home(home).summary_file("k", "s")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    stop = threading.Event()
    torn: list[str] = []
    reads = [0]

    def reader() -> None:
        """A reader racing the writer never sees half a file."""
        while not stop.is_set():
            time.sleep(0.0005)  # leave the child a core on a two-core machine
            try:
                text = summary_path.read_text()
            except FileNotFoundError:
                continue
            reads[0] += 1
            try:
                assert_whole(text)
            except AssertionError:
                torn.append(text)

    rng = random.Random(5)
    sizes = []
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    try:
        for i in range(kill_rounds(22)):
            proc = subprocess.Popen([sys.executable, str(script), str(home), str(i)], env=env, cwd=REPO,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
            # Wait for its first write, then kill it at a random moment of its write loop.
            first = proc.stdout.readline() if proc.stdout else b""
            assert first, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(rng.uniform(0.0, 0.25))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            assert proc.returncode == -signal.SIGKILL
            text = summary_path.read_text()
            assert_whole(text)
            sizes.append(len(text))
            visible = sorted(p.name for p in summary_path.parent.iterdir())
            assert all(n == "summary.md" or re.fullmatch(r"\.summary\.md\..+\.tmp", n) for n in visible), visible
            assert len(visible) <= 2, visible  # a killed writer's temp file is cleared by the next write
    finally:
        stop.set()
        th.join()
    assert not torn, torn[0][-500:]
    assert reads[0] > 0
    assert max(sizes) > 20_000  # large summaries, so a kill can land mid-write

