"""Concurrency: eight agents appending to one project while the daemon runs and `memd run-now`
is called over and over from a shell, with an agent-style reader reading all along.

* No lost index line: at the end every MEMORY.md lists exactly the memory files present,
  and every durable statement the agents made is a memory.
* No torn read: the reader (a separate process) reads MEMORY.md of both scopes and the
  drawer render and queries the search database read-only the way an agent does
  (`memd.index.search.open_readonly` + `query_index`); every read is a whole file, every
  query succeeds.
* No byte counted twice: the daemon and the shell's `run-now` both ingest the same
  transcripts; the ledger still equals an independent count.
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.faults.actors import reader_main, writer_main
from tests.faults.kit import (
    FakeModel,
    _forkserver,
    build_corpus,
    failed_runs,
    index_targets,
    ledger_problems,
    memory_files,
    memory_names,  # fmt: skip
    settle,
    view_problems,
    write_settings,
)
from tests.procs import DaemonProc, run_memd

WRITERS = 8
KEY = "-work-proj0"


@pytest.mark.slow
@pytest.mark.timeout(900)  # eight writers and a settle: the length grows with the machine's load (188 s seen at load 13)
def test_eight_writers_daemon_and_run_now_loses_nothing_and_tears_nothing(
    tmp_path: Path, fault_report: Counter[str], fault_notes: list[str]
) -> None:
    corpus = build_corpus(8, projects=1, sessions=WRITERS, groups=5, split_share=0.4)
    per_session: dict[str, list[tuple[str, bytes]]] = {}
    for rel, data in corpus.writes:
        per_session.setdefault(rel, []).append((rel, data))
    assert len(per_session) == WRITERS
    home = tmp_path / "h"
    write_settings(home)
    (home / "projects" / KEY).mkdir(parents=True)
    ctx = _forkserver()
    stop = tmp_path / "stop-reader"
    reader_out = tmp_path / "reader.json"
    runs: list[tuple[str, int, str]] = []
    ran: Counter[str] = Counter()

    aborted = threading.Event()
    with FakeModel(tmp_path / "api", max_delay=0.05, seed=8) as api, DaemonProc(home, env=api.env()) as daemon:
        reader = ctx.Process(target=reader_main, args=(str(home), KEY, str(stop), str(reader_out)))
        reader.start()
        writers = [ctx.Process(target=writer_main, args=(str(home), chunks, i, 2.0))
                   for i, chunks in enumerate(per_session.values())]  # fmt: skip
        for w in writers:
            w.start()
        shell_done = threading.Event()

        def shell(seed: int) -> None:
            rng = random.Random(seed)
            while not aborted.is_set() and (not shell_done.is_set() or len(runs) < 8):
                job = rng.choice(["extract", "summary", "index"])
                force = ["--force"] if rng.random() < 0.5 else []
                r = run_memd(home, "run-now", job, "--json", *force, env=api.env(), timeout=300)
                runs.append((job, r.returncode, r.stderr[-500:]))
                if r.returncode == 0:
                    ran.update(x["outcome"] for x in json.loads(r.stdout))

        loops = [threading.Thread(target=shell, args=(i,), daemon=True) for i in range(2)]
        try:
            for loop in loops:
                loop.start()
            for w in writers:
                w.join(120)
                assert w.exitcode == 0
            shell_done.set()
            for loop in loops:
                loop.join(300)
            settle(home)
            stop.touch()
            reader.join(30)
            assert reader.exitcode == 0
            assert daemon.stop() == 0
        finally:
            # A failure above must not leave the reader, writers or shell loops running: pytest
            # would wait for them at exit and the CI run would hang instead of failing.
            aborted.set()
            stop.touch()
            for proc in (reader, *writers):
                if proc.is_alive():
                    proc.terminate()
                    proc.join(10)

    seen: dict[str, Any] = json.loads(reader_out.read_text())
    bad_runs = [r for r in runs if r[1] != 0]
    assert not bad_runs, bad_runs
    assert len(runs) >= 8 and ran["ok"] > 0
    assert seen["torn"] == [], seen["torn"][:5]
    assert seen["sqlite_errors"] == [], seen["sqlite_errors"][:5]
    assert seen["file_reads"] > 100 and seen["queries"] > 20
    for label, files in memory_files(home).items():
        d = home / "memory" if label == "global" else home / "projects" / label.split(":", 1)[1] / "memory"
        assert index_targets((d / "MEMORY.md").read_text()) == files, label
    assert memory_names(home) == corpus.expected_names()
    assert view_problems(home) == []
    assert ledger_problems(home, tmp_path / "scratch") == []
    assert failed_runs(home) == []
    fault_report["concurrency: writer processes"] += WRITERS
    fault_report["concurrency: transcript appends"] += len(corpus.writes)
    fault_report["concurrency: memd run-now calls from the shell"] += len(runs)
    fault_report["concurrency: jobs run by run-now with outcome ok"] += ran["ok"]
    fault_report["concurrency: reader file reads (all whole)"] += seen["file_reads"]
    fault_report["concurrency: reader read-only search queries (no error)"] += seen["queries"]
    fault_notes.append(f"concurrency: {sum(len(v) for v in corpus.expected_names().values())} memories from "
                       f"{WRITERS} writers, run-now {Counter(j for j, _c, _e in runs)}")  # fmt: skip
