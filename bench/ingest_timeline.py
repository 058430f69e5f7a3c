"""Where a parallel first scan's wall goes: `memd scan` as the `memd` script runs it
(`memd.__main__.main`), its own functions wrapped to stamp a shared clock (CLOCK_MONOTONIC, the same
in every process), in phases from the process's launch to its exit. Issue 27 point 1, rounds i27i4
and i27i5 (bench/RESULTS.md).

    .venv/bin/python bench/ingest_timeline.py HOME [--tree DIR] [--rounds N] [--workers N] [--events]
        [--pre NAME=STMT --pre NAME=STMT ...]

HOME is a home whose transcripts are read from a fresh ledger each round (`HOME/memd` is removed);
`--tree` runs an export of another commit (`git archive C memd jobs | tar -x -C DIR`) instead of this
one. Each round is a fresh process. Phases, in ms from the launch:

- `start`: the interpreter's start and memd's imports up to `scan_home` (the wrappers' own imports
  included: a few ms more than a plain `memd scan`);
- `before_fork`: `scan_home` to the fork (settings, discovery and the stat pass, the known sessions);
- per worker: `fork→first` (from the fork to its first batch), `busy` (inside its batches: reading,
  folding, `wait` for the turn and `txn` inside write transactions), `idle` (between its batches:
  the job pipe, its results' encoding and send), `cpu` (its user + system time) and `delay` (time it
  was runnable but not running, /proc/self/schedstat: the machine's other processes and its sibling);
- `imbalance`: the first worker's last batch done → the last worker's;
- `collect`: the last worker's last batch done → `_ingest_parallel` returned (the results' trip and
  decode, the parent's last checkpoint);
- `after`: `_ingest_parallel` → `scan_home` returned (the pass for projects the sessions named, the
  count, the ledger's close and its checkpoint);
- `steps`: the parent's serial steps before the fork (connect, settings, outside, stale_sessions,
  known_sessions) and after the workers (`outside+`), and `close` (the ledger's close);
- `exit`: `scan_home` → the process gone (output, `_leave`);
- `scan_cpu`: the CPU of `scan_home`, start to return, in the parent and every worker.

`--pre` runs variants alternated round by round (a module constant changed before the scan, say),
with the medians of each at the end. Run `python -m compileall memd` first when PYTHONDONTWRITEBYTECODE
is set (bench_ingest does it itself): a process compiling memd's modules adds ~50 ms to `start`.

The first line of each round is i27i4's summary (write transactions and turn waits summed over the
workers, and the tail from the last result to `scan_home`'s return), kept for comparison with that
round's figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

ROUND = r"""
import contextlib, os, sys, time
LAUNCH = float(sys.argv[3])
def mark(what, ms=0.0, extra=""):
    os.write(2, f"@@ {time.monotonic() * 1000 - LAUNCH:.3f} {os.getpid()} {what} {ms:.3f} {extra}\n".encode())
mark("py_start")
if sys.argv[2]:
    sys.path.insert(0, sys.argv[2])
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]
import memd.ledger.scan as sc
import memd.ledger.store as st
import memd.ledger.workers as wk
import memd.ledger.outside as od
import resource
def cpu():  # CLOCK_PROCESS_CPUTIME_ID: to the nanosecond, where os.times counts 10 ms ticks
    return time.process_time() * 1000
def faults():
    r = resource.getrusage(resource.RUSAGE_SELF); return f"{r.ru_minflt} {r.ru_stime * 1000:.1f}"
def delay():
    with open("/proc/self/schedstat") as f:
        return int(f.read().split()[1]) / 1e6
real_write, real_flush, real_par = st._write_batch, st._flush, sc._ingest_parallel
real_scan, real_run, real_child = sc.scan_home, wk.run, wk._child
real_batch, real_decode, real_learn, real_ckpt = sc._ingest_batch, sc._decode_results, od.learn_cwds, sc._checkpoint
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
    r = real_par(*a, **k); mark("parallel_end", 0, f"{cpu():.1f}"); return r
def scan(*a, **k):
    mark("scan_start", 0, f"{cpu():.1f}"); r = real_scan(*a, **k); mark("scan_end", 0, f"{cpu():.1f}"); return r
def run(*a, **k):
    mark("fork", 0, f"{cpu():.1f}"); yield from real_run(*a, **k)
def child(*a, **k):
    mark("child_start", 0, f"{cpu():.1f} {delay():.1f} {faults()}"); return real_child(*a, **k)
def batch(*a, **k):
    mark("batch_start", 0, f"{cpu():.1f} {delay():.1f}"); r = real_batch(*a, **k)
    mark("batch_end", 0, f"{cpu():.1f} {delay():.1f} {faults()}"); return r
def decode(data):
    r = real_decode(data); mark("result"); return r
def learn(*a, **k):
    t = time.monotonic(); r = real_learn(*a, **k); mark("meanwhile", (time.monotonic() - t) * 1000); return r
def ckpt(*a, **k):
    t = time.monotonic(); r = real_ckpt(*a, **k); mark("checkpoint", (time.monotonic() - t) * 1000); return r
def step(mod, name, what):  # a serial step of the parent, timed: mark "step" with its name
    real = getattr(mod, name)
    def timed(*a, **k):
        t = time.monotonic(); r = real(*a, **k); mark("step", (time.monotonic() - t) * 1000, what); return r
    setattr(mod, name, timed)
import memd.ledger.files as lf
step(sc.state, "connect", "connect"); step(sc, "_roots", "settings"); step(sc, "_outside", "outside")
step(lf, "stale_sessions", "stale_sessions"); step(st, "known_sessions", "known_sessions")
real_body = sc._scan
def body(*a, **k):
    r = real_body(*a, **k); mark("body_end"); return r
sc._scan = body
st._write_batch, st._flush, sc._ingest_parallel, sc.scan_home = write_batch, flush, par, scan
wk.run, wk._child, sc._ingest_batch, sc._decode_results, od.learn_cwds, sc._checkpoint = run, child, batch, decode, learn, ckpt
exec(sys.argv[4])
sys.argv = ["memd", "--home", sys.argv[1], "scan", "--json"]
from memd.__main__ import main
main()
"""


def one_round(home: str, tree: str, workers: int | None = None, events: bool = False, pre: str = "") -> dict[str, Any]:
    """One scan from a fresh ledger in a fresh process: its events parsed into phases (ms)."""
    shutil.rmtree(os.path.join(home, "memd"), ignore_errors=True)
    env = dict(os.environ) if workers is None else dict(os.environ, MEMD_SCAN_WORKERS=str(workers))
    launch = time.monotonic() * 1000
    p = subprocess.run([sys.executable, "-c", ROUND, home, tree, f"{launch:.3f}", pre], capture_output=True, text=True,
                       env=env, check=True)  # fmt: skip
    gone = time.monotonic() * 1000 - launch
    evs = [ln.split(maxsplit=5) for ln in p.stderr.splitlines() if ln.startswith("@@ ")]
    if events:
        for ev in evs:
            print(" ".join(ev[1:]))
    return phases([(float(at), int(pid), what, float(ms), rest) for _, at, pid, what, ms, *r in evs
                   for rest in [r[0] if r else ""]], gone)  # fmt: skip


def phases(evs: list[tuple[float, int, str, float, str]], gone: float) -> dict[str, Any]:
    """The events of one round (at ms, pid, what, ms, extra) as the phases of the module's docstring."""
    first: dict[str, float] = {}
    per: dict[int, dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    for at, pid, what, ms, extra in evs:
        first.setdefault(what, at)
        w = per[pid]
        if what in ("txn", "wait"):
            w[what] += ms
        elif what == "checkpoint":
            w["checkpoints"] += ms
        elif what == "meanwhile":
            w["meanwhile"] += ms
        elif what == "child_start":
            w["start"] = at
            w["cpu0"], w["delay0"], w["flt0"], w["sys0"] = map(float, extra.split())
        elif what == "batch_start":
            w.setdefault("first", at)
            w["open"] = at
            w["batches"] += 1
        elif what == "batch_end":
            w["busy"] += at - w["open"]
            w["end"] = at
            w["cpu1"], w["delay1"], w["flt1"], w["sys1"] = map(float, extra.split())
        elif what in ("fork", "parallel_end", "scan_start", "scan_end"):
            w[f"{what}_cpu"] = float(extra)
        elif what == "result":
            first["last_result"] = at
        elif what == "step" and "start" not in w:  # the parent's (a worker's connect is in its fork→first)
            at_end = "after" if "parallel_end" in first else "before"
            steps = w.setdefault("steps", {})
            key = f"{extra}{'+' if at_end == 'after' else ''}"
            steps[key] = steps.get(key, 0.0) + ms
    out: dict[str, Any] = {"wall": gone, "start": first["scan_start"]}
    kids = {pid: w for pid, w in per.items() if "start" in w}
    parent = next(w for w in per.values() if "scan_start_cpu" in w)
    # the scan's CPU, scan_home's start to its return: the parent's and every worker's
    out["scan_cpu"] = (
        parent["scan_end_cpu"] - parent["scan_start_cpu"] + sum(w["cpu1"] - w["cpu0"] for w in kids.values())
    )
    if "fork" not in first or not kids:
        out["after"] = first["scan_end"] - first["scan_start"]
        out["exit"] = gone - first["scan_end"]
        return out
    fork = first["fork"]
    out["before_fork"] = fork - first["scan_start"]
    ends = sorted(w["end"] for w in kids.values())
    out["workers"] = [
        {"fork→first": w["first"] - fork, "busy": w["busy"], "wait": w["wait"], "txn": w["txn"],
         "idle": w["end"] - w["first"] - w["busy"], "batches": int(w["batches"]),
         "cpu": w["cpu1"] - w["cpu0"], "sys": w["sys1"] - w["sys0"], "faults": w["flt1"] - w["flt0"], "delay": w["delay1"] - w["delay0"], "done": w["end"] - fork}
        for w in kids.values()
    ]  # fmt: skip
    out["imbalance"] = ends[-1] - ends[0]
    out["collect"] = first["parallel_end"] - ends[-1]
    out["parent_cpu_in_parallel"] = parent["parallel_end_cpu"] - parent["fork_cpu"]
    out["meanwhile"] = parent["meanwhile"]
    out["checkpoints"] = parent["checkpoints"]
    out["parallel"] = first["parallel_end"] - fork
    out["after"] = first["scan_end"] - first["parallel_end"]
    out["close"] = first["scan_end"] - first["body_end"]  # the ledger's close: its last checkpoint
    out["steps"] = parent.get("steps", {})
    out["exit"] = gone - first["scan_end"]
    out["i27i4"] = {"txn": sum(w["txn"] for w in kids.values()), "wait": sum(w["wait"] for w in kids.values()),
                    "tail": first["scan_end"] - first.get("last_result", first["parallel_end"])}  # fmt: skip
    return out


def show(r: dict[str, Any]) -> str:
    """One round's phases on a few lines."""
    lines = []
    if "i27i4" in r:
        s = r["i27i4"]
        lines.append(f"write transactions {s['txn']:.0f} ms, turn waits {s['wait']:.0f} ms, sum "
                     f"{s['txn'] + s['wait']:.0f} ms, tail {s['tail']:.0f} ms")  # fmt: skip
    head = [f"wall {r['wall']:.0f}", f"start {r['start']:.0f}"]
    if "before_fork" in r:
        head += [f"before_fork {r['before_fork']:.0f}", f"parallel {r['parallel']:.0f}",
                 f"imbalance {r['imbalance']:.0f}", f"collect {r['collect']:.0f}"]  # fmt: skip
    head += [f"after {r['after']:.0f}", f"exit {r['exit']:.0f}", f"scan_cpu {r['scan_cpu']:.0f}"]
    lines.append(" | ".join(head) + f" | load {os.getloadavg()[0]:.2f}")
    for w in r.get("workers", []):
        lines.append("  worker " + ", ".join(f"{k} {v:.0f}" for k, v in w.items()))
    if r.get("steps"):
        lines.append("  steps " + ", ".join(f"{k} {v:.1f}" for k, v in r["steps"].items()) + f", close {r['close']:.1f}"
                     + "  (+: after the workers)")  # fmt: skip
    if "parent_cpu_in_parallel" in r:
        lines.append(f"  parent cpu in parallel {r['parent_cpu_in_parallel']:.0f}, meanwhile {r['meanwhile']:.0f}, "
                     f"checkpoints {r['checkpoints']:.0f}")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("home")
    ap.add_argument("--tree", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None, help="MEMD_SCAN_WORKERS for the scan (default: unset)")
    ap.add_argument("--events", action="store_true", help="print every event too")
    ap.add_argument(
        "--pre",
        action="append",
        default=[],
        metavar="NAME=STMT",
        help="a variant: a Python statement run before the scan (e.g. a constant changed); "
        "several are alternated round by round, each round running every one",
    )
    args = ap.parse_args()
    variants = [v.split("=", 1) for v in args.pre] or [["", ""]]
    if any(len(v) != 2 or not v[0].isidentifier() for v in variants if args.pre):
        ap.error("--pre takes NAME=STMT")
    tree = os.path.abspath(args.tree) if args.tree else ""
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
    for n in range(args.rounds):
        for name, stmt in variants if n % 2 == 0 else variants[::-1]:
            r = one_round(args.home, tree, args.workers, args.events, stmt)
            rounds[name].append(r)
            print((f"[{name}] " if name else "") + show(r), flush=True)
    keys = ("wall", "start", "before_fork", "parallel", "imbalance", "collect", "after", "exit", "scan_cpu")
    for name, rs in rounds.items():
        cols = [f"{k} {statistics.median(r[k] for r in rs):.0f}" for k in keys if all(k in r for r in rs)]
        if all("workers" in r for r in rs):
            ws = [w for r in rs for w in r["workers"]]
            cols += [
                f"{k} {statistics.median(w[k] for w in ws):.0f}"
                for k in ("busy", "cpu", "delay", "txn", "wait", "idle")
            ]
        print((f"[{name}] " if name else "") + "median " + " | ".join(cols))


if __name__ == "__main__":
    main()
