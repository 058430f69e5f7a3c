"""Issue 26 point 2: what finding MewCode projects' own `.mewcode/sessions/` adds to a scan with
nothing new to read (`memd sessions` and `memd scan` pay it at every call, the daemon at every poll).

    .venv/bin/python bench/bench_mewcode.py [--keys 200] [--sessions 5] [--mewcode 20] [--runs 15]

A home of `keys` projects (`sessions` Claude-Code-style transcripts each, every one with a `cwd`)
and `mewcode` MewCode projects under one `memd.roots` directory. Each round times `scan_home` in
this process (no process start) with the discovery on and with it replaced by "no places", in the
same run (the machine is shared: the ratio is what means something); the per-process cwd cache is
cleared before each call, as in a fresh `memd` process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from memd.ledger import outside, scan
from memd.tree import Home


def build(base: Path, keys: int, sessions: int, mewcode: int) -> Home:
    home = base / "home"
    for k in range(keys):
        cwd = base / "work" / f"p{k}"
        cwd.mkdir(parents=True)
        d = home / "projects" / f"work-p{k}"
        d.mkdir(parents=True)
        for s in range(sessions):
            rec = {"type": "user", "uuid": "u", "sessionId": f"s{s}", "cwd": str(cwd),
                   "message": {"role": "user", "content": "hi"}}  # fmt: skip
            (d / f"s{s}.jsonl").write_text(json.dumps(rec) + "\n")
    for k in range(mewcode):
        sd = base / "code" / f"m{k}" / ".mewcode" / "sessions"
        sd.mkdir(parents=True)
        (sd / "a.jsonl").write_text(json.dumps({"type": "user", "content": "hello"}) + "\n")
        (sd / "a.meta").write_text(json.dumps({"title": f"m{k}", "message_count": 1}))
    (home / "settings.json").write_text(json.dumps({"memd": {"roots": [str(base / "code")]}}))
    return Home(home)


def timed(home: Home, runs: int) -> float:
    times = []
    for _ in range(runs):
        outside._CWD_BY_PATH.clear()
        t = time.perf_counter()
        scan.scan_home(home)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--mewcode", type=int, default=20)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="memd-bench-mewcode-") as d:
        home = build(Path(d), args.keys, args.sessions, args.mewcode)
        first = scan.scan_home(home)
        real = scan._outside
        on, off = [], []
        for _ in range(3):
            scan._outside = lambda _c, _h, _r: []  # type: ignore[assignment]
            off.append(timed(home, args.runs))
            scan._outside = real  # type: ignore[assignment]
            on.append(timed(home, args.runs))
        print(json.dumps({"sessions": first["sessions"], "idle_scan_ms_without": round(1000 * statistics.median(off), 1),
                          "idle_scan_ms_with": round(1000 * statistics.median(on), 1),
                          "ratio": round(statistics.median(on) / statistics.median(off), 2),
                          "load": os.getloadavg()[0]}))  # fmt: skip


if __name__ == "__main__":
    main()
