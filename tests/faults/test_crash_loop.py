"""Crash loop: `kill -9` of the daemon at random moments while jobs run, a restart after every kill.

The daemon works on a home whose transcripts grow between and during its lives
(an agent appending turns, some appends ending mid-line), with the real
anthropic client calling a fake model server that answers after a random
delay, so kills land before, during and after model calls, memory writes,
index rebuilds, summary writes and ledger commits.

After every kill, before the restart:

* every memory file parses, ends with the last line its body was written with,
  and its name is unique in its directory; MEMORY.md, the drawer render
  (`$HOME/memory.md`) and every summary.md are whole files;
* no memory that existed before is gone, and none exists that the transcripts
  do not ask for;
* the ledger's counts of every session equal an independent count
  (tests/reference.py) of exactly the bytes it says it has read.

At the end the home settles under the real `memd run`, and its state (memory
names per scope, ledger counts per session) must equal that of a second home
fed the same transcripts and never killed — and the corpus's own list.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.faults.kit import (
    FakeModel,
    ForkedDaemon,
    append,
    build_corpus,
    failed_runs,
    ledger_problems,
    ledger_state,
    max_run_id,
    memory_files,
    memory_names,
    runs_by_outcome,
    settle,
    temp_leftovers,  # fmt: skip
    unfinished_runs,
    view_problems,
    write_settings,
)
from tests.procs import DaemonProc, kill_rounds

KILLS = kill_rounds(int(os.environ.get("MEMD_FAULTS_KILLS", "110")))
SEED = int(os.environ.get("MEMD_FAULTS_SEED", "20261130"))


@pytest.mark.slow
@pytest.mark.timeout(900)  # a kill loop: its length grows with the machine's load (290 s of a 300 s limit seen at load 13)
def test_kill_9_loop_keeps_every_file_whole_and_ends_where_a_calm_run_ends(
    tmp_path: Path, fault_report: Counter[str], fault_notes: list[str]
) -> None:
    corpus = build_corpus(SEED)
    expected = corpus.expected_names()
    crash, calm = tmp_path / "crash", tmp_path / "calm"
    write_settings(crash)
    write_settings(calm)
    rng = random.Random(SEED)
    pending = list(corpus.writes)
    had: dict[str, set[str]] = {}
    kills = mid_job = early = aimed = 0
    last_run = 0
    started = time.monotonic()
    with FakeModel(tmp_path / "api", max_delay=0.15, seed=SEED) as api:
        env = api.env()
        while kills < KILLS or pending:
            seen_answers = len(api.answers())
            d = ForkedDaemon(crash, env, tmp_path / "daemon.out").start()
            how = rng.random()
            if how < 0.1:
                time.sleep(rng.uniform(0.0, 0.08))  # during start-up: lock, migrations, first scan
                early += 0 if d.ready() else 1
            else:
                d.wait_ready()
                if pending and rng.random() < 0.75:
                    for _ in range(rng.choice((1, 1, 2))):
                        if pending:
                            rel, data = pending.pop(0)
                            append(crash, rel, data)
                if how < 0.3:
                    time.sleep(rng.uniform(0.0, 0.15))  # the append being read: ingest, due-checks, first calls
                elif how < 0.55:
                    time.sleep(rng.uniform(0.0, 0.6))
                else:
                    # Aimed: just after the model answers, while the job acts on the answer
                    # (memory files, MEMORY.md, the drawer, search rows, summary.md, the cursor).
                    deadline = time.monotonic() + 1.5
                    while time.monotonic() < deadline and len(api.answers()) <= seen_answers:
                        time.sleep(0.005)
                    fresh = api.answers()[seen_answers:]
                    if fresh:
                        aimed += 1
                        time.sleep(max(0.0, fresh[0]["at"] - time.time()) + rng.uniform(0.0, 0.04))
            d.kill()
            kills += 1
            problems = view_problems(crash) + ledger_problems(crash, tmp_path / "scratch")
            assert not problems, f"after kill {kills}: {problems}"
            now = memory_names(crash)
            for label, names in had.items():
                lost = names - now.get(label, set())
                assert not lost, f"after kill {kills}: {label} lost {sorted(lost)}"
            for label, names in now.items():
                extra = names - expected.get(label, set())
                assert not extra, f"after kill {kills}: {label} holds {sorted(extra)}, which no transcript asked for"
            had = now
            unfinished = unfinished_runs(crash, last_run)
            mid_job += bool(unfinished)
            last_run = max_run_id(crash)
        loop_seconds = time.monotonic() - started
        model_calls = len(api.requests())
        leftovers = temp_leftovers(crash)

        # The same home, settled by the real `memd run` (no fork server), then stopped cleanly.
        before = max_run_id(crash)
        with DaemonProc(crash, env=env) as d:
            settle(crash, before)
            assert d.stop() == 0
        # A calm home: the same final transcripts, never killed.
        for rel, data in corpus.files().items():
            append(calm, rel, data)
        with DaemonProc(calm, env=env) as d:
            settle(calm)
            assert d.stop() == 0

    assert view_problems(crash) == [] and view_problems(calm) == []
    assert memory_names(crash) == memory_names(calm) == expected
    assert memory_files(crash) == memory_files(calm)
    assert ledger_state(crash) == ledger_state(calm)
    assert ledger_problems(crash, tmp_path / "scratch") == []
    assert failed_runs(crash) == [] and failed_runs(calm) == []
    # Every session has its summary in both homes (contents differ: they cover different spans).
    summaries = sorted(p.relative_to(crash) for p in crash.glob("projects/*/*/session-memory/summary.md"))
    assert summaries == sorted(p.relative_to(calm) for p in calm.glob("projects/*/*/session-memory/summary.md"))
    assert len(summaries) == 6

    outcomes = runs_by_outcome(crash)
    fault_report["crash loop: kill -9 survived (each followed by a restart)"] += kills
    fault_report["crash loop: kills that interrupted a running job"] += mid_job
    fault_report["crash loop: kills during start-up (before the pid file)"] += early
    fault_report["crash loop: kills aimed just after a model answer"] += aimed
    # unfinished rows of dead processes: swept as "interrupted" by a later daemon, or still open ("killed")
    fault_report["crash loop: job runs cut short by a kill"] += outcomes.get("killed", 0) + outcomes.get("interrupted", 0)
    fault_report["crash loop: model calls answered or cut off"] += model_calls
    fault_report["crash loop: temporary files left by a kill"] += len(leftovers)
    fault_notes.append(
        f"crash loop: {kills} kills in {loop_seconds:.0f} s; runs by outcome {dict(sorted(outcomes.items()))}; "
        f"{sum(len(v) for v in expected.values())} memories and {len(summaries)} summaries in the end, "
        "equal to the calm home"
    )
    shutil.rmtree(tmp_path / "scratch", ignore_errors=True)
