"""Where a parallel first scan's workers wait: time inside each worker's write transactions and
waiting for its turn (`memd.ledger.workers.Turns`), summed per worker, and the parent's tail (results
done → `scan_home` returned, its close included). Issue 27 point 1, round i27i4 (bench/RESULTS.md).

    .venv/bin/python bench/ingest_timeline.py HOME [--tree DIR] [--rounds N]

HOME is a home whose transcripts are read from a fresh ledger each round (`HOME/memd` is removed);
`--tree` runs an export of another commit (`git archive C memd jobs | tar -x -C DIR`) instead of this
one. Each round is a fresh process; it wraps the scan's own functions (names as in fdf9d1e and later),
so the figures include the wrappers' few microseconds per batch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections import defaultdict

ROUND = r"""
import contextlib, os, sys, time
if sys.argv[2]:
    sys.path.insert(0, sys.argv[2])
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]
from pathlib import Path
import memd.ledger.scan as sc
import memd.ledger.store as st
from memd.tree import Home
T0 = time.monotonic()
def mark(what, ms=0.0):
    os.write(1, f"{(time.monotonic() - T0) * 1000:.3f} {os.getpid()} {what} {ms:.3f}\n".encode())
real_write, real_flush, real_par = st._write_batch, st._flush, sc._ingest_parallel
def write_batch(*a):
    t = time.monotonic(); r = real_write(*a); mark("txn", (time.monotonic() - t) * 1000); return r
def flush(conn, batch, now, log, turn=None):
    if turn is None:
        return real_flush(conn, batch, now, log, turn)
    @contextlib.contextmanager
    def timed():
        t = time.monotonic()
        with turn():
            mark("wait", (time.monotonic() - t) * 1000)
            yield
    return real_flush(conn, batch, now, log, timed)
def par(*a, **k):
    r = real_par(*a, **k); mark("parallel_end"); return r
st._write_batch, st._flush, sc._ingest_parallel = write_batch, flush, par
sc.scan_home(Home(Path(sys.argv[1])))
mark("scan_end")
"""


def one_round(home: str, tree: str) -> dict[str, float]:
    shutil.rmtree(os.path.join(home, "memd"), ignore_errors=True)
    out = subprocess.run([sys.executable, "-c", ROUND, home, tree], capture_output=True, text=True, check=True).stdout
    per: dict[str, float] = defaultdict(float)
    ends: dict[str, float] = {}
    for line in out.splitlines():
        at, pid, what, ms = line.split()
        if what in ("txn", "wait"):
            per[f"{what} {pid}"] += float(ms)
        else:
            ends[what] = float(at)
    per["tail"] = ends["scan_end"] - ends["parallel_end"]
    return dict(per)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("home")
    ap.add_argument("--tree", default="")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for _ in range(args.rounds):
        r = one_round(args.home, os.path.abspath(args.tree) if args.tree else "")
        txn = sum(v for k, v in r.items() if k.startswith("txn"))
        wait = sum(v for k, v in r.items() if k.startswith("wait"))
        print(f"write transactions {txn:.0f} ms, turn waits {wait:.0f} ms, sum {txn + wait:.0f} ms, "
              f"tail {r['tail']:.0f} ms; load {os.getloadavg()[0]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
