"""Processes the concurrency test runs beside the daemon: agent-like writers and readers.

Module-level functions so a multiprocessing fork server can start them.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

from memd.index.search import open_readonly, query_index
from tests.faults.kit import append, drawer_problems, index_problems


def writer_main(home: str, chunks: list[tuple[str, bytes]], seed: int, pause_max: float) -> None:
    """An agent: appends its own transcript, one O_APPEND write per chunk, at an uneven pace."""

    rng = random.Random(seed)
    for rel, data in chunks:
        append(Path(home), rel, data)
        time.sleep(rng.uniform(0.0, pause_max))


def reader_main(home: str, key: str, stop_file: str, out: str) -> None:
    """An agent at session start, over and over: read MEMORY.md (both scopes), the drawer
    render, and query the search database read-only. Every read must be a whole file
    and every query must succeed once the database exists. Results go to `out` (JSON)."""

    root = Path(home)
    views = [(root / "memory" / "MEMORY.md", index_problems), (root / "projects" / key / "memory" / "MEMORY.md", index_problems),
             (root / "memory.md", drawer_problems)]  # fmt: skip
    db = root / "memd" / "search.sqlite"
    counts: dict[str, Any] = {"file_reads": 0, "queries": 0, "hits": 0, "torn": [], "sqlite_errors": []}
    db_seen = False
    while not os.path.exists(stop_file):
        time.sleep(0.002)
        for path, check in views:
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            except UnicodeDecodeError as exc:
                counts["torn"].append(f"{path}: not UTF-8 ({exc})")
                continue
            counts["file_reads"] += 1
            problems = check(text, str(path))
            if problems:
                counts["torn"].append(problems[0])
        if not db.exists():
            continue
        try:
            conn = open_readonly(db)
            try:
                hits = query_index(conn, "deploy Tuesdays", project_key=key, limit=50)
                hits += query_index(conn, "FACT", project_key=key, limit=50)
            finally:
                conn.close()
            db_seen = True
            counts["queries"] += 2
            counts["hits"] += len(hits)
        except sqlite3.Error as exc:
            # Before the writer's first commit the file may exist without its tables.
            if db_seen or "no such table" not in str(exc):
                counts["sqlite_errors"].append(f"{type(exc).__name__}: {exc}")
    Path(out).write_text(json.dumps(counts))
